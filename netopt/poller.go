package netopt

import (
	"errors"
	"net"
	"syscall"
)

// Poller is an event loop of vig's own: an epoll instance whose waits and reads run
// on one goroutine, the one that calls Run.
//
// Go's netpoller reads a socket until EAGAIN, parks the reading goroutine, and,
// once epoll reports the socket, readies it on some thread and wakes another thread
// to spin for more work: for a request that crosses two connections that is four
// reads, four epoll waits and a handful of futex and nanosleep calls of the
// scheduler. A Poller instead waits in epoll_wait (level-triggered) on its own
// goroutine and hands each readable connection to its handler on that goroutine:
// one wait, one read per readable event, no goroutine readied, no thread woken.
// Writes stay with the caller (TryWriter).
//
// Handlers run on the loop and must not block: anything that waits for another
// connection's data would wait for the loop itself.
type Poller struct{ p *poller }

// Handler is told that its connection is readable (or hung up, or closed with
// Source.Close). It runs on the Poller's goroutine.
type Handler interface{ Ready() }

// Source is a connection registered with a Poller.
type Source struct{ s *source }

// ErrWouldBlock is returned by Source.Read when nothing is there to read now.
var ErrWouldBlock = errors.New("netopt: no data ready")

// NewPoller creates a Poller. It wraps errors.ErrUnsupported where the OS has no
// epoll.
func NewPoller() (*Poller, error) {
	p, err := newPoller()
	if err != nil {
		return nil, err
	}
	return &Poller{p: p}, nil
}

// Add registers c (a TCP or Unix socket) with h. The Poller owns the socket from
// now on (c itself is closed; only its addresses stay of use): read and write it
// through the Source, close it with Source.Close, which the loop carries out.
func (p *Poller) Add(c net.Conn, h Handler) (*Source, error) {
	s, err := p.p.add(c, h)
	if err != nil {
		return nil, err
	}
	return &Source{s: s}, nil
}

// OnWake, set before Run, is called on the loop's thread each time the loop wakes
// (a placement sampler: which CPU the loop runs on, at what clock).
func (p *Poller) OnWake(f func()) { p.p.onWake = f }

// Run serves events until Close; it returns nil then.
func (p *Poller) Run() error { return p.p.run() }

// Close stops Run; registered sources are closed and their handlers told once
// more (their reads then fail).
func (p *Poller) Close() error { return p.p.close() }

// Read reads what the socket holds now, without waiting: ErrWouldBlock when
// nothing, io.EOF at the end, net.ErrClosed once Close was called.
func (s *Source) Read(b []byte) (int, error) { return s.s.read(b) }

// Writev writes bufs without waiting, as TryWriter.Writev does.
func (s *Source) Writev(bufs [][]byte) (int, error) { return s.s.writev(bufs) }

// WriteAll writes bufs, waiting for room in the socket as long as it takes; it
// blocks its thread (for a flusher goroutine, never for the loop).
func (s *Source) WriteAll(bufs [][]byte) error { return s.s.writeAll(bufs) }

// Poke makes the loop call the handler once, as if the connection were readable.
func (s *Source) Poke() { s.s.poke() }

// Close asks the loop to close the connection; the handler is told once more, on
// the loop, and its reads fail from then on. Safe from any goroutine.
func (s *Source) Close() { s.s.close() }

// Pollable reports whether c can be served by a Poller: a TCP or Unix socket (not
// a wrapper around one, such as a TLS connection, whose bytes are not the
// socket's).
func Pollable(c net.Conn) bool {
	_, ok := c.(syscall.Conn)
	return ok
}
