package gateway

import (
	"errors"
	"io"
	"iter"
	"net"
	"sync"
	"sync/atomic"

	"github.com/vig-edge/vig/netopt"
)

// The dedicated hot path (cpu.hot_path: dedicated): every hot connection — the
// backend's and up to HotConns clients' — is read by one goroutine, an event loop
// of vig's own (netopt.Poller) that waits in epoll_wait and reads each readable
// connection once. A request then costs a wait and a read on each side and the two
// writes, on one thread, with no goroutine readied and no other thread woken:
// Go's scheduler takes no part in it.
//
// Each connection's frame reader is the same code as on the shared path, run as a
// coroutine (iter.Pull) that the loop resumes when the connection is readable and
// that yields back whenever it would wait for bytes. Nothing on a connection's
// read path may block on another connection, since both are served by the loop:
// the one wait of that kind (looking up a shared-memory region vig has never seen)
// runs on a goroutine of its own (see sconn.infer).

// HotConns bounds the client connections the loop serves; further ones get a
// goroutine each, as on the shared path.
var HotConns int32 = 64

// eventLoop is the dedicated hot path's loop.
type eventLoop struct {
	p       *netopt.Poller
	clients atomic.Int32
	done    chan error
}

func startLoop(onThread func(run func()), onWake func()) (*eventLoop, error) {
	p, err := netopt.NewPoller()
	if err != nil {
		return nil, err
	}
	if onWake != nil {
		p.OnWake(onWake)
	}
	l := &eventLoop{p: p, done: make(chan error, 1)}
	run := func() { l.done <- p.Run() }
	if onThread != nil {
		go onThread(run) // on the placed hot thread (cpu.Thread.Do)
	} else {
		go run()
	}
	return l, nil
}

func (l *eventLoop) close() error {
	l.p.Close()
	return <-l.done
}

// loopConn is a connection served by the loop: its reader side runs as a
// coroutine; Read yields to the loop instead of waiting.
type loopConn struct {
	net.Conn

	mu      sync.Mutex
	src     *netopt.Source // set once registered
	closing bool           // Close came before registration

	started atomic.Bool // the loop may resume the coroutine
	body    func()
	next    func() (struct{}, bool)
	yield   func(struct{}) bool
	drained bool // the last read took all the socket had: wait before reading
	ended   bool
}

// run registers the connection with the loop and starts body as its coroutine,
// on the loop. body reads through lc and must return once a read fails.
func (lc *loopConn) run(l *eventLoop, body func()) error {
	lc.body = body
	// The loop may call Ready as soon as the connection is registered: it is
	// ignored until started is set; Poke then starts the coroutine (its first
	// frames may be waiting already).
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closing {
		return net.ErrClosed
	}
	src, err := l.p.Add(lc.Conn, lc)
	if err != nil {
		return err
	}
	lc.src = src
	lc.started.Store(true)
	src.Poke()
	return nil
}

// Ready is the loop telling the connection it is readable (or closed).
func (lc *loopConn) Ready() {
	if lc.ended || !lc.started.Load() {
		return
	}
	if lc.next == nil {
		// Created here, on the loop's goroutine: a coroutine must be resumed
		// with the thread-lock state it was created with (the loop's thread
		// may be locked and placed).
		lc.next, _ = iter.Pull(func(yield func(struct{}) bool) {
			lc.yield = yield
			lc.body()
		})
	}
	lc.drained = false
	if _, ok := lc.next(); !ok {
		lc.ended = true
		lc.src.Close()
	}
}

// Read returns what the socket holds, yielding to the loop while it holds nothing.
func (lc *loopConn) Read(p []byte) (int, error) {
	for {
		if !lc.drained {
			n, err := lc.src.Read(p)
			if !errors.Is(err, netopt.ErrWouldBlock) {
				lc.drained = err == nil && n < len(p)
				return n, err
			}
		}
		if !lc.yield(struct{}{}) {
			return 0, io.ErrClosedPipe
		}
	}
}

// Writev and WriteAll write through the loop's socket (the connection's own
// descriptor was handed over when it was registered).
func (lc *loopConn) Writev(bufs [][]byte) (int, error) { return lc.source().Writev(bufs) }
func (lc *loopConn) WriteAll(bufs [][]byte) error      { return lc.source().WriteAll(bufs) }

func (lc *loopConn) source() *netopt.Source {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.src
}

// Close asks the loop to close the connection; a Read pending in the coroutine
// then fails.
func (lc *loopConn) Close() error {
	lc.mu.Lock()
	src := lc.src
	if src == nil {
		lc.closing = true // not registered (yet): run refuses to
	}
	lc.mu.Unlock()
	if src == nil {
		return lc.Conn.Close()
	}
	src.Close()
	return nil
}
