// Package gateway reaches for x/sys.
package gateway

import (
	_ "net"
	_ "os"

	_ "golang.org/x/sys/unix"

	_ "github.com/vig-edge/vig/netopt"
)
