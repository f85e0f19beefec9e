package cpu

import (
	"errors"
	"runtime"
	"sync"
)

// The hot thread.
//
// vig's per-request work (a connection's frame reader, the ring loop, the
// scheduling decision taken inline) runs best concentrated on one OS thread: the
// CPU it runs on then sees sustained load and the governor raises its frequency,
// and no hand-off to another thread costs a wake-up. There are two ways to get
// such a thread:
//
//   - LockHot, called on the goroutine that runs the hot loop (any goroutine:
//     a connection's reader, the ring loop). It locks the goroutine to its OS
//     thread (runtime.LockOSThread), restricts that thread to HotOptions.CPUs
//     (sched_setaffinity with pid 0 = this thread), sets the utilization clamp,
//     and returns what the kernel reports back plus an undo. The undo must run
//     on the same goroutine (defer it); it restores the mask and the clamp and
//     unlocks. If restoring fails it leaves the goroutine locked, so that Go
//     ends the thread when the goroutine exits instead of handing a pinned
//     thread to other goroutines. A goroutine that returns while still locked
//     ends its thread the same way (the process's main thread, which cannot
//     end, is parked for good instead): the placement never leaks.
//
//   - StartThread, which owns a goroutine placed with LockHot and runs functions
//     on it: Thread.Do(f) runs f on the hot thread and waits for it. Do costs a
//     hand-off per call; give it a whole loop (Do(ringLoop)) rather than one
//     request. Close restores the placement and ends the thread.
//
// Pinning the hot thread does not stop Go from running other goroutines on it
// while the locked goroutine is blocked: a locked M runs only its own goroutine.
// It also counts against GOMAXPROCS while it runs Go code.

// Thread is an OS thread held for vig's hot path, placed by StartThread. Its
// methods may be called from any goroutine.
type Thread struct {
	rep  ThreadReport
	work chan func()
	done chan struct{} // one token per finished Do
	mu   sync.Mutex    // serializes Do so that done tokens match their calls
	quit chan struct{}
	exit chan error // the undo's result, when the thread ends

	closeOnce sync.Once
	closeErr  error
}

// StartThread starts a goroutine, places its thread as opts says and keeps it
// ready to run functions. An error means the placement could not be made (the
// thread is gone again); a clamp that could not be set is not an error but
// Report().UclampErr.
func StartThread(opts HotOptions) (*Thread, error) {
	t := newThread()
	ready := make(chan error, 1)
	go t.loop(opts, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

func newThread() *Thread {
	return &Thread{work: make(chan func()), done: make(chan struct{}), quit: make(chan struct{}), exit: make(chan error, 1)}
}

// loop starts the goroutine that owns the placed thread. Go cannot end the
// process's main thread (a locked goroutine that exits on it wedges it instead),
// so when loop finds itself there it keeps that thread busy while it starts the
// owner, which the runtime then has to run on another thread.
func (t *Thread) loop(opts HotOptions, ready chan<- error) {
	runtime.LockOSThread()
	if !onMainThread() {
		t.run(opts, ready, nil)
		return
	}
	locked := make(chan struct{})
	go t.run(opts, ready, locked)
	<-locked
	runtime.UnlockOSThread()
}

// run owns the placed thread. It locks once more than LockHot does, so that after
// the undo unlocks the goroutine is still locked and its exit ends the thread: no
// other goroutine ever runs on it, even with the restored placement.
func (t *Thread) run(opts HotOptions, ready chan<- error, locked chan<- struct{}) {
	runtime.LockOSThread()
	if locked != nil {
		close(locked)
	}
	rep, undo, err := LockHot(opts)
	if err != nil {
		ready <- err
		return
	}
	t.rep = rep
	ready <- nil
	for {
		select {
		case f := <-t.work:
			f()
			t.done <- struct{}{}
		case <-t.quit:
			t.exit <- undo()
			return
		}
	}
}

// Report returns what the placement achieved, as read back when the thread started.
func (t *Thread) Report() ThreadReport { return t.rep }

// ErrThreadClosed is returned by Do after Close.
var ErrThreadClosed = errors.New("cpu: hot thread closed")

// Do runs f on the hot thread and returns when f has returned. Calls from several
// goroutines run one after another; a call from f itself would wait for itself.
// Each call is a hand-off between threads (BenchmarkThreadDo): give Do a loop,
// not a request.
func (t *Thread) Do(f func()) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case t.work <- f:
	case <-t.quit:
		return ErrThreadClosed
	}
	<-t.done
	return nil
}

// Close waits for a running Do, restores the thread's placement and ends the
// thread. It returns the undo's error, if any.
func (t *Thread) Close() error {
	t.closeOnce.Do(func() {
		close(t.quit)
		t.closeErr = <-t.exit
	})
	return t.closeErr
}
