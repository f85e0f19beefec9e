package mockbackend

import (
	"container/list"
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// slots is the accelerator: at most len(end) jobs run at once and the others wait in
// arrival order. This FIFO is the "direct" baseline vig is compared against.
//
// Each slot keeps its own timeline: a job starts at max(its arrival, the scheduled
// end of the previous job on that slot), not when the previous job's goroutine
// happened to wake up, so one late wake-up does not shift every job queued behind it.
type slots struct {
	mu    sync.Mutex
	end   []time.Time // scheduled end of the last job granted on each slot
	busy  []bool
	queue list.List // *waiter, oldest first

	running    atomic.Int64 // jobs holding a slot now
	maxRunning atomic.Int64 // most jobs that ever held a slot at once
}

type waiter struct {
	arrival time.Time
	ready   chan grant // buffered: release never blocks on a waiter
	elem    *list.Element
}

// grant is a slot handed to a job, with the time the job starts on the slot's timeline.
type grant struct {
	slot  int
	start time.Time
}

func newSlots(n int) *slots {
	return &slots{end: make([]time.Time, n), busy: make([]bool, n)}
}

// acquire waits for a free slot in FIFO order. A job whose context ends while it
// waits leaves the queue and gets the context's error.
func (s *slots) acquire(ctx context.Context, arrival time.Time) (grant, error) {
	s.mu.Lock()
	if s.queue.Len() == 0 {
		if i := slices.Index(s.busy, false); i >= 0 {
			s.busy[i] = true
			g := grant{slot: i, start: later(arrival, s.end[i])}
			s.mu.Unlock()
			s.enter()
			return g, nil
		}
	}
	w := &waiter{arrival: arrival, ready: make(chan grant, 1)}
	w.elem = s.queue.PushBack(w)
	s.mu.Unlock()

	select {
	case g := <-w.ready:
		s.enter()
		return g, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.elem != nil { // still queued: leave
		s.queue.Remove(w.elem)
		w.elem = nil
		s.mu.Unlock()
		return grant{}, ctx.Err()
	}
	s.mu.Unlock()
	// Granted while cancelling: give the slot on without running; the slot's
	// timeline is unchanged because this job never ran.
	g := <-w.ready
	s.handOff(g.slot, s.endOf(g.slot))
	return grant{}, ctx.Err()
}

func (s *slots) enter() {
	n := s.running.Add(1)
	for {
		m := s.maxRunning.Load()
		if n <= m || s.maxRunning.CompareAndSwap(m, n) {
			return
		}
	}
}

// release ends the job on slot i, scheduled to end at end, and hands the slot to the
// oldest waiter.
func (s *slots) release(i int, end time.Time) {
	s.running.Add(-1)
	s.handOff(i, end)
}

func (s *slots) handOff(i int, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end[i] = end
	front := s.queue.Front()
	if front == nil {
		s.busy[i] = false
		return
	}
	w := s.queue.Remove(front).(*waiter)
	w.elem = nil
	w.ready <- grant{slot: i, start: later(w.arrival, end)}
}

func (s *slots) endOf(i int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end[i]
}

// waiting is the number of queued jobs.
func (s *slots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue.Len()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitUntil returns at t or as soon as possible after it. time.Sleep overshoots:
// Go's netpoller waits in whole milliseconds (epoll_wait's timeout), so a sleep of
// 4.3 ms wakes after ~5 ms, and a timer's wake-up takes another ~0.2 ms at p50 and
// up to ~2 ms at p99 on a busy 2-vCPU VM. So waitUntil sleeps whole milliseconds
// until at least spin before t and spins the rest, yielding the processor on every
// turn so that other goroutines (the gRPC transport) still run.
func waitUntil(t time.Time, spin time.Duration) {
	if d := time.Until(t) - spin; d >= time.Millisecond {
		time.Sleep(d.Truncate(time.Millisecond))
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}

// Bounds of the calibrated spin: below 100 µs the spin cannot hide a timer's
// wake-up; above 2 ms it burns more CPU than the precision is worth.
const (
	minSpin = 100 * time.Microsecond
	maxSpin = 2 * time.Millisecond
)

// calibratedSpin measures how late a whole-millisecond time.Sleep wakes on this
// machine, once per process (~30 ms), and returns the 90th percentile plus 100 µs,
// within [minSpin, maxSpin]. A job spins on average this plus half a millisecond.
var calibratedSpin = sync.OnceValue(func() time.Duration {
	const n, d = 24, time.Millisecond
	over := make([]time.Duration, n)
	for i := range over {
		t0 := time.Now()
		time.Sleep(d)
		over[i] = time.Since(t0) - d
	}
	slices.Sort(over)
	return min(max(over[n*9/10]+100*time.Microsecond, minSpin), maxSpin)
})
