package gateway

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/wire"
)

// Governor drives the freshness scheduler from the goroutines the events happen on.
//
// There is no scheduler goroutine: the goroutine an event happens on (a request
// arriving, a backend answer, a client leaving) takes the lock, feeds the event to
// the state machine, and carries out the resulting decisions after unlocking: a
// request that may start is written to the backend by the goroutine that received
// it; one that waited is started by the goroutine whose event freed its slot. The
// lock is never held across I/O. One timer, armed only while some waiting request
// depends on time (sched.NextWake), drives Tick: an idle vig has no timer and no
// ticker. The scheduler keeps the one record of a request's timing; the Call
// carries its token and what the dispatch decision said.
type Governor struct {
	clock  func() sched.Time
	toMono func(ns int64) int64 // converts a wall-clock capture time; nil for monotonic
	log    *slog.Logger
	known  map[string]bool   // models with a prior; others pass ungoverned
	names  map[string]string // configured stream and model names, interned
	bound  map[string]string // configured stream → the model it runs
	// maxBatch is each model's max_batch: above 1, its frames may be merged
	// (batch.go). The map is fixed at construction; a value changes when the
	// server's configuration is read (servermodels.go).
	maxBatch map[string]*atomic.Int32
	// variants are the models a logical model's frames run as: the name a
	// dispatched frame takes, and its model_name field (wire.RenameModel).
	variants map[string]variant
	logical  map[string]bool

	mu     sync.Mutex
	s      *sched.Scheduler
	calls  map[uint64]*Call // waiting or running, by token
	acts   []sched.Action
	next   uint64
	timer  *time.Timer
	wakeAt sched.Time
	obs    Observer
	gw     *Gateway // carries out decisions; set by gateway.New

	warnedUngoverned sync.Map // model → struct{}
	onComplete       func()   // set before serving (StatsPoller.Kick)

	// The trace recorder (govern_trace.go), fixed at construction.
	rec        *trace.Recorder
	slotAccel  []int16 // global slot → its accelerator
	slotIn     []int16 // global slot → its number there
	modelIdx   map[string]int16
	modelNames []string
	maxAge     []time.Duration // by stream
}

// Observer is told what the governor decided, for metrics. Its methods are called
// with the governor's lock held: they must be quick and must not call back.
type Observer interface {
	// Finished reports a request the backend answered: time waiting in vig,
	// time from arrival to answer, age of the result at delivery.
	Finished(stream int, wait, total, age time.Duration)
	// Ungoverned counts a request for a model vig has no contract or prior for.
	Ungoverned(model string)
	// Alone counts a frame of a batching model that cannot join a batch, by
	// why (wire's Alone* reasons, and the gateway's: streamed, ring,
	// over_max_batch).
	Alone(model, why string)
	// Variant counts a frame of a logical model dispatched as one of its
	// variants.
	Variant(model, variant string)
}

// GovernorOptions configures NewGovernor.
type GovernorOptions struct {
	Config   *config.Config
	Clock    func() int64 // CLOCK_MONOTONIC ns (platform/clock.Monotonic)
	WallDiff func() int64 // wall clock minus Clock, ns, for capture_clock: realtime
	Log      *slog.Logger
	Observer Observer
	// Recorder, when not nil, is given the scheduling events while it
	// records (agent/trace).
	Recorder *trace.Recorder
}

// variant is a model a logical model's frame may run as.
type variant struct {
	name  []byte     // immutable, shared by every call renamed to it
	field mem.Buffer // wire.ModelNameField(name)
}

// SetObserver sets the metrics observer; call before serving.
func (g *Governor) SetObserver(o Observer) { g.obs = o }

// SchedConfig converts vig's configuration into the scheduler's.
func SchedConfig(c *config.Config) (sched.Config, error) {
	sc := sched.Config{Slots: c.Backend.Slots, SafetyMargin: sched.Margin(c.Scheduler.SafetyMarginPct),
		NoPipeline: c.Scheduler.Pipeline != nil && !*c.Scheduler.Pipeline,
		CommitLead: time.Duration(c.Scheduler.CommitLeadMs * float64(time.Millisecond))}
	sc.Slots, sc.Accelerators = c.SchedAccelerators()
	if c.Scheduler.Order == "class_first" {
		sc.Order = sched.OrderClassFirst
	}
	var err error
	if sc.UnknownStreams, err = sched.ParseUnknownPolicy(c.Scheduler.UnknownStreams); err != nil {
		return sc, err
	}
	for _, name := range c.ModelNames() {
		m := c.Models[name]
		if m.Logical() {
			sc.Models = append(sc.Models, sched.ModelSpec{Name: name, Variants: m.Variants})
			continue
		}
		spec := sched.ModelSpec{Name: name, Exec: m.Exec(), Exclusive: !m.RunsBeside(), Accelerator: c.AcceleratorOf(name),
			BatchExec: m.BatchCosts()}
		if m.MaxBatch != nil {
			spec.MaxBatch = *m.MaxBatch
		}
		spec.Instances = c.InstancesOf(name) // binds only below the accelerator's slots (sched)
		sc.Models = append(sc.Models, spec)
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
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s, err := sched.New(sc)
	if err != nil {
		return nil, err
	}
	g := &Governor{
		clock:    func() sched.Time { return sched.Time(o.Clock()) },
		log:      o.Log,
		known:    map[string]bool{},
		names:    map[string]string{},
		bound:    map[string]string{},
		maxBatch: map[string]*atomic.Int32{},
		variants: map[string]variant{},
		logical:  map[string]bool{},
		s:        s,
		calls:    map[uint64]*Call{},
		obs:      o.Observer,
	}
	if o.Config.Scheduler.CaptureClock == "realtime" {
		wd := o.WallDiff
		g.toMono = func(ns int64) int64 { return ns - wd() }
	}
	for _, m := range sc.Models {
		g.maxBatch[m.Name] = new(atomic.Int32)
		g.maxBatch[m.Name].Store(int32(m.MaxBatch))
	}
	for name, m := range o.Config.Models {
		g.known[name] = true
		g.names[name] = name
		if m.Logical() {
			g.logical[name] = true
			for _, v := range m.Variants {
				g.variants[v] = variant{name: []byte(v), field: wire.ModelNameField(v)}
			}
		}
	}
	for _, st := range o.Config.Streams {
		g.names[st.Name] = st.Name
		g.bound[st.Name] = st.Model
	}
	g.timer = time.AfterFunc(time.Hour, g.tick)
	g.timer.Stop()
	g.traceSetup(o.Recorder, o.Config)
	return g, nil
}

// intern returns b as a string without allocating when it names a configured
// stream or model.
func (g *Governor) intern(b []byte) string {
	if s, ok := g.names[string(b)]; ok {
		return s
	}
	return string(b)
}

// request reads the scheduler's view of a request from its header.
func (g *Governor) request(h *wire.InferHeader) (sched.Request, error) {
	req := sched.Request{Stream: g.intern(h.Stream), Model: g.intern(h.Model)}
	if h.HasCapture {
		req.Capture = g.capture(h.Capture)
	}
	if p, ok := h.Param(wire.ParamPriority); ok {
		switch {
		case p.Kind == wire.ParamUint64:
			req.Priority, req.HasPriority = p.Uint, true
		case p.Kind == wire.ParamInt64 && p.Int >= 0:
			req.Priority, req.HasPriority = uint64(p.Int), true
		default:
			return req, status.Error(codes.InvalidArgument, "parameter priority must be a non-negative uint64_param or int64_param")
		}
	}
	if p, ok := h.Param(wire.ParamTimeout); ok {
		if p.Kind != wire.ParamInt64 {
			return req, status.Error(codes.InvalidArgument, "parameter timeout must be an int64_param (microseconds)")
		}
		req.Timeout = time.Duration(p.Int) * time.Microsecond // negative: the scheduler refuses it
	}
	seq, err := h.Sequence()
	if err != nil {
		return req, status.Error(codes.InvalidArgument, err.Error())
	}
	req.SequenceID, req.SequenceStart, req.SequenceEnd = seq.ID, seq.Start, seq.End
	return req, nil
}

func (g *Governor) capture(ns int64) sched.Time {
	if g.toMono != nil {
		ns = g.toMono(ns)
	}
	return sched.Time(ns)
}

// submit feeds a call's arrival to the scheduler and carries out what it decides.
func (g *Governor) submit(c *Call) {
	h := &c.Header
	if model, ok := g.bound[string(h.Stream)]; ok && model != string(h.Model) {
		// Refused whether or not vig knows the request's model: forwarded ungoverned,
		// a frame of a contracted stream would escape its contract.
		g.gw.reply(c, nil, status.Errorf(codes.InvalidArgument,
			"vig: stream %q is configured for model %q, and this request names model %q: send the stream's frames for %q, or give these another vig_stream",
			h.Stream, model, h.Model, model))
		return
	}
	if !g.known[string(h.Model)] {
		g.ungoverned(string(h.Model))
		c.phase = phaseRunning
		g.gw.start(c)
		return
	}
	req, err := g.request(h)
	if err != nil {
		g.gw.reply(c, nil, err)
		return
	}
	g.batchKey(c, &req)
	c.hand.pinned = req.SequenceID != 0 && (req.SequenceStart || req.SequenceEnd)
	var buf [4]decision
	g.mu.Lock()
	now := g.clock()
	g.next++
	c.token, req.Token = g.next, g.next
	c.phase, c.arrival = phaseWaiting, now
	g.calls[c.token] = c
	if g.rec.On() {
		g.traceArrive(now, c, &req)
	}
	g.acts = g.s.Arrive(now, req, g.acts[:0])
	ds := g.collect(now, buf[:0])
	g.mu.Unlock()
	g.gw.carry(ds)
}

// collect turns the scheduler's actions into decisions to carry out after the
// lock, and re-arms the timer. Called with mu held.
func (g *Governor) collect(now sched.Time, ds []decision) []decision {
	on := g.rec.On()
	for _, a := range g.acts {
		c := g.calls[a.Token]
		if c == nil {
			continue
		}
		if on {
			g.traceAction(now, &a)
		}
		if a.Kind == sched.Answer {
			delete(g.calls, a.Token)
			c.phase = phaseDone
		} else {
			c.phase, c.stream, c.capture, c.started, c.slot = phaseRunning, a.Stream, a.Capture, now, a.Slot
			c.hand.deadline, c.hand.class = a.Deadline, g.s.StreamClass(a.Stream)
			if a.Model != "" {
				g.runAs(c, a.Model)
			}
			if a.Batch != 0 && a.BatchSize > 1 && !g.group(c, a) {
				continue // carried out with its batch's lead
			}
		}
		ds = append(ds, decision{c, a})
	}
	g.rearm(now)
	return ds
}

// runAs makes a dispatched frame of a logical model the variant's: its
// header names the variant from here on (hand-off, a ring backend's
// descriptor and answer), and a gRPC backend is sent the message renamed.
// Called with mu held.
func (g *Governor) runAs(c *Call, model string) {
	v, ok := g.variants[model]
	if !ok {
		return // not a variant of vig's config: the scheduler names only those
	}
	if g.obs != nil {
		g.obs.Variant(g.intern(c.Header.Model), model)
	}
	c.Header.Model = v.name
	if c.Msg != nil {
		// A message the client sent names the logical model; one built on
		// demand (Build: the ring, REST) is built from the header's name.
		c.rename = v.field
	}
}

// complete reports the backend's answer for a dispatched call.
func (g *Governor) complete(c *Call, err error) {
	var buf [4]decision
	g.mu.Lock()
	now := g.clock()
	delete(g.calls, c.token)
	c.phase = phaseDone
	if err == nil && g.obs != nil {
		capture := c.capture
		if capture == 0 {
			capture = c.arrival
		}
		g.obs.Finished(c.stream, c.started.Sub(c.arrival), now.Sub(c.arrival), now.Sub(capture))
	}
	g.acts = g.acts[:0]
	if status.Code(err) == codes.Canceled {
		// The client left while the backend ran: the slot is freed and the request
		// counted cancelled, and its truncated run teaches the estimator nothing.
		g.acts = g.s.Cancel(now, c.token, g.acts)
	}
	if c.hand.late {
		g.acts = g.s.CompleteLate(now, c.token, g.acts)
	} else {
		g.acts = g.s.Complete(now, c.token, err == nil, g.acts)
	}
	if g.rec.On() {
		g.traceFinish(now, c, err, c.hand.late, nil)
	}
	ds := g.collect(now, buf[:0])
	g.mu.Unlock()
	g.carryTo(ds)
	if g.onComplete != nil {
		g.onComplete()
	}
}

// cancel answers a call that still waits (CANCELLED) and reports true. For a
// call already on the backend it reports false and the call to abort there: c
// itself, or, for a member of a batch, nothing until every member has left,
// then the batch's call.
func (g *Governor) cancel(c *Call) (answered bool, abort *Call) {
	var buf [4]decision
	g.mu.Lock()
	if c.token == 0 || c.phase != phaseWaiting { // ungoverned, running or answered
		if c.batch == nil {
			g.mu.Unlock()
			return false, c
		}
		if c.phase == phaseRunning {
			abort = g.leave(g.clock(), c)
		}
		g.mu.Unlock()
		return false, abort
	}
	now := g.clock()
	// The scheduler forgets a cancelled waiting request without answering it
	// (its client is gone); the call is answered here, so that its Replier
	// still gets its one answer and the call is released.
	g.acts = g.s.Cancel(now, c.token, g.acts[:0])
	delete(g.calls, c.token)
	c.phase = phaseDone
	if g.rec.On() {
		g.traceCancelled(now, c)
	}
	ds := g.collect(now, buf[:0])
	g.mu.Unlock()
	g.carryTo(ds)
	if c.wake != nil { // a blocking Admit waits for it
		c.wake <- sched.Action{Kind: sched.Answer, Token: c.token, Code: sched.Code(codes.Canceled)}
	} else {
		g.gw.reply(c, nil, errCancelledWaiting)
	}
	return true, nil
}

var errCancelledWaiting = status.Error(codes.Canceled, "vig: the client left while the request waited")

// event runs a scheduler event that is not about one call.
func (g *Governor) event(f func(now sched.Time, acts []sched.Action) []sched.Action) {
	g.mu.Lock()
	now := g.clock()
	g.acts = f(now, g.acts[:0])
	ds := g.collect(now, nil)
	g.mu.Unlock()
	g.carryTo(ds)
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
	g.event(func(now sched.Time, acts []sched.Action) []sched.Action {
		g.wakeAt = 0
		return g.s.Tick(now, acts)
	})
}

// ungoverned forwards a request for a model vig knows nothing about, saying so once.
func (g *Governor) ungoverned(model string) {
	if _, warned := g.warnedUngoverned.LoadOrStore(model, struct{}{}); !warned {
		g.log.Warn("model has no exec_ms prior in the config: its requests are forwarded without freshness scheduling",
			"model", model, "fix", fmt.Sprintf("add `%s: {exec_ms: N}` under models:", model))
	}
	if g.obs != nil {
		g.obs.Ungoverned(model)
	}
}

// SetBackendAvailable tells the scheduler whether the backend is reachable.
func (g *Governor) SetBackendAvailable(up bool) {
	g.event(func(now sched.Time, acts []sched.Action) []sched.Action {
		return g.s.SetBackendAvailable(now, up, acts)
	})
}

// Drain answers every waiting request UNAVAILABLE and refuses new ones; requests
// on the backend complete normally.
func (g *Governor) Drain() {
	g.event(func(now sched.Time, acts []sched.Action) []sched.Action { return g.s.Drain(now, acts) })
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
