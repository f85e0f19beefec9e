package trace

import (
	"sync"
	"time"
)

// LiveKeep is how long the timeline page keeps the recorder on after its
// last load or refresh: the page refreshes every few seconds while open.
const LiveKeep = 30 * time.Second

// Live returns the timeline page's source (TimelineHandler): each call keeps
// r recording for keep more (starting it if it was off: the first load of the
// page shows nothing yet) and returns the last seconds recorded. Once no page
// has asked for keep, recording stops, and the data path pays nothing again.
func (r *Recorder) Live(keep time.Duration) func(seconds float64) (*Window, error) {
	l := &live{r: r, keep: keep}
	return l.last
}

// live is the page's lease on the recorder: one span, held while pages ask.
type live struct {
	r    *Recorder
	keep time.Duration

	mu    sync.Mutex
	span  *Span // nil while no page is open
	timer *time.Timer
}

func (l *live) last(seconds float64) (*Window, error) {
	l.mu.Lock()
	if l.span == nil {
		l.span = l.r.Begin()
		sp := l.span
		l.timer = time.AfterFunc(l.keep, func() { l.expire(sp) })
	} else {
		l.timer.Reset(l.keep)
	}
	sp := l.span
	l.mu.Unlock()
	now := l.r.clock()
	cut := max(now-int64(seconds*float64(time.Second)), sp.start)
	w := l.r.window(l.r.since(sp.from, cut), l.r.count())
	w.Start, w.End = cut, max(now, cut)
	// A few events stamped before cut may have landed after the first one
	// at or past it (writers stamp before they lock): the window keeps to
	// its span.
	i := 0
	for i < len(w.Events) && w.Events[i].Time < cut {
		i++
	}
	w.Events = w.Events[i:]
	if n := len(w.Events); n > 0 && w.Events[n-1].Time > w.End {
		w.End = w.Events[n-1].Time
	}
	if l.r.wall != nil {
		w.WallStart = w.Start + l.r.wall()
	}
	return w, nil
}

// expire ends sp if it is still the page's span once keep passed unasked.
func (l *live) expire(sp *Span) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.span == sp {
		sp.Close()
		l.span = nil
	}
}

func (r *Recorder) count() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// since returns the index of the first event from index from on that was
// recorded at or after t (the ring's events are in time order but for a
// few ns between writers): a binary search under the lock, 16 reads for
// the default ring.
func (r *Recorder) since(from uint64, t int64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	lo, hi := max(from, r.n-min(r.n, uint64(r.size))), r.n
	for lo < hi {
		m := lo + (hi-lo)/2
		if r.ring[m%uint64(r.size)].ev.Time < t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
