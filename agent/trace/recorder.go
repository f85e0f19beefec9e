package trace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEvents is the ring's size when the config does not set
// trace.buffer_events: about 10 MB, some 15 s of four frames' worth of events
// at 1000 frames/s.
const DefaultEvents = 1 << 16

// MaxEvents bounds trace.buffer_events (about 2.4 GB of ring).
const MaxEvents = 1 << 24

// chunk is how many slots a reader copies per hold of the lock: a writer
// waits at most one chunk's copy (some 50 KB), however long the window.
const chunk = 512

// Recorder is a bounded ring of scheduling events, recording only while at
// least one capture is open. Off, a hook costs one atomic load (On); on,
// recording an event copies it into the ring under a short lock and never
// allocates. Readers copy
// their window out chunk by chunk, so that a writer never waits for a long
// copy, and never for a reader's network.
//
// A nil *Recorder is valid and never records.
type Recorder struct {
	on    atomic.Int32 // open captures
	size  int
	clock func() int64 // CLOCK_MONOTONIC ns
	wall  func() int64 // wall clock minus clock, ns
	meta  atomic.Pointer[func() Meta]
	asks  chan struct{} // windows recorded over HTTP (http.go)

	mu   sync.Mutex
	ring []slot // allocated at the first capture
	n    uint64 // events ever recorded; the next goes to ring[n%size]

	// The lease of Recent: recording kept on while a live page asks.
	leaseMu    sync.Mutex
	leaseOn    bool
	leaseStart int64
	leaseTimer *time.Timer
	leaseFor   time.Duration // LeaseFor; shorter in tests
}

// LeaseFor is how long Recent keeps recording after its last call.
const LeaseFor = time.Minute

// NewRecorder returns a recorder of size events (0: DefaultEvents). clock is
// CLOCK_MONOTONIC in ns; wallDiff, when not nil, the wall clock minus it.
func NewRecorder(size int, clock, wallDiff func() int64) (*Recorder, error) {
	if size == 0 {
		size = DefaultEvents
	}
	if size < chunk || size > MaxEvents {
		return nil, errors.New("trace: buffer_events must be between 512 and 16777216 (0: the default, 65536)")
	}
	return &Recorder{size: size, clock: clock, wall: wallDiff, asks: make(chan struct{}, MaxAsks), leaseFor: LeaseFor}, nil
}

// Size returns the ring's capacity in events.
func (r *Recorder) Size() int { return r.size }

// SetMeta sets what names the events' indexes; f is called once per window.
func (r *Recorder) SetMeta(f func() Meta) {
	if r != nil {
		r.meta.Store(&f)
	}
}

// On reports whether events are being recorded: the one check a hook makes
// before building its event.
func (r *Recorder) On() bool { return r != nil && r.on.Load() != 0 }

// Now returns the recorder's clock.
func (r *Recorder) Now() int64 { return r.clock() }

// Record copies e (and id, Triton's request id, nil when absent) into the
// ring, when recording. e.Time 0 is stamped with the clock.
func (r *Recorder) Record(e *Event, id []byte) {
	if !r.On() {
		return
	}
	if e.Time == 0 {
		e.Time = r.clock()
	}
	r.mu.Lock()
	r.ring[r.n%uint64(r.size)].put(e, id)
	r.n++
	r.mu.Unlock()
}

// alloc allocates the ring, once, with r.mu held and nothing recording, and
// touches each of its pages: the page faults are the asker's, not the data
// path's.
func (r *Recorder) alloc() {
	if r.ring != nil {
		return
	}
	r.ring = make([]slot, r.size)
	for i := 0; i < len(r.ring); i += touchStep {
		r.ring[i].idLen = 0 // a write: the kernel maps the page now
	}
}

// touchStep is a stride of slots shorter than a page (4 KiB): a write every
// touchStep slots reaches every page of the ring (TestSlotHoldsEveryField).
const touchStep = 16

// Span is one open recording: from Begin to End.
type Span struct {
	r     *Recorder
	from  uint64
	start int64
	ended bool
}

// Recent returns the last seconds of events, for a live view that asks
// again and again (the timeline page): each call keeps recording on for
// LeaseFor more. When nothing was recording, the first call records for
// seconds and returns that.
func (r *Recorder) Recent(seconds float64) (*Window, error) {
	if !(seconds > 0 && seconds <= MaxSeconds) {
		return nil, fmt.Errorf("trace: %v s: give more than 0 and at most %d", seconds, MaxSeconds)
	}
	d := time.Duration(seconds * float64(time.Second))
	r.leaseMu.Lock()
	cold := !r.leaseOn
	if cold {
		r.mu.Lock()
		r.alloc()
		r.on.Add(1)
		r.mu.Unlock()
		r.leaseOn, r.leaseStart = true, r.clock()
		r.leaseTimer = time.AfterFunc(r.leaseFor, r.expire)
	} else {
		r.leaseTimer.Reset(r.leaseFor)
	}
	start := r.leaseStart
	r.leaseMu.Unlock()
	if cold {
		time.Sleep(d)
	}
	end := r.clock()
	start = max(start, end-int64(d))
	r.mu.Lock()
	to := r.n
	r.mu.Unlock()
	w := r.window(r.since(start, to), to)
	w.Start, w.End = start, end
	if r.wall != nil {
		w.WallStart = start + r.wall()
	}
	return w, nil
}

// expire ends Recent's lease.
func (r *Recorder) expire() {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	if r.leaseOn {
		r.leaseOn = false
		r.on.Add(-1)
	}
}

// since returns the index of the first event of [oldest held, to) at or
// after t, reading back from to chunk by chunk.
func (r *Recorder) since(t int64, to uint64) uint64 {
	i := to
	for {
		r.mu.Lock()
		oldest := r.n - min(r.n, uint64(r.size))
		stop := max(oldest, i-min(i, chunk))
		for ; i > stop; i-- {
			if r.ring[(i-1)%uint64(r.size)].Time < t {
				r.mu.Unlock()
				return i
			}
		}
		r.mu.Unlock()
		if i <= oldest {
			return oldest
		}
	}
}

// Begin starts recording (if it was not already) and marks the start of a
// window. The ring is allocated at the first Begin and kept.
func (r *Recorder) Begin() *Span {
	r.mu.Lock()
	r.alloc()
	c := &Span{r: r, from: r.n, start: r.clock()}
	r.on.Add(1)
	r.mu.Unlock()
	return c
}

// End stops this span and returns its window: every event recorded since
// Begin that the ring still holds (the newest Size of them; Dropped counts
// the others).
func (c *Span) End() *Window {
	r := c.r
	if c.ended {
		return &Window{Start: c.start, End: c.start}
	}
	c.ended = true
	end := r.clock()
	r.mu.Lock()
	to := r.n
	r.mu.Unlock()
	w := r.window(c.from, to)
	w.Start, w.End = c.start, end
	if r.wall != nil {
		w.WallStart = c.start + r.wall()
	}
	r.on.Add(-1)
	return w
}

// Close stops the span without reading it.
func (c *Span) Close() {
	if !c.ended {
		c.ended = true
		c.r.on.Add(-1)
	}
}

// Collect records for d (or until ctx is done: then it returns ctx's error)
// and returns the window.
func (r *Recorder) Collect(ctx context.Context, d time.Duration) (*Window, error) {
	c := r.Begin()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return c.End(), nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

// window copies the events [from, to) still in the ring, chunk by chunk.
func (r *Recorder) window(from, to uint64) *Window {
	w := &Window{}
	if f := r.meta.Load(); f != nil {
		w.Meta = (*f)()
	}
	if to-from > uint64(r.size) {
		w.Dropped = to - from - uint64(r.size)
		from = to - uint64(r.size)
	}
	w.Events = make([]Event, 0, to-from)
	buf := make([]slot, chunk)
	for i := from; i < to; {
		r.mu.Lock()
		if oldest := r.n - min(r.n, uint64(r.size)); i < oldest { // overwritten while we copied
			w.Dropped += min(oldest, to) - i
			i = min(oldest, to)
		}
		k := 0
		for ; i < to && k < chunk; i, k = i+1, k+1 {
			buf[k] = r.ring[i%uint64(r.size)]
		}
		r.mu.Unlock()
		for j := range buf[:k] {
			w.Events = append(w.Events, buf[j].event())
		}
	}
	// Each event is stamped before its writer takes the lock: writers on
	// different goroutines may land a few ns out of order.
	slices.SortStableFunc(w.Events, func(a, b Event) int { return cmp.Compare(a.Time, b.Time) })
	return w
}
