package netopt

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// Blocking returns c with reads that block in the kernel, on the calling thread,
// instead of parking the goroutine on Go's netpoller.
//
// Go's netpoller reads a socket until EAGAIN, parks the goroutine, waits in
// epoll_pwait, and wakes another thread to run it when data arrives; with the
// scheduler's spinning threads that is three to four syscalls and one or two
// futex wake-ups per read, on top of the read itself. A connection that carries a
// request every few milliseconds (a sensor's, or vig's to its backend) does better
// with a thread of its own that sleeps in read(2) until the bytes are there: one
// syscall and one wake-up per message, and no other thread involved. The cost is
// an OS thread per connection while a read is pending, so callers reserve it for a
// bounded number of connections.
//
// Writes on the returned connection block in the kernel too; TryWriter still never
// blocks (it sends with MSG_DONTWAIT). Read deadlines do not apply to a blocking
// read: set them, and read what must be bounded, before calling Blocking. Close
// shuts the socket down first, which wakes a read that is pending.
func Blocking(c net.Conn) (net.Conn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("netopt: %T is not a socket: %w", c, errors.ErrUnsupported)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = setBlocking(fd) }); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("netopt: clearing O_NONBLOCK: %w", serr)
	}
	return &blockingConn{Conn: c, rc: rc}, nil
}

type blockingConn struct {
	net.Conn
	rc syscall.RawConn
}

func (c *blockingConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	for {
		err := c.rc.Read(func(fd uintptr) bool {
			n, rerr = readFD(fd, p)
			return true // the read itself waited: never park on the netpoller
		})
		if err != nil {
			return 0, err
		}
		if errors.Is(rerr, syscall.EINTR) {
			continue
		}
		break
	}
	switch {
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Addr: c.RemoteAddr(), Err: rerr}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *blockingConn) Close() error {
	// close(2) does not wake a read(2) pending on another thread; shutdown does.
	c.rc.Control(func(fd uintptr) { shutdownFD(fd) }) // fails only when already closed
	return c.Conn.Close()
}

// SyscallConn exposes the socket (for TryWriter).
func (c *blockingConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// Unwrap returns the connection Blocking was given (its RemoteAddr carries the
// peer's credentials on Unix sockets).
func (c *blockingConn) Unwrap() net.Conn { return c.Conn }
