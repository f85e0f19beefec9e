// Package sched breaks its purity twice.
package sched

import (
	_ "fmt"
	_ "net/netip"
	_ "time"

	_ "github.com/vig-edge/vig/agent/config"
	_ "github.com/vig-edge/vig/agent/gateway"
)
