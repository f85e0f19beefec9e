package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
)

// Governor drives the freshness scheduler from the gateway's request goroutines.
//
// There is no scheduler goroutine: the goroutine an event happens on (a request
// arriving, a backend answer, a client leaving) takes the lock, feeds the event to
// the state machine, and carries out the resulting actions before unlocking. A
// request that can start at once therefore starts on its own goroutine with no
// hand-off at all; only a request that waited is woken (one channel send). The lock
// is never held across I/O. One timer, armed only while some waiting request depends
// on time (sched.NextWake), drives Tick: an idle vig has no timer and no ticker.
type Governor struct {
	clock  func() sched.Time
	toMono func(ns int64) int64 // converts a wall-clock capture time; nil for monotonic
	log    *slog.Logger
	known  map[string]bool // models with a prior; others pass ungoverned

	mu      sync.Mutex
	s       *sched.Scheduler
	waiters map[uint64]*waiter
	acts    []sched.Action
	next    uint64
	timer   *time.Timer
	wakeAt  sched.Time
	obs     Observer

	warnedUngoverned sync.Map // model → struct{}
	onComplete       func()   // set before serving (StatsPoller.Kick)
}

// Observer is told what the governor decided, for metrics. Its methods are called
// with the governor's lock held: they must be quick and must not call back.
type Observer interface {
	// Finished reports a request the backend answered: time waiting in vig,
	// time from arrival to answer, age of the result at delivery.
	Finished(stream int, wait, total, age time.Duration)
	// Ungoverned counts a request for a model vig has no contract or prior for.
	Ungoverned(model string)
}

type waiter struct {
	ch      chan sched.Action // the decision for a waiting request
	arrival sched.Time
	capture sched.Time
	stream  int
	started sched.Time
}

// GovernorOptions configures NewGovernor.
type GovernorOptions struct {
	Config   *config.Config
	Clock    func() int64 // CLOCK_MONOTONIC ns (platform/clock.Monotonic)
	WallDiff func() int64 // wall clock minus Clock, ns, for capture_clock: realtime
	Log      *slog.Logger
	Observer Observer
}

// SetObserver sets the metrics observer; call before serving.
func (g *Governor) SetObserver(o Observer) { g.obs = o }

// SchedConfig converts vig's configuration into the scheduler's.
func SchedConfig(c *config.Config) (sched.Config, error) {
	sc := sched.Config{Slots: c.Backend.Slots, SafetyMargin: sched.Margin(c.Scheduler.SafetyMarginPct),
		NoPipeline: c.Scheduler.Pipeline != nil && !*c.Scheduler.Pipeline,
		CommitLead: time.Duration(c.Scheduler.CommitLeadMs * float64(time.Millisecond))}
	if c.Scheduler.Order == "class_first" {
		sc.Order = sched.OrderClassFirst
	}
	var err error
	if sc.UnknownStreams, err = sched.ParseUnknownPolicy(c.Scheduler.UnknownStreams); err != nil {
		return sc, err
	}
	for _, name := range c.ModelNames() {
		m := c.Models[name]
		sc.Models = append(sc.Models, sched.ModelSpec{Name: name, Exec: m.Exec(), Exclusive: !m.RunsBeside()})
	}
	for _, s := range c.Streams {
		class, err := sched.ParseClass(s.Class)
		if err != nil {
			return sc, err
		}
		q, err := sched.ParseQueueKind(s.Queue)
		if err != nil {
			return sc, err
		}
		off, told := s.WindowOffset()
		sc.Streams = append(sc.Streams, sched.StreamSpec{Name: s.Name, Model: s.Model, Class: class,
			Period: s.Period(), MaxAge: s.MaxAge(), FrameInterval: s.FrameInterval(), Queue: q,
			Capacity: s.Capacity, MinRateHz: s.MinRateHz, WindowAligned: told, WindowOffset: off})
	}
	return sc, nil
}

// NewGovernor builds the scheduler for a configuration.
func NewGovernor(o GovernorOptions) (*Governor, error) {
	sc, err := SchedConfig(o.Config)
	if err != nil {
		return nil, err
	}
	s, err := sched.New(sc)
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	g := &Governor{
		clock:   func() sched.Time { return sched.Time(o.Clock()) },
		log:     o.Log,
		known:   map[string]bool{},
		s:       s,
		waiters: map[uint64]*waiter{},
		obs:     o.Observer,
	}
	if o.Config.Scheduler.CaptureClock == "realtime" {
		wd := o.WallDiff
		g.toMono = func(ns int64) int64 { return ns - wd() }
	}
	for name := range o.Config.Models {
		g.known[name] = true
	}
	g.timer = time.AfterFunc(time.Hour, g.tick)
	g.timer.Stop()
	return g, nil
}

// Admit implements Admitter.
func (g *Governor) Admit(ctx context.Context, h *InferHeader) (func(error), error) {
	if !g.known[string(h.Model)] {
		return g.ungoverned(string(h.Model)), nil
	}
	req := sched.Request{Stream: string(h.Stream), Model: string(h.Model)}
	if h.HasCapture {
		req.Capture = g.capture(h.Capture)
	}
	if p, ok := h.Param(paramPriority); ok {
		switch {
		case p.Kind == ParamUint64:
			req.Priority, req.HasPriority = p.Uint, true
		case p.Kind == ParamInt64 && p.Int >= 0:
			req.Priority, req.HasPriority = uint64(p.Int), true
		default:
			return nil, status.Error(codes.InvalidArgument, "parameter priority must be a non-negative uint64_param or int64_param")
		}
	}
	if p, ok := h.Param(paramTimeout); ok {
		if p.Kind != ParamInt64 {
			return nil, status.Error(codes.InvalidArgument, "parameter timeout must be an int64_param (microseconds)")
		}
		req.Timeout = time.Duration(p.Int) * time.Microsecond // negative: the scheduler refuses it
	}
	return g.admit(ctx, req)
}

// AdmitFrame is Admit for requests that do not arrive as gRPC messages (the
// shared-memory ring): stream, model and capture time (0 = arrival), on the
// configured capture clock.
func (g *Governor) AdmitFrame(ctx context.Context, stream, model string, captureNs int64) (func(error), error) {
	if !g.known[model] {
		return g.ungoverned(model), nil
	}
	req := sched.Request{Stream: stream, Model: model}
	if captureNs != 0 {
		req.Capture = g.capture(captureNs)
	}
	return g.admit(ctx, req)
}

func (g *Governor) capture(ns int64) sched.Time {
	if g.toMono != nil {
		ns = g.toMono(ns)
	}
	return sched.Time(ns)
}

func (g *Governor) admit(ctx context.Context, req sched.Request) (func(error), error) {
	w := &waiter{ch: make(chan sched.Action, 1), capture: req.Capture}
	g.mu.Lock()
	now := g.clock()
	g.next++
	req.Token = g.next
	w.arrival = now
	g.waiters[req.Token] = w
	g.acts = g.s.Arrive(now, req, g.acts[:0])
	mine, decided := g.apply(now, req.Token)
	g.mu.Unlock()

	if !decided {
		select {
		case mine = <-w.ch:
		case <-ctx.Done():
			g.mu.Lock()
			now := g.clock()
			g.acts = g.s.Cancel(now, req.Token, g.acts[:0])
			g.apply(now, 0)
			g.mu.Unlock()
			select {
			case mine = <-w.ch: // decided just before the cancel: honour it
			default:
				g.mu.Lock()
				delete(g.waiters, req.Token)
				g.mu.Unlock()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
	}
	if mine.Kind == sched.Answer {
		return nil, answerError(mine)
	}
	w.started = g.clock()
	return func(err error) { g.complete(req.Token, w, err) }, nil
}

// apply carries out actions: answers and dispatches reach their waiters. The action
// for own (the caller's token) is returned instead of sent. Called with mu held.
func (g *Governor) apply(now sched.Time, own uint64) (mine sched.Action, decided bool) {
	for _, a := range g.acts {
		w := g.waiters[a.Token]
		if w == nil {
			continue
		}
		w.stream = a.Stream
		if a.Kind == sched.Answer {
			delete(g.waiters, a.Token) // finished
		}
		if a.Token == own {
			mine, decided = a, true
			continue
		}
		w.ch <- a // buffered 1; each token gets exactly one decision
	}
	g.rearm(now)
	return mine, decided
}

// rearm sets the timer to the scheduler's next wake-up, or stops it.
func (g *Governor) rearm(now sched.Time) {
	at, ok := g.s.NextWake()
	if !ok {
		if g.wakeAt != 0 {
			g.timer.Stop()
			g.wakeAt = 0
		}
		return
	}
	if at == g.wakeAt {
		return
	}
	g.wakeAt = at
	g.timer.Reset(max(at.Sub(now), 0))
}

func (g *Governor) tick() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	g.wakeAt = 0
	g.acts = g.s.Tick(now, g.acts[:0])
	g.apply(now, 0)
}

// complete reports the backend's answer for a dispatched request.
func (g *Governor) complete(token uint64, w *waiter, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	delete(g.waiters, token)
	if err == nil && g.obs != nil {
		capture := w.capture
		if capture == 0 {
			capture = w.arrival
		}
		g.obs.Finished(w.stream, w.started.Sub(w.arrival), now.Sub(w.arrival), now.Sub(capture))
	}
	g.acts = g.acts[:0]
	if status.Code(err) == codes.Canceled {
		// The client left while the backend ran: the slot is freed and the request
		// counted cancelled, and its truncated run teaches the estimator nothing.
		g.acts = g.s.Cancel(now, token, g.acts)
	}
	g.acts = g.s.Complete(now, token, err == nil, g.acts)
	g.apply(now, 0)
	if g.onComplete != nil {
		g.onComplete()
	}
}

// ungoverned forwards a request for a model vig knows nothing about, saying so once.
func (g *Governor) ungoverned(model string) func(error) {
	if _, warned := g.warnedUngoverned.LoadOrStore(model, struct{}{}); !warned {
		g.log.Warn("model has no exec_ms prior in the config: its requests are forwarded without freshness scheduling",
			"model", model, "fix", fmt.Sprintf("add `%s: {exec_ms: N}` under models:", model))
	}
	if g.obs != nil {
		g.obs.Ungoverned(model)
	}
	return func(error) {}
}

// SetBackendAvailable tells the scheduler whether the backend is reachable.
func (g *Governor) SetBackendAvailable(up bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	g.acts = g.s.SetBackendAvailable(now, up, g.acts[:0])
	g.apply(now, 0)
}

// Drain answers every waiting request UNAVAILABLE and refuses new ones; requests
// on the backend complete normally.
func (g *Governor) Drain() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	g.acts = g.s.Drain(now, g.acts[:0])
	g.apply(now, 0)
}

// ObserveBackendStats feeds the backend's compute-time deltas to the estimator.
func (g *Governor) ObserveBackendStats(model string, computeNs, count uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.s.ObserveBackendStats(model, computeNs, count)
}

// Snapshot copies the scheduler's state into dst under the lock: counters in one
// snapshot are mutually consistent (received = Σ outcomes + in flight).
func (g *Governor) Snapshot(dst *sched.Snapshot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.s.Snapshot(g.clock(), dst)
}

func answerError(a sched.Action) error {
	return status.Errorf(codes.Code(a.Code), "vig: %s (%s)", a.Reason, a.Outcome)
}
