package shmring

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// DefaultAddress is where vig listens for ring clients: an abstract Unix
// socket (no file to clean up, no directory permissions to get right). The C
// and Python clients, docs/clients.md and examples/demo.yaml use the same name.
const DefaultAddress = "@vig-ring"

// FallbackAddress is the filesystem socket used where the abstract namespace is
// not allowed (some sandboxes deny it).
func FallbackAddress() string { return filepath.Join(os.TempDir(), "vig-ring.sock") }

const defaultHandshakeTimeout = 2 * time.Second

// endpoint is what both sides of a session share: the region, the socket that
// signals liveness, and the closed flag every sleeper re-checks.
type endpoint struct {
	region *Region
	conn   *net.UnixConn
	peer   PeerCred
	log    *slog.Logger
	closed atomic.Bool
	done   chan struct{}
	// bells are the session's doorbells, in handshake order (request ready,
	// request space, response ready); closed at shutdown.
	bells [numBells]*bell

	// refs counts users of the mapping: 1 for the open session, 1 per call in
	// progress, 1 per payload view handed out. The mapping is unmapped when it
	// drops to zero, so closing never pulls memory from under a reader.
	refs      atomic.Int64
	closeOnce sync.Once
	closeErr  error
}

func newEndpoint(region *Region, conn *net.UnixConn, peer PeerCred, log *slog.Logger, bells [numBells]*bell) *endpoint {
	e := &endpoint{region: region, conn: conn, peer: peer, log: log, done: make(chan struct{}), bells: bells}
	e.refs.Store(1)
	return e
}

// acquire takes a reference for a call touching the mapping.
func (e *endpoint) acquire() error {
	for {
		n := e.refs.Load()
		if n <= 0 || e.closed.Load() {
			if e.region.Quarantined() {
				return ErrQuarantined
			}
			return ErrClosed
		}
		if e.refs.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// pin takes a reference even while closing (used to keep a view valid).
func (e *endpoint) pin() { e.refs.Add(1) }

func (e *endpoint) release() {
	if e.refs.Add(-1) == 0 {
		e.region.Close()
	}
}

// guard runs f on the mapping, converting faults (and EFAULT from a syscall
// on a truncated mapping) into ErrQuarantined.
func (e *endpoint) guard(f func() error) error {
	err := e.region.Guard(f)
	if errors.Is(err, syscall.EFAULT) {
		e.region.faulted.Store(true)
		err = ErrQuarantined
	}
	return err
}

// watch blocks on the socket until the peer goes away, then ends the session.
// It is idle in the netpoller meanwhile: no CPU, no timers. onMsg, when set,
// gets each message the peer sends (with the descriptors it carried, which
// onMsg then owns); an error from it ends the session. Without onMsg messages
// are ignored rather than trusted, and their descriptors closed.
func (e *endpoint) watch(onEOF func(), onMsg func(b []byte, fds []int) error) {
	defer close(e.done)
	var b [regionMsgSize + 1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := e.conn.ReadMsgUnix(b[:], oob)
		if err != nil {
			if !e.closed.Load() {
				e.log.Info("shmring: peer disconnected", "pid", e.peer.PID, "uid", e.peer.UID, "reason", err)
			}
			onEOF()
			return
		}
		fds, ferr := parseRights(oob[:oobn])
		if onMsg == nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			continue
		}
		if ferr == nil && flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
			ferr = errors.New("a truncated message on the session socket")
		}
		if ferr == nil {
			ferr = onMsg(b[:n], fds)
		} else {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
		if ferr != nil {
			e.log.Warn("shmring: disconnecting peer", "pid", e.peer.PID, "uid", e.peer.UID, "reason", ferr)
			onEOF()
			return
		}
	}
}

// shutdown marks the session closed and wakes every local sleeper: closing a
// doorbell ends a wait parked on it, and the sleeper then finds the closed flag
// (set first). The peer learns of the end from the socket.
func (e *endpoint) shutdown() error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		for _, b := range e.bells {
			b.close()
		}
		e.closeErr = e.conn.Close()
		e.release()
	})
	return e.closeErr
}

// Done is closed when the peer has gone away or the session was closed.
func (e *endpoint) Done() <-chan struct{} { return e.done }

// truncUTF8 makes s valid UTF-8 of at most n bytes, cutting at a rune
// boundary, so that a message always passes the peer's decoder.
func truncUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func addrString(a string) string {
	if a == "" {
		return DefaultAddress
	}
	return a
}

func unixAddr(a string) *net.UnixAddr { return &net.UnixAddr{Name: a, Net: "unixpacket"} }

func wrapOp(op, addr string, err error) error { return fmt.Errorf("shmring: %s %s: %w", op, addr, err) }
