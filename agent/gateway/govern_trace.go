package gateway

import (
	"math"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/agent/trace"
)

// The trace hooks: each is called, with the governor's lock held, only when
// g.rec.On() (one atomic load when nobody records), and builds its event on
// the stack.

// traceSetup numbers the accelerators' slots and the models for the
// recorder's events, hooks admission's deferrals and gives the recorder its
// names.
func (g *Governor) traceSetup(rec *trace.Recorder, cfg *config.Config) {
	g.rec = rec
	if rec == nil {
		return
	}
	g.modelNames = cfg.ModelNames()
	maxAge := map[string]time.Duration{}
	for _, st := range cfg.Streams {
		maxAge[st.Name] = st.MaxAge()
	}
	for i := range g.s.NumStreams() {
		g.maxAge = append(g.maxAge, maxAge[g.s.StreamName(i)])
	}
	for a, spec := range g.s.Accelerators() {
		for i := range spec.Slots {
			g.slotAccel = append(g.slotAccel, int16(a))
			g.slotIn = append(g.slotIn, int16(i))
		}
	}
	g.modelIdx = map[string]int16{}
	for _, name := range g.modelNames {
		g.modelIdx[name] = int16(len(g.modelIdx))
	}
	g.s.SetOnDefer(func(now sched.Time, token uint64, stream, forStream int) bool {
		if !g.rec.On() {
			return false
		}
		w, _ := g.s.Load(0)
		g.rec.Record(&trace.Event{Time: int64(now), Kind: trace.Defer, Token: token, Stream: int32(stream),
			For: int32(forStream), Waiting: int32(w), Accel: -1, Variant: -1}, nil)
		return true
	})
	rec.SetMeta(g.traceMeta)
}

// traceMeta names the streams, accelerators and models the events index.
func (g *Governor) traceMeta() trace.Meta {
	var snap sched.Snapshot
	g.mu.Lock()
	m := trace.Meta{Models: slices.Clone(g.modelNames)} // grows under the lock (traceAction)
	g.mu.Unlock()
	g.Snapshot(&snap)
	for _, st := range snap.Streams {
		m.Streams = append(m.Streams, trace.Stream{Name: st.Name, Model: st.Model, Class: st.Class.String()})
	}
	for _, a := range g.s.Accelerators() {
		name := a.Name
		if name == "" {
			name = "backend"
		}
		m.Accels = append(m.Accels, trace.Accel{Name: name, Slots: a.Slots})
	}
	return m
}

// slotOf returns a global slot's accelerator and its slot there.
func (g *Governor) slotOf(slot int) (accel, in int16) {
	if slot < 0 || slot >= len(g.slotAccel) {
		return -1, -1
	}
	return g.slotAccel[slot], g.slotIn[slot]
}

func (g *Governor) traceArrive(now sched.Time, c *Call, req *sched.Request) {
	w, _ := g.s.Load(0)
	dl := int64(sched.Never)
	capture := int64(req.Capture)
	if capture == 0 || capture > int64(now) { // as the scheduler clamps it
		capture = int64(now)
	}
	st := g.s.Route(req.Stream, req.Model)
	if st >= 0 && st < len(g.maxAge) {
		if ma := g.maxAge[st]; ma > 0 {
			dl = capture + int64(ma)
		}
	}
	g.rec.Record(&trace.Event{Time: int64(now), Kind: trace.Arrive, Token: c.token, Stream: int32(st), For: -1,
		Capture: capture, Deadline: dl, Waiting: int32(w), Accel: -1, Slot: -1, Variant: -1}, c.Header.ID)
}

// traceAction records a scheduler decision: a Dispatch, or an Answer of a
// request that never reached the backend.
func (g *Governor) traceAction(now sched.Time, a *sched.Action) {
	e := trace.Event{Time: int64(now), Token: a.Token, Stream: int32(a.Stream), For: -1, Accel: -1, Slot: -1, Variant: -1}
	var jobs int
	if a.Kind == sched.Answer {
		e.Kind, e.Code, e.Outcome, e.Reason = trace.Answer, uint8(a.Code), uint8(a.Outcome), uint8(a.Reason)
		w, _ := g.s.Load(0)
		e.Waiting = int32(w)
	} else {
		e.Kind = trace.Dispatch
		e.Accel, e.Slot = g.slotOf(a.Slot)
		var w int
		w, jobs = g.s.Load(max(int(e.Accel), 0))
		e.Waiting, e.Busy = int32(w), int16(jobs)
		e.Queued, e.Capture, e.Deadline = a.Queued, int64(a.Capture), int64(a.Deadline)
		if a.BatchSize > 1 {
			e.Batch, e.BatchSize = a.Batch, int16(a.BatchSize)
		}
		if a.Model != "" {
			i, ok := g.modelIdx[a.Model]
			if !ok && len(g.modelNames) < math.MaxInt16 {
				// A variant the config does not name: numbered at first sight.
				i = int16(len(g.modelNames))
				g.modelIdx[a.Model], g.modelNames, ok = i, append(g.modelNames, a.Model), true
			}
			if ok {
				e.Variant = i
			}
		}
	}
	g.rec.Record(&e, nil)
}

// traceFinish records a job's end at the backend (Complete, on the slot it
// was dispatched to) and, for each of its frames, the Answer vig gives.
// c is the call dispatched (a batch's lead) and members a batch's calls, lead
// first (nil for a call alone).
func (g *Governor) traceFinish(now sched.Time, c *Call, err error, late bool, members []*Call) {
	code := status.Code(err)
	accel, slot := g.slotOf(c.slot)
	w, jobs := g.s.Load(max(int(accel), 0))
	e := trace.Event{Time: int64(now), Kind: trace.Complete, Token: c.token, Stream: int32(c.stream), For: -1,
		Accel: accel, Slot: slot, Busy: int16(jobs), Waiting: int32(w), Code: uint8(code), Variant: -1}
	if len(members) > 1 {
		e.Batch, e.BatchSize = c.token, int16(len(members))
	}
	g.rec.Record(&e, nil)
	e.Kind, e.Accel, e.Slot, e.Busy = trace.Answer, -1, -1, 0
	for i := range max(len(members), 1) {
		m := c
		if members != nil {
			m = members[i]
		}
		e.Token, e.Stream, e.Code = m.token, int32(m.stream), uint8(code)
		switch {
		case code == codes.Canceled || m.left:
			e.Outcome, e.Code = uint8(sched.Cancelled), uint8(codes.Canceled)
		case late:
			e.Outcome = uint8(sched.LateDropped)
		case err == nil:
			e.Outcome = uint8(sched.Forwarded)
		default:
			e.Outcome = uint8(sched.BackendError)
		}
		g.rec.Record(&e, nil)
	}
}

// traceCancelled records the Answer of a waiting call whose client left.
func (g *Governor) traceCancelled(now sched.Time, c *Call) {
	w, _ := g.s.Load(0)
	g.rec.Record(&trace.Event{Time: int64(now), Kind: trace.Answer, Token: c.token, Stream: int32(g.s.Route(g.intern(c.Header.Stream), g.intern(c.Header.Model))),
		For: -1, Waiting: int32(w), Accel: -1, Slot: -1, Variant: -1, Code: uint8(codes.Canceled), Outcome: uint8(sched.Cancelled)}, nil)
}
