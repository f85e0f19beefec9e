// Package netopt is the only place vig opens sockets. Every TCP connection it accepts
// or dials has TCP_NODELAY set explicitly and then read back with getsockopt: a
// connection on which Nagle's algorithm is still on (40 ms stalls with delayed ACKs)
// is refused, logged and counted, never kept by default. Unix-socket listeners replace
// a stale socket file safely and get mode 0660.
package netopt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Stats counts what netopt opened. One Stats is shared by all the listeners and
// dialers of a vig process; the metrics package exports it.
type Stats struct {
	TCPAccepted, TCPDialed   atomic.Uint64
	UnixAccepted, UnixDialed atomic.Uint64
	NoDelayVerified          atomic.Uint64 // TCP connections whose TCP_NODELAY read back as on
	NoDelayFailed            atomic.Uint64 // TCP connections refused: NODELAY could not be set or verified
	// UnixSendBuffer is the send buffer the kernel granted the last Unix-socket
	// connection (bytes, as SO_SNDBUF reads back), after asking for UnixBuffer.
	UnixSendBuffer atomic.Int64
}

// UnixBuffer is the send and receive buffer size asked for on Unix-socket
// connections. The kernel's default (net.core.wmem_default, 208 KiB on most
// systems) splits a 6 MB camera frame into ~30 sleeps and wake-ups of the sender;
// a buffer of a few frames lets it cross in one go. The kernel caps the request at
// net.core.wmem_max / rmem_max; what was granted is recorded in Stats.
var UnixBuffer = 4 << 20

// count records an opened connection by network and role.
func (st *Stats) count(c net.Conn, accepted bool) {
	_, tcp := c.(*net.TCPConn)
	switch {
	case tcp && accepted:
		st.TCPAccepted.Add(1)
	case tcp:
		st.TCPDialed.Add(1)
	case accepted:
		st.UnixAccepted.Add(1)
	default:
		st.UnixDialed.Add(1)
	}
}

// ErrNoDelay is returned (wrapped) for a TCP connection on which TCP_NODELAY is not on.
var ErrNoDelay = errors.New("TCP_NODELAY not in effect")

// Listen opens a listener. network is "tcp" (address host:port) or "unix" (address
// a path, or "@name" for Linux's abstract namespace). st may be nil.
func Listen(network, address string, st *Stats) (net.Listener, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		return &listener{Listener: ln, st: statsOrDiscard(st)}, nil
	case "unix":
		ln, err := listenUnix(address)
		if err != nil {
			return nil, err
		}
		return &listener{Listener: ln, st: statsOrDiscard(st)}, nil
	}
	return nil, fmt.Errorf("netopt: network %q: use tcp or unix", network)
}

// ListenAddr is Listen for vig's address notation: "unix:PATH" or host:port.
func ListenAddr(address string, st *Stats) (net.Listener, error) {
	network, addr := Split(address)
	return Listen(network, addr, st)
}

// Split maps vig's address notation to a network and an address: "unix:PATH" is a
// Unix socket, anything else TCP.
func Split(address string) (network, addr string) {
	if p, ok := strings.CutPrefix(address, "unix://"); ok {
		return "unix", p
	}
	if p, ok := strings.CutPrefix(address, "unix:"); ok {
		return "unix", p
	}
	return "tcp", address
}

type listener struct {
	net.Listener
	st       *Stats
	lastWarn atomic.Int64 // unix ns of the last out-of-fds warning
}

// Accept returns the next connection with TCP_NODELAY verified. A TCP connection that
// fails verification is closed and counted, and Accept moves on to the next one: one
// bad socket must not stop the server.
//
// When the process is out of file descriptors (EMFILE, ENFILE: a connection flood,
// or a low ulimit -n) Accept waits and tries again, 5 ms doubling to 1 s, as
// net/http's server does: the listener is fine, and connections that close make
// room. Returning the error would stop the server for good.
func (l *listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			if now := time.Now().UnixNano(); now-l.lastWarn.Load() > int64(10*time.Second) {
				l.lastWarn.Store(now)
				slog.Warn("accept: out of file descriptors, waiting for connections to close; raise the limit (ulimit -n, or LimitNOFILE= in the systemd unit) if this is not a flood",
					"listener", l.Addr().String(), "err", err)
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		if err != nil {
			return nil, err
		}
		delay = 0
		l.st.count(c, true)
		if err := l.st.enforce(c); err != nil {
			slog.Error("refusing accepted connection", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			continue
		}
		return withPeer(c), nil
	}
}

// Dial connects with the same guarantees as Listen. st may be nil.
func Dial(ctx context.Context, network, address string, st *Stats) (net.Conn, error) {
	st = statsOrDiscard(st)
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	st.count(c, false)
	if err := st.enforce(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// DialAddr is Dial for vig's address notation ("unix:PATH" or host:port); its shape is
// that of grpc.WithContextDialer.
func (st *Stats) DialAddr(ctx context.Context, address string) (net.Conn, error) {
	network, addr := Split(address)
	return Dial(ctx, network, addr, st)
}

// enforce sets TCP_NODELAY on a TCP connection and verifies it took effect, and
// sizes a Unix-socket connection's buffers for camera frames.
func (st *Stats) enforce(c net.Conn) error {
	if uc, ok := c.(*net.UnixConn); ok {
		st.sizeUnix(uc)
		return nil
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	err := setNoDelay(tc)
	if err == nil {
		err = verifyNoDelay(tc)
	}
	if err != nil {
		st.NoDelayFailed.Add(1)
		return fmt.Errorf("netopt: %s -> %s: %w", c.LocalAddr(), c.RemoteAddr(), err)
	}
	st.NoDelayVerified.Add(1)
	return nil
}

// sizeUnix asks for UnixBuffer-sized buffers; best effort: the kernel caps them, and
// a smaller buffer only costs wake-ups, so a failure is recorded, not fatal.
func (st *Stats) sizeUnix(uc *net.UnixConn) {
	// Errors are ignored on purpose: the granted size read back below is the
	// outcome that matters, and it is exported.
	uc.SetWriteBuffer(UnixBuffer)
	uc.SetReadBuffer(UnixBuffer)
	if raw, err := uc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			if n, err := getSendBuffer(fd); err == nil {
				st.UnixSendBuffer.Store(int64(n))
			}
		})
	}
}

// NoDelay reads TCP_NODELAY back from a TCP connection.
func NoDelay(tc *net.TCPConn) (bool, error) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return false, err
	}
	var on bool
	var serr error
	if err := raw.Control(func(fd uintptr) { on, serr = getNoDelay(fd) }); err != nil {
		return false, err
	}
	return on, serr
}

func verifyNoDelay(tc *net.TCPConn) error {
	on, err := NoDelay(tc)
	if err != nil {
		return fmt.Errorf("reading TCP_NODELAY back: %w", err)
	}
	if !on {
		return ErrNoDelay
	}
	return nil
}

// setNoDelay is a variable so that tests can simulate a socket on which the option
// does not stick, and see the verification catch it.
var setNoDelay = func(tc *net.TCPConn) error { return tc.SetNoDelay(true) }

var discard Stats

func statsOrDiscard(st *Stats) *Stats {
	if st == nil {
		return &discard
	}
	return st
}

// listenUnix listens on a Unix socket. A socket file left behind by a process that
// died is removed, but only after a connection attempt shows nobody is listening on
// it; a live socket or a file that is not a socket is never removed.
func listenUnix(path string) (net.Listener, error) {
	if strings.HasPrefix(path, "@") {
		return listenAbstract(path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("netopt: %s exists and is not a socket; remove it or choose another listen.unix path", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("netopt: %s: another process is listening on it (is vig already running?)", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("netopt: removing stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The listener removes the file when closed (net.UnixListener's default).
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("netopt: chmod 0660 %s: %w", path, err)
	}
	return ln, nil
}
