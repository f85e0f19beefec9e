package wire

import _ "github.com/vig-edge/vig/agent/gateway"
