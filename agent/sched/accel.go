package sched

import "time"

// AcceleratorSpec is one kind of accelerator of the device (config
// `accelerators: {gpu: 1, dla: 2}`): a pool of Slots interchangeable,
// non-preemptible slots with its own queue at the backend.
type AcceleratorSpec struct {
	Name  string
	Slots int
	// Interference is the factor (1 to 10) by which a job on this
	// accelerator takes longer while another accelerator runs one (they
	// share the device's memory bandwidth): it seeds what the estimator
	// learns. 0 or 1: none assumed until measured.
	Interference float64
}

// accel is one accelerator of a scheduler over several: an engine (a
// Scheduler of one accelerator, exactly the one-pool scheduler) over the
// models that run there and their streams.
type accel struct {
	name     string
	slots    int
	slotBase int        // global number of its slot 0 in Action.Slot
	e        *Scheduler // nil when no model runs on it
	global   []int32    // its stream index → the front's
	snap     Snapshot   // reused by Snapshot
}

// streamRef locates one of the front's streams in its accelerator's engine.
type streamRef struct {
	part  int32
	local int32
}

// newFront builds the scheduler of a multi-accelerator config (validated by
// New): one engine per accelerator, each given the models placed on it and
// the streams of those models. Streams are numbered as a single engine would
// number them: the configured ones in config order, then the default
// contracts in model order.
func newFront(cfg Config) (*Scheduler, error) {
	s := &Scheduler{
		cfg:         cfg,
		margin:      cfg.SafetyMargin,
		partOfName:  map[string]int32{},
		partOfModel: map[string]int32{},
		wake:        Never,
	}
	base := 0
	for _, a := range cfg.Accelerators {
		s.accels = append(s.accels, accel{name: a.Name, slots: a.Slots, slotBase: base})
		s.slots += a.Slots
		base += a.Slots
	}
	partOf := func(accel string) int32 {
		for i, a := range cfg.Accelerators {
			if a.Name == accel {
				return int32(i)
			}
		}
		return -1 // New validated every model's accelerator
	}
	subs := make([]Config, len(s.accels))
	for p := range subs {
		sub := cfg
		sub.Accelerators, sub.Slots, sub.Models, sub.Streams = nil, s.accels[p].slots, nil, nil
		subs[p] = sub
	}
	s.vars = newVariants(cfg)
	for _, m := range cfg.Models {
		if len(m.Variants) > 0 {
			continue // logical: its frames run as its variants
		}
		p := partOf(m.Accelerator)
		s.partOfModel[m.Name] = p
		m.Accelerator = ""
		subs[p].Models = append(subs[p].Models, m)
	}
	local := make([]int32, len(s.accels))
	for _, st := range cfg.Streams {
		if s.vars.logicalModel(st.Model) {
			// One copy per variant, in the variant's engine; the front
			// numbers the stream once (variant.go).
			s.streamAt = append(s.streamAt, s.vars.addStream(st, int32(len(s.streamAt)), s.partOfModel, subs, local))
			continue
		}
		p := s.partOfModel[st.Model]
		s.partOfName[st.Name] = p
		subs[p].Streams = append(subs[p].Streams, st)
		s.streamAt = append(s.streamAt, streamRef{p, local[p]})
		local[p]++
	}
	if cfg.UnknownStreams == DefaultContract {
		// Each engine appends its models' default streams after its
		// configured ones, in its model order (the config's).
		for _, m := range cfg.Models {
			if len(m.Variants) > 0 {
				continue // its requests join a variant's default stream (variant.go)
			}
			p := s.partOfModel[m.Name]
			s.streamAt = append(s.streamAt, streamRef{p, local[p]})
			local[p]++
		}
	}
	// Interference is priced and learnt only on a device configured with
	// it: otherwise the accelerators are independent, as before, and cost
	// nothing per decision for it.
	coRun := false
	for _, a := range cfg.Accelerators {
		coRun = coRun || a.Interference > 1
	}
	for p := range s.accels {
		a := &s.accels[p]
		if len(subs[p].Models) == 0 {
			continue // declared, nothing runs there
		}
		e, err := New(subs[p])
		if err != nil {
			return nil, err
		}
		e.accelName = a.name
		if coRun {
			e.initCo(s, int32(p), cfg.Accelerators[p].Interference)
		}
		a.e = e
		a.global = make([]int32, len(e.streams))
		if s.accels[s.fallbackPart].e == nil {
			s.fallbackPart = int32(p) // the first engine answers unknown models
		}
	}
	for g, ref := range s.streamAt {
		s.accels[ref.part].global[ref.local] = int32(g)
	}
	if s.vars != nil {
		s.vars.link(s)
	}
	return s, nil
}

// multi reports whether s is the front of several accelerators.
func (s *Scheduler) multi() bool { return s.accels != nil }

// part returns the accelerator a request goes to, with the same routing as
// an engine's route: a stream of the name (vig_stream, else the model) is on
// its model's accelerator, else a known model's accelerator decides; an
// unknown model goes to any engine, which answers NotFound.
func (s *Scheduler) part(r *Request) int32 {
	name := r.Stream
	if name == "" {
		name = r.Model
	}
	if p, ok := s.partOfName[name]; ok {
		return p
	}
	if p, ok := s.partOfModel[r.Model]; ok {
		return p
	}
	return s.fallbackPart
}

// partOfToken returns the accelerator whose engine holds token, or -1.
func (s *Scheduler) partOfToken(token uint64) int32 {
	for p := range s.accels {
		if e := s.accels[p].e; e != nil && e.tokens.get(token) >= 0 {
			return int32(p)
		}
	}
	return -1
}

// translate rewrites the actions an engine appended from index n0 into the
// front's stream and slot numbers, and refreshes the front's wake-up and
// learnt-grid epoch.
func (s *Scheduler) translate(p int32, n0 int, acts []Action) []Action {
	a := &s.accels[p]
	for i := n0; i < len(acts); i++ {
		if s.vars != nil && acts[i].Kind == Dispatch {
			s.vars.dispatched(p, a.e, &acts[i])
		}
		if acts[i].Stream >= 0 {
			acts[i].Stream = int(a.global[acts[i].Stream])
		}
		if acts[i].Kind == Dispatch {
			acts[i].Slot += a.slotBase
		}
	}
	if a.e.epochSet && !s.epochSet {
		// Learnt grids start at the first capture on any stream, whatever
		// its accelerator (see Coverage grid).
		s.epoch, s.epochSet = a.e.epoch, true
		for q := range s.accels {
			if e := s.accels[q].e; e != nil && !e.epochSet {
				e.epoch, e.epochSet = s.epoch, true
			}
		}
	}
	s.refreshWake()
	return acts
}

func (s *Scheduler) refreshWake() {
	s.wake = Never
	for p := range s.accels {
		if e := s.accels[p].e; e != nil {
			s.wake = min(s.wake, e.wake)
		}
	}
}

// due runs the pass of every engine whose wake-up has come, after an event
// on one accelerator: at or after another's NextWake the event stands for
// the Tick the caller would have made, so NextWake is always in the future.
//
// An engine that deferred a job for another accelerator's protected work
// (interference.go) is re-evaluated after every event: the job it waits
// for may have ended.
func (s *Scheduler) due(now Time, acts []Action) []Action {
	co := false
	for p := range s.accels {
		if e := s.accels[p].e; e != nil && e.coDeferred {
			co = true
		}
	}
	if s.wake > now && !co {
		return acts
	}
	for p := range s.accels {
		if e := s.accels[p].e; e != nil && (e.wake <= now || e.coDeferred) {
			n0 := len(acts)
			acts = s.translate(int32(p), n0, e.pass(now, acts))
		}
	}
	return acts
}

// settle ends every event of the front: the passes due, then where each
// logical stream's next frame is expected (variant.go).
func (s *Scheduler) settle(now Time, acts []Action) []Action {
	acts = s.due(now, acts)
	if s.vars != nil {
		acts = s.vars.steer(s, now, acts)
	}
	return acts
}

func (s *Scheduler) frontArrive(now Time, r Request, acts []Action) []Action {
	if s.vars != nil {
		if out, ok := s.vars.arrive(s, now, r, acts); ok {
			return s.settle(now, out)
		}
	}
	p := s.part(&r)
	dup := false
	if q := s.partOfToken(r.Token); q >= 0 && q != p {
		dup = true // live on another accelerator: refused like any duplicate
	}
	n0 := len(acts)
	return s.settle(now, s.translate(p, n0, s.accels[p].e.arrive(now, r, dup, acts)))
}

func (s *Scheduler) frontFinish(now Time, token uint64, out Outcome, acts []Action) []Action {
	p := s.partOfToken(token)
	if p < 0 {
		return s.settle(now, acts)
	}
	n0 := len(acts)
	return s.settle(now, s.translate(p, n0, s.accels[p].e.finish(now, token, out, acts)))
}

func (s *Scheduler) frontCancel(now Time, token uint64, acts []Action) []Action {
	p := s.partOfToken(token)
	if p < 0 {
		return s.settle(now, acts)
	}
	n0 := len(acts)
	return s.settle(now, s.translate(p, n0, s.accels[p].e.Cancel(now, token, acts)))
}

// each calls f on every engine at now and translates what it appended.
func (s *Scheduler) each(now Time, acts []Action, f func(e *Scheduler, acts []Action) []Action) []Action {
	for p := range s.accels {
		if e := s.accels[p].e; e != nil {
			n0 := len(acts)
			acts = s.translate(int32(p), n0, f(e, acts))
		}
	}
	s.refreshWake()
	if s.vars != nil {
		acts = s.vars.steer(s, now, acts)
	}
	return acts
}

func (s *Scheduler) frontSnapshot(now Time, dst *Snapshot) {
	dst.Now = now
	dst.Slots = s.slots
	dst.Busy, dst.Committed, dst.Exclusive = 0, 0, false
	dst.Draining = s.draining
	dst.BackendDown = s.backendDown
	dst.SafetyMargin = s.margin
	dst.Unrouted = Counters{}
	n := len(s.streamAt)
	if cap(dst.Streams) < n {
		dst.Streams = make([]StreamStats, n)
	}
	dst.Streams = dst.Streams[:n]
	dst.Estimates = dst.Estimates[:0]
	dst.Accelerators = dst.Accelerators[:0]
	dst.Batches = dst.Batches[:0]
	for p := range s.accels {
		a := &s.accels[p]
		as := AcceleratorStats{Name: a.name, Slots: a.slots}
		if a.e != nil {
			a.e.Snapshot(now, &a.snap)
			as.Busy, as.Committed, as.Exclusive = a.snap.Busy, a.snap.Committed, a.snap.Exclusive
			as.BusyTime = a.snap.Accelerators[0].BusyTime
			as.Interference, as.InterferenceSamples = a.e.factor(), a.e.ifr.n
			for l, st := range a.snap.Streams {
				dst.Streams[a.global[l]] = st
			}
			dst.Estimates = append(dst.Estimates, a.snap.Estimates...)
			dst.Batches = append(dst.Batches, a.snap.Batches...)
			u := &a.snap.Unrouted
			dst.Unrouted.Received += u.Received
			dst.Unrouted.Rejected += u.Rejected
		}
		dst.Busy += as.Busy
		dst.Committed += as.Committed
		dst.Exclusive = dst.Exclusive || as.Exclusive
		dst.Accelerators = append(dst.Accelerators, as)
	}
	dst.Variants = dst.Variants[:0]
	if s.vars != nil {
		s.vars.snapshot(s, dst)
	}
}

// engineOf returns the engine that runs model (s itself on one accelerator),
// or nil for an unknown model.
func (s *Scheduler) engineOf(model string) *Scheduler {
	if !s.multi() {
		return s
	}
	if p, ok := s.partOfModel[model]; ok {
		return s.accels[p].e
	}
	return nil
}

// Accelerators returns the accelerators as configured (one, named "" for
// the backend.slots shorthand).
func (s *Scheduler) Accelerators() []AcceleratorSpec {
	if !s.multi() {
		return []AcceleratorSpec{{Name: s.accelName, Slots: s.slots}}
	}
	out := make([]AcceleratorSpec, len(s.accels))
	for i, a := range s.accels {
		out[i] = AcceleratorSpec{Name: a.name, Slots: a.slots}
	}
	return out
}

// AcceleratorOf returns the accelerator a Dispatch's global Slot belongs to
// (an index into Accelerators).
func (s *Scheduler) AcceleratorOf(slot int) int {
	for p := len(s.accels) - 1; p >= 0; p-- {
		if slot >= s.accels[p].slotBase {
			return p
		}
	}
	return 0
}

// AcceleratorStats is one accelerator's occupancy in a Snapshot.
type AcceleratorStats struct {
	Name      string
	Slots     int
	Busy      int  // started jobs
	Committed int  // pipelined jobs queued behind them
	Exclusive bool // a corun:false job runs on it
	// BusyTime is the slot time its jobs have run so far (Σ over slots, from
	// each job's observed start to its completion): its rate over Slots is
	// the busy share.
	BusyTime time.Duration
	// Interference is the factor by which its jobs are taken to last
	// longer while another accelerator runs one: the median of what
	// InterferenceSamples such jobs measured, seeded by the config (1 for
	// none).
	Interference        float64
	InterferenceSamples uint64
}
