//go:build !linux

package netopt

import (
	"errors"
	"fmt"
	"runtime"
)

// peerCred: SO_PEERCRED is Linux's; elsewhere the peer stays unknown, and regions
// bound to a uid are refused to it.
func peerCred(fd uintptr) (uid, gid uint32, pid int32, err error) {
	return 0, 0, 0, fmt.Errorf("SO_PEERCRED: %w on %s", errors.ErrUnsupported, runtime.GOOS)
}
