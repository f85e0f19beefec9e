package leak

import _ "github.com/vig-edge/vig/agent/doctor"
