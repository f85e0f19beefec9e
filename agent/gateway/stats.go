package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// StatsPoller corrects the scheduler's estimates from the backend's own
// ModelStatistics (compute_infer time per inference).
//
// It polls only after activity: a completed request kicks it, it waits one interval,
// reads the statistics once, and sleeps until the next kick. An idle vig therefore
// makes no statistics calls and has no timer.
type StatsPoller struct {
	g        *Gateway
	gov      *Governor
	interval time.Duration
	log      *slog.Logger
	kick     chan struct{}
	last     map[string][2]uint64 // model → compute_infer {ns, count} at the previous poll
	warn     *rateLimitedLog
}

// NewStatsPoller builds a poller; Run starts it.
func NewStatsPoller(g *Gateway, gov *Governor, interval time.Duration, log *slog.Logger) *StatsPoller {
	p := &StatsPoller{g: g, gov: gov, interval: interval, log: log, kick: make(chan struct{}, 1),
		last: map[string][2]uint64{}, warn: newRateLimitedLog(log, time.Minute)}
	gov.onComplete = p.Kick
	return p
}

// Kick says a request completed; never blocks.
func (p *StatsPoller) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run polls until ctx is done.
func (p *StatsPoller) Run(ctx context.Context) {
	t := time.NewTimer(p.interval)
	t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		t.Reset(p.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		p.poll(ctx)
	}
}

func (p *StatsPoller) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, p.interval)
	defer cancel()
	var resp pb.ModelStatisticsResponse
	b, err := p.g.Invoke(ctx, wire.MethodStatistics, nil)
	if err == nil {
		err = proto.Unmarshal(b, &resp)
	}
	if err != nil {
		p.warn.Warn("*", "backend statistics unavailable: estimates rely on vig's own measurements", "err", err)
		return
	}
	seen := map[string]bool{}
	for _, ms := range resp.ModelStats {
		ci := ms.GetInferenceStats().GetComputeInfer()
		if ci == nil {
			continue
		}
		seen[ms.Name] = true
		prev := p.last[ms.Name]
		cur := [2]uint64{ci.Ns, ci.Count}
		p.last[ms.Name] = cur
		if cur[1] < prev[1] || cur[0] < prev[0] { // backend restarted: new baseline
			continue
		}
		if prev != ([2]uint64{}) || cur[1] > 0 {
			p.gov.ObserveBackendStats(ms.Name, cur[0]-prev[0], cur[1]-prev[1])
		}
	}
	for model := range p.gov.known {
		if !seen[model] && !p.gov.logical[model] { // a logical model's statistics are its variants'
			p.warn.Warn(model, "backend reports no compute statistics for model: its estimate relies on vig's own measurements", "model", model)
		}
	}
}

// rateLimitedLog logs a warning at most once per key per interval and says how many
// were suppressed in between (a backend that is down must not flood the log).
type rateLimitedLog struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time
	mu       sync.Mutex
	keys     map[string]*limitState
}

type limitState struct {
	last       time.Time
	suppressed int
}

func newRateLimitedLog(log *slog.Logger, interval time.Duration) *rateLimitedLog {
	return &rateLimitedLog{log: log, interval: interval, now: time.Now, keys: map[string]*limitState{}}
}

// Warn logs msg for key unless it was logged less than interval ago.
func (r *rateLimitedLog) Warn(key, msg string, args ...any) {
	r.mu.Lock()
	st := r.keys[key]
	if st == nil {
		st = &limitState{}
		r.keys[key] = st
	}
	now := r.now()
	if !st.last.IsZero() && now.Sub(st.last) < r.interval {
		st.suppressed++
		r.mu.Unlock()
		return
	}
	suppressed := st.suppressed
	st.last, st.suppressed = now, 0
	r.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	r.log.Warn(msg, args...)
}
