// Package config is clean.
package config

import _ "github.com/vig-edge/vig/netopt"
