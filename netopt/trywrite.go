package netopt

import (
	"errors"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// TryWriter writes to a connection without ever parking the calling goroutine.
//
// vig's gateway writes an answer on the goroutine that has it — the reader of
// another connection (the backend's) — instead of handing it to a writer goroutine:
// one thread hand-off less per request. A client that stops reading must not stall
// that goroutine, and with it every other client: TryWriter takes what the socket
// accepts now and says how much that was; the caller queues the rest for a goroutine
// of its own that may block.
type TryWriter struct {
	rc syscall.RawConn

	// The write's arguments and results, for write (a method value made once:
	// a closure per call would allocate). A TryWriter is used by one goroutine
	// at a time.
	batch [][]byte
	k     int
	werr  error
	write func(fd uintptr) bool
	iov   []unix.Iovec

	// The same for WriteAll, which runs on another goroutine than Writev (never
	// at the same time: the caller writes through one or the other).
	all allWrite
}

type allWrite struct {
	batch [][]byte
	k     int
	werr  error
	write func(fd uintptr) bool
	iov   []unix.Iovec
}

func (a *allWrite) writeFD(fd uintptr) bool {
	for {
		a.k, a.werr = rawSendmsg(int(fd), a.batch, &a.iov)
		if a.werr != syscall.EINTR {
			return a.werr != syscall.EAGAIN // EAGAIN: wait in the netpoller, then again
		}
	}
}

// NewTryWriter returns a TryWriter for c. A connection that is not a socket (a
// wrapper, a TLS connection) gets one that takes nothing: the caller's own
// blocking path writes everything.
func NewTryWriter(c net.Conn) (*TryWriter, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return &TryWriter{}, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	w := &TryWriter{rc: rc}
	w.write = w.writeFD
	w.all.write = w.all.writeFD
	return w, nil
}

func (w *TryWriter) writeFD(fd uintptr) bool {
	w.k, w.werr = rawSendmsg(int(fd), w.batch, &w.iov)
	return true // never wait for writability: the caller queues the rest
}

// maxIOV is the kernel's limit of iovecs per writev (UIO_MAXIOV).
const maxIOV = 1024

// Writev writes bufs in order, as much as the socket takes without blocking, with
// as few writev calls as the kernel's iovec limit allows. It returns the number of
// bytes written; n smaller than the total with a nil error means the socket's send
// buffer is full.
func (w *TryWriter) Writev(bufs [][]byte) (n int, err error) {
	if w.rc == nil {
		return 0, nil
	}
	for len(bufs) > 0 {
		batch := bufs[:min(len(bufs), maxIOV)]
		want := 0
		for _, b := range batch {
			want += len(b)
		}
		w.batch = batch
		cerr := w.rc.Write(w.write)
		k, werr := w.k, w.werr
		w.batch, w.werr = nil, nil
		if cerr != nil {
			return n, cerr
		}
		if k > 0 {
			n += k
		}
		if werr != nil {
			if errors.Is(werr, syscall.EAGAIN) {
				return n, nil
			}
			if errors.Is(werr, syscall.EINTR) {
				continue
			}
			return n, werr
		}
		if k < want {
			return n, nil
		}
		bufs = bufs[len(batch):]
	}
	return n, nil
}

// ErrNotSocket: the connection is not a socket, so TryWriter cannot write it;
// the caller writes through the connection itself.
var ErrNotSocket = errors.New("netopt: not a socket connection")

// WriteAll writes every byte of bufs, in order, waiting in Go's netpoller while
// the socket's send buffer is full and honouring the connection's write
// deadline. Its writes are raw syscalls like Writev's: a large message that
// fills the socket no longer goes through the runtime's ordinary syscall path,
// whose entry woke the monitor thread and handed the goroutine between threads
// (a 6.2 MB request cost futex, nanosleep and sched_yield calls in every round).
// It consumes bufs (the slices and their elements) as it goes.
func (w *TryWriter) WriteAll(bufs [][]byte) error {
	if w.rc == nil {
		return ErrNotSocket
	}
	a := &w.all
	for len(bufs) > 0 {
		if len(bufs[0]) == 0 {
			bufs = bufs[1:]
			continue
		}
		a.batch = bufs[:min(len(bufs), maxIOV)]
		cerr := w.rc.Write(a.write)
		k, werr := a.k, a.werr
		a.batch, a.werr = nil, nil
		if cerr != nil {
			return cerr // closed, or the write deadline passed
		}
		if werr != nil {
			return werr
		}
		if k <= 0 {
			return io.ErrShortWrite // the kernel took nothing and said nothing: never loop on it
		}
		for k > 0 && len(bufs) > 0 {
			if k < len(bufs[0]) {
				bufs[0] = bufs[0][k:]
				break
			}
			k -= len(bufs[0])
			bufs[0] = nil
			bufs = bufs[1:]
		}
	}
	return nil
}
