package netopt

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

type poller struct {
	epfd   int
	wakeFD int // eventfd: Source.Close and Poller.Close wake the loop with it

	mu      sync.Mutex
	sources map[int32]*source // by fd
	closing []*source         // closed by Source.Close, for the loop to finish
	poked   []*source         // Source.Poke: handlers to call once
	closed  bool
	done    chan struct{}
	onWake  func()
}

type source struct {
	p      *poller
	c      net.Conn // closed at once: kept for its addresses
	fd     int32    // a duplicate of c's socket that only the loop watches
	h      Handler
	closed atomic.Bool
	shut   sync.Once
	iov    []unix.Iovec // writev's scratch (the loop's writes)
}

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("netopt: epoll_create1: %w", err)
	}
	wfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("netopt: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wfd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wfd)
		return nil, fmt.Errorf("netopt: epoll_ctl: %w", err)
	}
	return &poller{epfd: epfd, wakeFD: wfd, sources: map[int32]*source{}, done: make(chan struct{})}, nil
}

func (p *poller) add(c net.Conn, h Handler) (*source, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("netopt: %T is not a socket: %w", c, errors.ErrUnsupported)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	// The loop takes the socket over: a duplicate descriptor (same socket,
	// non-blocking like the original) that Go's netpoller does not know, and the
	// original closed. Otherwise the netpoller, which watches every net.Conn,
	// would wake one of Go's threads for each of its events too (every read
	// readiness, every write edge), only to find nobody waiting.
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) { fd, derr = unix.Dup(int(f)) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("netopt: dup: %w", derr)
	}
	unix.CloseOnExec(fd)
	c.Close()
	s := &source{p: p, c: c, fd: int32(fd), h: h}
	// Level-triggered: the loop reads once per event and leaves the rest for
	// the next wait, which returns at once while data is there.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: s.fd}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		unix.Close(fd)
		return nil, net.ErrClosed
	}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netopt: registering with epoll: %w", err)
	}
	p.sources[s.fd] = s
	return s, nil
}

func (p *poller) wake() {
	var one = [8]byte{1}
	unix.Write(p.wakeFD, one[:]) // EAGAIN means a wake-up is already pending
}

// run serves events until close. It never blocks in epoll_wait: it polls the
// epoll instance with a zero timeout (a raw syscall) and, when nothing is
// ready, parks in Go's netpoller on the epoll descriptor itself (an epoll fd
// is readable while it has events ready). A blocking epoll_wait is an
// ordinary syscall, and entering one wakes the runtime's monitor thread
// (sysmon), which then polls every 20 µs until the process is idle again and
// takes the loop's P away after 10 ms in the call.
func (p *poller) run() error {
	defer close(p.done)
	events := make([]unix.EpollEvent, 128)
	dup, err := unix.Dup(p.epfd)
	if err != nil {
		return fmt.Errorf("netopt: dup of the epoll fd: %w", err)
	}
	unix.CloseOnExec(dup)
	unix.SetNonblock(dup, true)
	f := os.NewFile(uintptr(dup), "netopt-epoll")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("netopt: epoll fd: %w", err)
	}
	var runErr error
	stopped := false
	err = rc.Read(func(uintptr) bool {
		for {
			n, err := epollWaitNow(p.epfd, events)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				runErr, stopped = fmt.Errorf("netopt: epoll_wait: %w", err), true
				return true
			}
			if n == 0 {
				return false // park in the netpoller until the epoll fd is readable
			}
			if p.serve(events[:n]) {
				stopped = true
				return true
			}
		}
	})
	if !stopped && err != nil {
		return fmt.Errorf("netopt: waiting on the epoll fd: %w", err)
	}
	return runErr
}

// epollWaitNow is epoll_wait with a zero timeout: it never blocks, so it is a
// raw syscall.
func epollWaitNow(epfd int, events []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// serve handles one batch of events; it reports whether the Poller was closed.
func (p *poller) serve(events []unix.EpollEvent) bool {
	if p.onWake != nil {
		p.onWake()
	}
	for _, ev := range events {
		if int(ev.Fd) == p.wakeFD {
			var b [8]byte
			unix.Read(p.wakeFD, b[:])
			continue
		}
		p.mu.Lock()
		s := p.sources[ev.Fd]
		p.mu.Unlock()
		// A closed source is told once more, by reap, never here:
		// its socket is shut down, so level-triggered epoll reports it
		// until reap deregisters it.
		if s != nil && !s.closed.Load() {
			s.h.Ready()
		}
	}
	return p.reap()
}

// reap finishes the sources closed since the last wait: each handler is told once
// more (its reads now fail), then the connection is deregistered and closed. It
// reports whether the Poller itself was closed.
func (p *poller) reap() bool {
	p.mu.Lock()
	poked := p.poked
	p.poked = nil
	p.mu.Unlock()
	for _, s := range poked {
		if !s.closed.Load() {
			s.h.Ready()
		}
	}
	p.mu.Lock()
	list := p.closing
	p.closing = nil
	closed := p.closed
	if closed {
		for _, s := range p.sources {
			if !s.closed.Swap(true) {
				list = append(list, s)
			}
		}
	}
	p.mu.Unlock()
	for _, s := range list {
		s.h.Ready()
		p.mu.Lock()
		delete(p.sources, s.fd)
		p.mu.Unlock()
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(s.fd), nil)
		s.shutdown()
		unix.Close(int(s.fd))
	}
	if closed {
		unix.Close(p.epfd)
		unix.Close(p.wakeFD)
	}
	return closed
}

func (p *poller) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.wake()
	<-p.done
	return nil
}

func (s *source) read(b []byte) (int, error) {
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := rawRead(int(s.fd), b)
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		return 0, ErrWouldBlock // the next event retries
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: s.c.LocalAddr().Network(), Addr: s.c.RemoteAddr(), Err: err}
	case n == 0 && len(b) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func (s *source) writev(bufs [][]byte) (int, error) { return s.writevWith(bufs, &s.iov) }

// writevWith is writev with the caller's iovec scratch.
func (s *source) writevWith(bufs [][]byte, iov *[]unix.Iovec) (int, error) {
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	n := 0
	for len(bufs) > 0 {
		batch := bufs[:min(len(bufs), maxIOV)]
		want := 0
		for _, b := range batch {
			want += len(b)
		}
		k, err := rawSendmsg(int(s.fd), batch, iov)
		if k > 0 {
			n += k
		}
		switch {
		case errors.Is(err, unix.EAGAIN):
			return n, nil
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return n, &net.OpError{Op: "write", Net: s.c.LocalAddr().Network(), Addr: s.c.RemoteAddr(), Err: err}
		case k < want:
			return n, nil
		}
		bufs = bufs[len(batch):]
	}
	return n, nil
}

// writeAll writes bufs, waiting for room with poll(2) (it blocks its thread: for
// the flusher goroutine, not for the loop).
func (s *source) writeAll(bufs [][]byte) error {
	var iov []unix.Iovec
	for len(bufs) > 0 {
		n, err := s.writevWith(bufs, &iov)
		if err != nil {
			return err
		}
		for n > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
				continue
			}
			bufs[0] = bufs[0][n:]
			n = 0
		}
		if len(bufs) == 0 {
			return nil
		}
		pfd := []unix.PollFd{{Fd: s.fd, Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, 1000); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
	}
	return nil
}

// shutdown wakes whatever waits on the socket (a flusher in poll) before it is
// closed.
func (s *source) shutdown() {
	s.shut.Do(func() { unix.Shutdown(int(s.fd), unix.SHUT_RDWR) })
}

func (s *source) poke() {
	p := s.p
	p.mu.Lock()
	p.poked = append(p.poked, s)
	p.mu.Unlock()
	p.wake()
}

func (s *source) close() {
	if s.closed.Swap(true) {
		return
	}
	p := s.p
	p.mu.Lock()
	p.closing = append(p.closing, s)
	p.mu.Unlock()
	s.shutdown()
	p.wake()
}
