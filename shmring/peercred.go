package shmring

import (
	"net"

	"github.com/vig-edge/vig/netopt"
)

// peerCred reads the peer's pid/uid/gid with netopt's SO_PEERCRED reader.
func peerCred(c *net.UnixConn) (PeerCred, error) {
	p, err := netopt.PeerCredentials(c)
	if err != nil {
		return PeerCred{}, err
	}
	return PeerCred{PID: p.PID, UID: p.UID, GID: p.GID}, nil
}
