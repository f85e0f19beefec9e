package shmring

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Doorbells (ABI version 3). A side that finds its ring empty (or full) and has
// spun long enough announces itself in the ring's waiters word and waits for
// its doorbell, an eventfd, to become readable; the other side rings the bell
// (writes 1 to the eventfd) after publishing a counter, only when the waiters
// word says somebody sleeps. vig creates a session's three eventfds and hands
// them to the client with the accepted handshake reply (see the package
// documentation).
//
// Waiting parks the goroutine in Go's netpoller: the eventfd is non-blocking
// and registered there through os.NewFile, and the read that resets it is a
// raw syscall that never blocks. Nothing on this path enters the kernel the way
// a blocking syscall does (futex_wait did, in ABI version 2), which would wake
// the runtime's monitor thread (sysmon) and set it polling until the process
// is idle again: a run of nanosleeps and context switches per message. The
// ring, written from any goroutine, is a raw write of 8 bytes.
type bell struct {
	// A bell this side waits on is registered with the netpoller (f, rc); a
	// bell it only rings is not: registered, every read of it by the peer
	// would be an EPOLLOUT edge for this process's netpoller, and one that
	// finds vig asleep in epoll_pwait wakes a thread for nothing (measured:
	// about one context switch in three of a ring request's, before the
	// ring-only bells left the netpoller).
	f  *os.File
	rc syscall.RawConn
	// fd is a ring-only bell's eventfd; mu keeps close from racing a ring
	// (an fd closed under a concurrent write could be reused by then).
	fd     int
	mu     sync.RWMutex
	closed bool
	// readFn is the netpoller callback of wait, made once so that a wait does
	// not allocate. Only one goroutine waits on a bell at a time (the ring's
	// owner rules: Recv/Next from one goroutine, Loan/Post from one), so the
	// scratch below needs no lock.
	readFn  func(fd uintptr) bool
	cond    func() (bool, error)
	parked  bool
	condOK  bool // cond held at wait's own re-check
	condErr error
	rang    atomic.Uint64 // rings through this bell (for tests)
}

// Doorbell syscalls made by this process, for the profiling mode, benchmarks
// and tests: how often a side rang its peer (each ring is one write) and how
// often a side went to sleep (each is one netpoller park).
var bellRings, bellWaits atomic.Uint64

// DoorbellCalls reports how many times this process has rung a peer's doorbell
// and waited on its own, on every ring so far.
func DoorbellCalls() (waits, rings uint64) { return bellWaits.Load(), bellRings.Load() }

// one is what a ring writes: eventfd adds it to its counter.
var one = [8]byte{1}

// newBell takes ownership of fd, an eventfd. A bell this side waits on (wait)
// is made pollable; one it only rings stays a bare descriptor.
func newBell(fd int, name string, wait bool) (*bell, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("shmring: doorbell %s: %w", name, err)
	}
	if !wait {
		return &bell{fd: fd}, nil
	}
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shmring: doorbell %s: %w", name, err)
	}
	b := &bell{f: f, rc: rc, fd: -1}
	b.readFn = func(uintptr) bool {
		if b.parked {
			return true // an edge since the first call: the caller re-checks
		}
		// First call, after the netpoller forgot earlier edges: re-check, so
		// that a ring which came before that is not waited for. A ring after
		// this check is a new edge, and the park below returns at once.
		b.parked = true
		b.condOK, b.condErr = b.cond()
		return b.condOK || b.condErr != nil
	}
	return b, nil
}

// newLocalBell is a bell whose both ends are in this process (tests, and
// sessions made in memory).
func newLocalBell(name string) (*bell, error) {
	fd, err := newEventfd()
	if err != nil {
		return nil, err
	}
	return newBell(fd, name, true)
}

// ring wakes the bell's sleeper. It never blocks: an eventfd write fails only
// when its counter would overflow, and then it is readable already.
func (b *bell) ring() {
	if b == nil {
		return
	}
	bellRings.Add(1)
	b.rang.Add(1)
	if b.rc != nil {
		b.rc.Write(func(fd uintptr) bool {
			bellWrite(int(fd), one[:])
			return true
		})
		return
	}
	b.mu.RLock()
	if !b.closed {
		bellWrite(b.fd, one[:])
	}
	b.mu.RUnlock()
}

// wait re-checks cond once more, then sleeps until the bell rings. It reports
// what that re-check found when cond held there (or failed: its error) — cond
// may have side effects (it takes a descriptor or loans a slot), so its
// success must not be thrown away — and otherwise returns after a ring (the
// caller re-checks) or with an error once the bell is closed. A nil bell, or
// one this side only rings, cannot be waited on.
//
// The wait is the netpoller's edge, not the eventfd's counter: eventfd signals
// every write, and Go's netpoller is edge-triggered, so the counter is never
// read. Reading it would cost a syscall per wake-up plus an EPOLLOUT edge (a
// read makes an eventfd writable) that the next netpoll has to take.
func (b *bell) wait(cond func() (bool, error)) (bool, error) {
	if b == nil || b.rc == nil {
		return false, errNoBell
	}
	bellWaits.Add(1)
	b.cond, b.parked, b.condOK, b.condErr = cond, false, false, nil
	err := b.rc.Read(b.readFn)
	ok, cerr := b.condOK, b.condErr
	b.cond, b.condErr = nil, nil
	if ok || cerr != nil {
		return true, cerr
	}
	return false, err
}

// close closes the eventfd; a goroutine parked in wait returns with an error.
func (b *bell) close() {
	switch {
	case b == nil:
	case b.f != nil:
		b.f.Close()
	default:
		b.mu.Lock()
		if !b.closed {
			b.closed = true
			syscall.Close(b.fd)
		}
		b.mu.Unlock()
	}
}

var errNoBell = errors.New("shmring: no doorbell to wait on (this side never sleeps on this ring)")

// A session's doorbells, in the order of the accepted reply's SCM_RIGHTS.
const (
	bellRequestReady  = iota // rung by the client after posting a request; vig waits
	bellRequestSpace         // rung by vig after consuming a request or returning its slot; the client waits
	bellResponseReady        // rung by vig after posting a response; the client waits
	numBells
)

var bellNames = [numBells]string{"request-ready", "request-space", "response-ready"}

// newBellFds makes a session's eventfds.
func newBellFds() (fds [numBells]int, err error) {
	for i := range fds {
		if fds[i], err = newEventfd(); err != nil {
			for _, fd := range fds[:i] {
				syscall.Close(fd)
			}
			return fds, err
		}
	}
	return fds, nil
}

// Which bells each side waits on (the others it only rings).
var (
	vigWaits    = [numBells]bool{bellRequestReady: true}
	clientWaits = [numBells]bool{bellRequestSpace: true, bellResponseReady: true}
)

// adoptBells wraps fds (numBells of them; it takes ownership of all, also on
// error); waits says which of them this side waits on.
func adoptBells(fds []int, waits [numBells]bool) (bells [numBells]*bell, err error) {
	for i, fd := range fds {
		if err != nil {
			syscall.Close(fd)
			continue
		}
		bells[i], err = newBell(fd, "shmring-"+bellNames[i], waits[i])
	}
	if err != nil {
		for _, b := range bells {
			b.close()
		}
		return [numBells]*bell{}, err
	}
	return bells, nil
}
