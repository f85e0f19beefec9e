//go:build !linux

package shmring

import (
	"errors"
	"fmt"
	"net"
)

func peerCred(c *net.UnixConn) (PeerCred, error) {
	return PeerCred{}, fmt.Errorf("SO_PEERCRED: %w (Linux only)", errors.ErrUnsupported)
}
