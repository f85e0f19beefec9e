package bench

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/wire"
)

// TritonPolicy is an EMULATION of Triton's dynamic-batcher queue policy, the
// baseline of the wire benchmark (docs/benchmarks.md); it is not Triton. It runs as a
// gateway.Admitter in front of the mock backend:
//
//   - priority levels by class: protected 1, high 2, best_effort 3 (1 runs first);
//   - at most Slots requests on the backend; a free slot takes the oldest request
//     of the best non-empty level; with accelerators declared, each accelerator has
//     its slots and its levels (Triton's instance groups: a model's instances live
//     on its own device);
//   - max_queue_size 1 per level: an arrival that finds its level's queue full is
//     rejected at once (UNAVAILABLE), as Triton rejects it;
//   - timeout_action REJECT with a queue timeout equal to the stream's max_age,
//     timed from arrival in the queue (Triton knows no capture time): a request
//     still waiting then is rejected (UNAVAILABLE).
//
// Real Triton keeps one such queue per model; this emulation orders all streams in
// one queue by class, which helps it on a shared accelerator. It has no notion of
// freshness at dispatch, of superseding, or of blocking by a long job.
type TritonPolicy struct {
	streams map[string]tpStream
	poolOf  map[string]int // model → accelerator

	mu    sync.Mutex
	pools []*tpPool
	stats map[string]*TritonStats
}

// tpPool is one accelerator's queue and free slots.
type tpPool struct {
	free    int
	levels  [3][]*tpWaiter
	release func(error)
}

type tpStream struct {
	level   int
	timeout time.Duration
	pool    *tpPool
}

type tpWaiter struct {
	ch      chan struct{} // closed when granted a slot
	granted bool
}

// TritonStats counts one stream's outcomes under the emulation.
type TritonStats struct {
	Received  uint64 `json:"received"`
	Forwarded uint64 `json:"forwarded"`
	QueueFull uint64 `json:"rejected_queue_full"`
	TimedOut  uint64 `json:"rejected_timeout"`
	Cancelled uint64 `json:"cancelled"`
}

const tritonMaxQueue = 1 // max_queue_size per priority level

// NewTritonPolicy builds the emulation for a configuration's streams and slots.
func NewTritonPolicy(cfg *config.Config) *TritonPolicy {
	p := &TritonPolicy{streams: map[string]tpStream{}, poolOf: map[string]int{}, stats: map[string]*TritonStats{}}
	accels := cfg.AcceleratorList()
	for _, a := range accels {
		tp := &tpPool{free: max(a.Slots, 1)}
		tp.release = func(error) { p.release(tp) }
		p.pools = append(p.pools, tp)
	}
	for name := range cfg.Models {
		for i, a := range accels {
			if a.Name == cfg.AcceleratorOf(name) {
				p.poolOf[name] = i
			}
		}
	}
	for _, s := range cfg.Streams {
		lvl := 2
		switch s.Class {
		case "protected":
			lvl = 0
		case "high":
			lvl = 1
		}
		p.streams[s.Name] = tpStream{level: lvl, timeout: s.MaxAge(), pool: p.pools[p.poolOf[s.Model]]}
		p.stats[s.Name] = &TritonStats{}
	}
	return p
}

// Admit implements gateway.Admitter.
func (p *TritonPolicy) Admit(ctx context.Context, h *wire.InferHeader) (func(error), error) {
	name := string(h.Stream)
	p.mu.Lock()
	st, ok := p.streams[name]
	stats := p.stats[name]
	if !ok {
		st = tpStream{level: 2, timeout: time.Hour, pool: p.pools[p.poolOf[string(h.Model)]]}
		stats = &TritonStats{}
		p.streams[name], p.stats[name] = st, stats
	}
	q := st.pool
	stats.Received++
	if q.free > 0 && q.queued() == 0 {
		q.free--
		stats.Forwarded++
		p.mu.Unlock()
		return q.release, nil
	}
	if len(q.levels[st.level]) >= tritonMaxQueue {
		stats.QueueFull++
		p.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "triton-policy emulation: queue full (max_queue_size 1)")
	}
	w := &tpWaiter{ch: make(chan struct{})}
	q.levels[st.level] = append(q.levels[st.level], w)
	p.mu.Unlock()

	t := time.NewTimer(st.timeout)
	defer t.Stop()
	var err error
	select {
	case <-w.ch:
		p.mu.Lock()
		stats.Forwarded++
		p.mu.Unlock()
		return q.release, nil
	case <-t.C:
		err = status.Error(codes.Unavailable, "triton-policy emulation: request timed out in the queue (timeout_action REJECT)")
	case <-ctx.Done():
		err = status.FromContextError(ctx.Err()).Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.granted { // granted while the timer fired: the slot is ours
		stats.Forwarded++
		return q.release, nil
	}
	q.remove(st.level, w)
	if status.Code(err) == codes.Unavailable {
		stats.TimedOut++
	} else {
		stats.Cancelled++
	}
	return nil, err
}

func (q *tpPool) queued() int {
	return len(q.levels[0]) + len(q.levels[1]) + len(q.levels[2])
}

func (q *tpPool) remove(level int, w *tpWaiter) {
	l := q.levels[level]
	for i, x := range l {
		if x == w {
			q.levels[level] = append(l[:i], l[i+1:]...)
			return
		}
	}
}

// release frees a slot of q, handing it to the oldest waiter of its best level.
func (p *TritonPolicy) release(q *tpPool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range q.levels {
		if ws := q.levels[l]; len(ws) > 0 {
			w := ws[0]
			q.levels[l] = ws[1:]
			w.granted = true
			close(w.ch)
			return
		}
	}
	q.free++
}

// Stats returns a copy of the per-stream counters.
func (p *TritonPolicy) Stats() map[string]TritonStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]TritonStats, len(p.stats))
	for k, v := range p.stats {
		out[k] = *v
	}
	return out
}
