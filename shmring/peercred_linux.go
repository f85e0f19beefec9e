package shmring

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerCred reads the peer's pid/uid/gid with SO_PEERCRED: the kernel's record
// of who connected, which the peer cannot forge.
func peerCred(c *net.UnixConn) (PeerCred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return PeerCred{}, err
	}
	var uc *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		uc, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, err
	}
	if gerr != nil {
		return PeerCred{}, gerr
	}
	return PeerCred{PID: uc.Pid, UID: uc.Uid, GID: uc.Gid}, nil
}
