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
	p, _ := PeerCredentials(uc) // unreadable: Known stays false, and uid-bound regions are refused
	return &peerConn{Conn: c, peer: p}
}

// PeerCredentials reads the credentials of a Unix-socket connection's peer with
// SO_PEERCRED: the kernel's record of who connected, which the peer cannot forge.
// It is vig's one reader of peer credentials (the gRPC listener and the
// shared-memory rings both use it).
func PeerCredentials(uc *net.UnixConn) (UnixPeer, error) {
	p := UnixPeer{Path: uc.LocalAddr().String()}
	raw, err := uc.SyscallConn()
	if err != nil {
		return p, err
	}
	var cerr error
	if err := raw.Control(func(fd uintptr) { p.UID, p.GID, p.PID, cerr = peerCred(fd) }); err != nil {
		return p, err
	}
	if cerr != nil {
		return p, cerr
	}
	p.Known = true
	return p, nil
}

// PeerCred returns the peer's uid and gid when they are known.
func (p UnixPeer) PeerCred() (uid, gid uint32, ok bool) { return p.UID, p.GID, p.Known }
