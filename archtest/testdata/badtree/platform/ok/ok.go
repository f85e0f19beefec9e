// Package ok imports what platform/ may import: proto, netopt, the standard
// library, x/sys.
package ok

import (
	_ "os"

	_ "golang.org/x/sys/unix"

	_ "github.com/vig-edge/vig/netopt"
	_ "github.com/vig-edge/vig/proto/wire"
)
