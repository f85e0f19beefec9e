// Package android is policy, and may import the core's config.
package android

import _ "github.com/vig-edge/vig/agent/config"
