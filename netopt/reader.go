package netopt

import (
	"errors"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reader reads a socket connection as net.Conn.Read does — waiting for data in
// Go's netpoller, honouring the connection's read deadline — but makes the read
// itself with a raw syscall (see rawRead): on a gateway's request path that saves
// the runtime's monitor thread a wake-up per read. One goroutine reads at a time.
type Reader struct {
	c  net.Conn
	rc syscall.RawConn

	// The read's arguments and results, for read and readv (method values
	// made once).
	p     []byte
	bufs  [][]byte
	iov   []unix.Iovec
	n     int
	rerr  error
	read  func(fd uintptr) bool
	readv func(fd uintptr) bool
}

// NewReader returns a Reader for c, or c itself when c is not a socket (a
// wrapper, a TLS connection).
func NewReader(c net.Conn) io.Reader {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	r := &Reader{c: c, rc: rc}
	r.read, r.readv = r.readFD, r.readvFD
	return r
}

func (r *Reader) readvFD(fd uintptr) bool {
	for {
		r.n, r.rerr = rawReadv(int(fd), r.bufs, &r.iov)
		if r.rerr != syscall.EINTR {
			return r.rerr != syscall.EAGAIN
		}
	}
}

// ReadV reads into bufs, in order, what the socket holds (one readv),
// waiting while it holds nothing: a frame's payload and what follows it can
// land in different buffers with one syscall.
func (r *Reader) ReadV(bufs [][]byte) (int, error) {
	r.bufs = bufs
	err := r.rc.Read(r.readv)
	n, rerr := r.n, r.rerr
	r.bufs, r.rerr = nil, nil
	return r.result(n, err, rerr)
}

func (r *Reader) readFD(fd uintptr) bool {
	for {
		r.n, r.rerr = rawRead(int(fd), r.p)
		if r.rerr != syscall.EINTR {
			return r.rerr != syscall.EAGAIN // EAGAIN: wait in the netpoller, then again
		}
	}
}

// Read reads into p what the socket holds, waiting while it holds nothing.
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p
	err := r.rc.Read(r.read)
	n, rerr := r.n, r.rerr
	r.p, r.rerr = nil, nil
	return r.result(n, err, rerr)
}

func (r *Reader) result(n int, err, rerr error) (int, error) {
	switch {
	case err != nil: // closed, or the read deadline passed
		return 0, r.opError(err)
	case rerr != nil:
		return 0, r.opError(rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *Reader) opError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return err
	}
	return &net.OpError{Op: "read", Net: r.c.LocalAddr().Network(), Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: err}
}
