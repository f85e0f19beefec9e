package shmring

import (
	"errors"
	"fmt"
	"os"
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
	f  *os.File
	rc syscall.RawConn
	// readFn is the netpoller callback of wait, made once so that a wait does
	// not allocate. Only one goroutine waits on a bell at a time (the ring's
	// owner rules: Recv/Next from one goroutine, Loan/Post from one), so the
	// scratch below needs no lock.
	readFn  func(fd uintptr) bool
	readErr error
	buf     [8]byte
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

// newBell takes ownership of fd, an eventfd, and makes it pollable.
func newBell(fd int, name string) (*bell, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("shmring: doorbell %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shmring: doorbell %s: %w", name, err)
	}
	b := &bell{f: f, rc: rc}
	b.readFn = func(fd uintptr) bool {
		_, err := bellRead(int(fd), b.buf[:])
		if err == syscall.EAGAIN {
			return false // not rung yet: park in the netpoller
		}
		b.readErr = err
		return true
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
	return newBell(fd, name)
}

// ring wakes the bell's sleeper. It never blocks: an eventfd write fails only
// when its counter would overflow, and then it is readable already.
func (b *bell) ring() {
	if b == nil {
		return
	}
	bellRings.Add(1)
	b.rang.Add(1)
	b.rc.Write(func(fd uintptr) bool {
		bellWrite(int(fd), one[:])
		return true
	})
}

// wait returns once the bell has rung since its last wait (resetting it), or
// with an error once the bell is closed. A nil bell has nobody to ring it.
func (b *bell) wait() error {
	if b == nil {
		return errNoBell
	}
	bellWaits.Add(1)
	if err := b.rc.Read(b.readFn); err != nil {
		return err
	}
	return b.readErr
}

// close closes the eventfd; a goroutine parked in wait returns with an error.
func (b *bell) close() {
	if b != nil {
		b.f.Close()
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

// adoptBells wraps fds (numBells of them; it takes ownership of all, also on
// error).
func adoptBells(fds []int) (bells [numBells]*bell, err error) {
	for i, fd := range fds {
		if err != nil {
			syscall.Close(fd)
			continue
		}
		bells[i], err = newBell(fd, "shmring-"+bellNames[i])
	}
	if err != nil {
		for _, b := range bells {
			b.close()
		}
		return [numBells]*bell{}, err
	}
	return bells, nil
}
