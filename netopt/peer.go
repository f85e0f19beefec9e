package netopt

import (
	"fmt"
	"net"
	"syscall"
)

// UnixPeer is the remote address of an accepted Unix-socket connection: the peer
// process's credentials as the kernel reported them when it connected (SO_PEERCRED).
// gRPC exposes it as the peer address, so handlers can authorise by uid.
type UnixPeer struct {
	Path     string
	UID, GID uint32
	PID      int32
	Known    bool // credentials could be read
}

func (p UnixPeer) Network() string { return "unix" }

func (p UnixPeer) String() string {
	if !p.Known {
		return p.Path + " (peer unknown)"
	}
	return fmt.Sprintf("%s (pid %d uid %d)", p.Path, p.PID, p.UID)
}

// PeerUID returns the peer's uid when it is known.
func (p UnixPeer) PeerUID() (uint32, bool) { return p.UID, p.Known }

// peerConn is an accepted Unix-socket connection that reports its peer.
type peerConn struct {
	net.Conn
	peer UnixPeer
}

func (c *peerConn) RemoteAddr() net.Addr { return c.peer }

// SyscallConn exposes the socket (for TryWriter).
func (c *peerConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// withPeer wraps an accepted Unix-socket connection with its peer's credentials.
func withPeer(c net.Conn) net.Conn {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c
	}
	p := UnixPeer{Path: uc.LocalAddr().String()}
	if raw, err := uc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) { p.UID, p.GID, p.PID, p.Known = peerCred(fd) })
	}
	return &peerConn{Conn: c, peer: p}
}
