// Package frontend imports the gateway: a known, allowed violation.
package frontend

import _ "github.com/vig-edge/vig/agent/gateway"
