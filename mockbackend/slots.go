package mockbackend

import (
	"container/list"
	"context"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// slots is the accelerator: at most len(end) executions run at once and the others
// wait in arrival order. This FIFO is the "direct" baseline vig is compared against.
//
// Each slot keeps its own timeline: an execution starts at max(its arrival, the
// scheduled end of the previous execution on that slot), not when the previous
// job's goroutine happened to wake up, so one late wake-up does not shift every job
// queued behind it.
//
// A model with Triton's dynamic batcher (batchPolicy.merge) runs several queued
// requests as one execution: when a slot frees, the oldest waiting request takes
// the queued requests of its model with it, in arrival order, up to the model's
// max batch size (see take). The execution's members share its slot, start and
// end; the first member (the leader) holds the slot and releases it, the others
// wait for the execution's done.
type slots struct {
	mu    sync.Mutex
	end   []time.Time // scheduled end of the last execution granted on each slot
	busy  []bool
	queue list.List // *waiter, oldest first
	execs uint64    // executions granted, numbering them

	timer   *time.Timer // wakes the batcher when a delayed batch's wait ends
	timerAt time.Time

	running    atomic.Int64 // executions holding a slot now
	maxRunning atomic.Int64 // most executions that ever held a slot at once

	cur []*execution // the execution holding each slot, nil when free

	// dev couples the accelerators' timelines when interference is
	// configured (nil otherwise); idx is this accelerator's number on it and
	// factor how much longer a job takes that starts while another
	// accelerator runs one (≤ 1: no slowdown).
	dev    *device
	idx    int
	factor float64
}

// work is what a request brings to the accelerator: its rows and their summed
// execution time, and its model's batching policy (nil: it runs as it came).
type work struct {
	rows   int
	exec   time.Duration
	policy *batchPolicy
	limit  *instances // nil: no limit beyond the accelerator's slots
}

// instances bounds how many executions of one model run at once: the count of
// its Triton instance group. Each instance keeps its own timeline, as a slot
// does: an execution starts no earlier than the scheduled end of its
// instance's previous one. A model runs on one accelerator, so its
// accelerator's mutex guards them.
type instances struct {
	busy []bool
	end  []time.Time
}

func newInstances(n int) *instances {
	return &instances{busy: make([]bool, n), end: make([]time.Time, n)}
}

func (l *instances) full() bool { return l != nil && !slices.Contains(l.busy, false) }

// take holds a free instance (the one that freed first) and returns it.
func (l *instances) take() int {
	k := -1
	for i, b := range l.busy {
		if !b && (k < 0 || l.end[i].Before(l.end[k])) {
			k = i
		}
	}
	l.busy[k] = true
	return k
}

// batchPolicy is a batching model's max_batch_size, its dynamic batcher
// (merge, preferred sizes ascending, queue delay) and its cost's batch gain.
type batchPolicy struct {
	max       int
	merge     bool
	preferred []int
	delay     time.Duration
	gain      float64
}

type waiter struct {
	work
	arrival time.Time
	ready   chan grant // buffered: a grant never blocks on a waiter
	elem    *list.Element
}

// grant is a slot handed to a request, with the time its execution starts and
// ends on the slot's timeline.
type grant struct {
	slot       int
	start, end time.Time
	exec       *execution
	leader     bool // holds the slot: releases it at end
}

// execution is one run on a slot: one request, or a batch of them.
type execution struct {
	id       uint64
	rows     int // rows of all its requests: the batch size the model ran
	requests int
	done     chan struct{} // closed when the leader released the slot
	limit    *instances    // its model's instances, if bounded
	inst     int           // the instance it holds
	// factor is the interference slowdown its length includes (1: none).
	factor float64
}

func newSlots(n int) *slots {
	return &slots{end: make([]time.Time, n), busy: make([]bool, n), cur: make([]*execution, n)}
}

// acquire waits for a free slot in FIFO order for a job whose length the caller
// decides (it passes the end to release).
func (s *slots) acquire(ctx context.Context, arrival time.Time) (grant, error) {
	return s.acquireWork(ctx, arrival, work{rows: 1})
}

// acquireWork queues w and waits for its execution: alone, or in a batch its
// model's batcher forms. A request whose context ends while it waits leaves the
// queue and gets the context's error; one that a batch took runs with it.
func (s *slots) acquireWork(ctx context.Context, arrival time.Time, wk work) (grant, error) {
	w := &waiter{work: wk, arrival: arrival, ready: make(chan grant, 1)}
	s.mu.Lock()
	w.elem = s.queue.PushBack(w)
	s.dispatchLocked(time.Now())
	s.mu.Unlock()

	select {
	case g := <-w.ready:
		if g.leader {
			s.enter()
		}
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
	g := <-w.ready
	if g.exec.requests > 1 {
		// Taken into a batch while cancelling: the batch runs with its other
		// requests, as an accelerator runs a batch it was given.
		if g.leader {
			s.enter()
		}
		return g, nil
	}
	// Granted alone while cancelling: give the slot on without running; the
	// slot's timeline is unchanged because this job never ran.
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

// release ends the execution on slot i, scheduled to end at end, and hands the
// slot on.
func (s *slots) release(i int, end time.Time) {
	s.running.Add(-1)
	s.handOff(i, end)
}

func (s *slots) handOff(i int, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.cur[i]; x != nil {
		if x.limit != nil {
			x.limit.busy[x.inst] = false
			// A job given back unrun ends before its instance's last end:
			// the instance's timeline never goes back.
			x.limit.end[x.inst] = later(x.limit.end[x.inst], end)
		}
		if s.dev != nil {
			s.dev.ended(x, end) // a job that never ran ends at its start
		}
		s.cur[i] = nil
	}
	s.end[i] = end
	s.busy[i] = false
	s.dispatchLocked(time.Now())
}

// dispatchLocked grants free slots to the next executions the queue holds.
func (s *slots) dispatchLocked(now time.Time) {
	for {
		i := slices.Index(s.busy, false)
		if i < 0 || s.queue.Len() == 0 {
			return
		}
		members, start, wake := s.nextLocked(s.end[i], now)
		if members == nil {
			if !wake.IsZero() {
				s.wakeAtLocked(wake)
			}
			return
		}
		s.busy[i] = true
		s.execs++
		x := &execution{id: s.execs, requests: len(members), done: make(chan struct{}), limit: members[0].limit, factor: 1}
		if x.limit != nil {
			x.inst = x.limit.take()
			start = later(start, x.limit.end[x.inst])
		}
		s.cur[i] = x
		var sum time.Duration
		for _, w := range members {
			x.rows += w.rows
			sum += w.exec
		}
		cost := batchCost(sum, x.rows, members[0].policy)
		if s.dev != nil {
			if s.factor > 1 && s.dev.busyElsewhere(s.idx, start) {
				x.factor = s.factor
				cost = time.Duration(math.Round(float64(cost) * s.factor))
			}
			s.dev.started(s.idx, x, start, start.Add(cost))
		}
		end := start.Add(cost)
		for k, w := range members {
			s.queue.Remove(w.elem)
			w.elem = nil
			w.ready <- grant{slot: i, start: start, end: end, exec: x, leader: k == 0}
		}
	}
}

// batchCost is an execution's length: the mean of its rows' execution times ×
// (1 + gain·(rows − 1)).
func batchCost(sum time.Duration, rows int, p *batchPolicy) time.Duration {
	if rows <= 1 || p == nil {
		return sum
	}
	mean := float64(sum) / float64(rows)
	return time.Duration(math.Round(mean * (1 + p.gain*float64(rows-1))))
}

// nextLocked picks the next execution for a slot whose last execution ends at
// slotEnd: the oldest request that can run now, with its batch. A batching model
// whose batch is not yet complete and whose oldest request has waited less than
// the model's queue delay lets the requests behind it go first, and wake is when
// its wait ends.
func (s *slots) nextLocked(slotEnd, now time.Time) (members []*waiter, start, wake time.Time) {
	var delayed []*batchPolicy
	for e := s.queue.Front(); e != nil; e = e.Next() {
		w := e.Value.(*waiter)
		if w.limit.full() {
			continue // every instance of its model runs: the requests behind it go first
		}
		p := w.policy
		if p == nil || !p.merge {
			return []*waiter{w}, later(w.arrival, slotEnd), time.Time{}
		}
		if slices.Contains(delayed, p) {
			continue
		}
		start := later(w.arrival, slotEnd)
		deadline := w.arrival.Add(p.delay)
		if p.delay > 0 {
			// The batch forms now, or when the wait ends if the batcher ran late.
			start = later(start, earlier(now, deadline))
		}
		// The requests that had arrived by the batch's start, up to max rows.
		var cands []*waiter
		rows := 0
		for f := e; f != nil; f = f.Next() {
			v := f.Value.(*waiter)
			if v.policy != p || v.arrival.After(start) {
				continue
			}
			if rows+v.rows > p.max {
				break
			}
			cands = append(cands, v)
			rows += v.rows
		}
		if p.delay > 0 && now.Before(deadline) && !p.complete(rows) {
			delayed = append(delayed, p)
			if wake.IsZero() || deadline.Before(wake) {
				wake = deadline
			}
			continue
		}
		want, taken := p.take(rows), 0
		for k, v := range cands {
			if k > 0 && taken+v.rows > want {
				cands = cands[:k]
				break
			}
			taken += v.rows
		}
		return cands, start, time.Time{}
	}
	return nil, time.Time{}, wake
}

// complete reports whether a batch of n rows runs without waiting longer: it
// reaches the max batch size or a preferred size (Triton's dynamic batcher,
// docs/user_guide/batcher.md).
func (p *batchPolicy) complete(n int) bool {
	return n >= p.max || len(p.preferred) > 0 && n >= p.preferred[0]
}

// take is how many of n available rows a batch takes: the largest preferred
// size it can form, else all of them (Triton's dynamic batcher).
func (p *batchPolicy) take(n int) int {
	for k := len(p.preferred) - 1; k >= 0; k-- {
		if p.preferred[k] <= n {
			return p.preferred[k]
		}
	}
	return n
}

// wakeAtLocked has the batcher run again at t (the earliest end of a delayed
// batch's wait).
func (s *slots) wakeAtLocked(t time.Time) {
	if s.timer != nil && !s.timerAt.After(t) && s.timerAt.After(time.Now()) {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timerAt = t
	s.timer = time.AfterFunc(time.Until(t), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.dispatchLocked(time.Now())
	})
}

func (s *slots) endOf(i int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end[i]
}

// waiting is the number of queued requests.
func (s *slots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue.Len()
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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
