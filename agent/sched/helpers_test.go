package sched

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

const ms = time.Millisecond

// at converts milliseconds on the fake clock to a Time.
func at(msec float64) Time { return Time(msec * float64(time.Millisecond)) }

// harness drives a Scheduler with a fake clock and checks the counter
// invariant after every call.
type harness struct {
	t    testing.TB
	s    *Scheduler
	now  Time
	tok  uint64
	acts []Action
	snap Snapshot
}

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &harness{t: t, s: s}
}

func (h *harness) set(now Time) {
	h.t.Helper()
	if now < h.now {
		h.t.Fatalf("fake clock going back from %v to %v", h.now, now)
	}
	h.now = now
}

func (h *harness) check() {
	h.t.Helper()
	snap := &h.snap
	h.s.Snapshot(h.now, snap)
	for _, st := range snap.Streams {
		if !st.Balanced() {
			h.t.Fatalf("t=%v stream %s unbalanced: %+v", time.Duration(h.now), st.Name, st.Counters)
		}
	}
	if w, ok := h.s.NextWake(); ok && w <= h.now {
		h.t.Fatalf("t=%v NextWake %v is not in the future", time.Duration(h.now), time.Duration(w))
	}
	if snap.Busy > snap.Slots {
		h.t.Fatalf("busy %d > slots %d", snap.Busy, snap.Slots)
	}
}

// arrive sends a request on stream (model taken from the stream's config
// unless given as "stream@model") captured at capture (0 = now).
func (h *harness) arrive(stream string, capture Time) (uint64, []Action) {
	h.t.Helper()
	model := ""
	for _, sp := range h.s.cfg.Streams {
		if sp.Name == stream {
			model = sp.Model
		}
	}
	return h.arriveReq(Request{Stream: stream, Model: model, Capture: capture})
}

func (h *harness) arriveReq(r Request) (uint64, []Action) {
	h.t.Helper()
	h.tok++
	if r.Token == 0 {
		r.Token = h.tok
	}
	h.acts = h.s.Arrive(h.now, r, h.acts[:0])
	h.check()
	return r.Token, slices.Clone(h.acts)
}

func (h *harness) complete(tok uint64, ok bool) []Action {
	h.t.Helper()
	h.acts = h.s.Complete(h.now, tok, ok, h.acts[:0])
	h.check()
	return slices.Clone(h.acts)
}

func (h *harness) tick() []Action {
	h.t.Helper()
	h.acts = h.s.Tick(h.now, h.acts[:0])
	h.check()
	return slices.Clone(h.acts)
}

func (h *harness) cancel(tok uint64) []Action {
	h.t.Helper()
	h.acts = h.s.Cancel(h.now, tok, h.acts[:0])
	h.check()
	return slices.Clone(h.acts)
}

func (h *harness) stats(name string) StreamStats {
	h.t.Helper()
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	for _, st := range snap.Streams {
		if st.Name == name {
			return st
		}
	}
	h.t.Fatalf("no stream %q", name)
	return StreamStats{}
}

// find returns the action for tok, if any.
func find(acts []Action, tok uint64) (Action, bool) {
	for _, a := range acts {
		if a.Token == tok {
			return a, true
		}
	}
	return Action{}, false
}

func mustDispatch(t testing.TB, acts []Action, tok uint64) Action {
	t.Helper()
	a, ok := find(acts, tok)
	if !ok || a.Kind != Dispatch {
		t.Fatalf("token %d not dispatched; actions %s", tok, fmtActs(acts))
	}
	return a
}

func mustAnswer(t testing.TB, acts []Action, tok uint64, code Code, out Outcome) Action {
	t.Helper()
	a, ok := find(acts, tok)
	if !ok || a.Kind != Answer || a.Code != code || a.Outcome != out {
		t.Fatalf("token %d: want answer %v/%v; actions %s", tok, code, out, fmtActs(acts))
	}
	return a
}

func mustNothing(t testing.TB, acts []Action, tok uint64) {
	t.Helper()
	if a, ok := find(acts, tok); ok {
		t.Fatalf("token %d: unexpected %v", tok, fmtAct(a))
	}
}

func fmtAct(a Action) string {
	if a.Kind == Dispatch {
		return fmt.Sprintf("dispatch(%d slot=%d busy=%d)", a.Token, a.Slot, a.Busy)
	}
	return fmt.Sprintf("answer(%d %v %v: %v)", a.Token, a.Code, a.Outcome, a.Reason)
}

func fmtActs(acts []Action) string {
	s := "["
	for i, a := range acts {
		if i > 0 {
			s += " "
		}
		s += fmtAct(a)
	}
	return s + "]"
}

// sim is a discrete-event driver: periodic open-loop sensors, a backend
// whose execution time per model is fixed, Tick at NextWake.
type sim struct {
	h        *harness
	exec     map[string]time.Duration // per model
	sensors  []sensor
	running  map[uint64]Time // token -> completion time
	model    map[uint64]string
	dispatch map[string]int // per stream
	streamOf map[uint64]string
	deliv    map[string][]Delivery
	capture  map[uint64]Time
	maxBusy  int
	jitter   bool
	waited   map[string]time.Duration // per stream, the longest a dispatched request waited in vig
}

type sensor struct {
	stream string
	phase  time.Duration
	every  time.Duration
	next   Time
}

func newSim(t testing.TB, cfg Config, exec map[string]time.Duration) *sim {
	h := newHarness(t, cfg)
	return &sim{h: h, exec: exec, running: map[uint64]Time{}, model: map[uint64]string{},
		dispatch: map[string]int{}, streamOf: map[uint64]string{}, deliv: map[string][]Delivery{},
		capture: map[uint64]Time{}, waited: map[string]time.Duration{}}
}

func (m *sim) sensor(stream string, phase, every time.Duration) {
	m.sensors = append(m.sensors, sensor{stream: stream, phase: phase, every: every, next: Time(phase)})
}

func (m *sim) handle(acts []Action) {
	for _, a := range acts {
		if a.Kind != Dispatch {
			continue
		}
		mod := m.model[a.Token]
		d := m.exec[mod]
		if m.jitter {
			// The mock backend's factor in [0.9, 1.3], a pure function
			// of the token.
			x := a.Token * 0x9E3779B97F4A7C15
			d = d * time.Duration(900+(x>>40)%401) / 1000
		}
		m.running[a.Token] = m.h.now.Add(d)
		m.dispatch[m.streamOf[a.Token]]++
		m.waited[m.streamOf[a.Token]] = max(m.waited[m.streamOf[a.Token]], a.Waited)
		m.maxBusy = max(m.maxBusy, len(m.running))
	}
}

func (m *sim) run(until Time) {
	h := m.h
	for {
		next := until
		for _, s := range m.sensors {
			next = min(next, s.next)
		}
		var done uint64
		doneAt := Never
		for tok, t := range m.running {
			if t < doneAt || (t == doneAt && tok < done) {
				doneAt, done = t, tok
			}
		}
		if doneAt <= next {
			next = doneAt
		} else {
			done = 0
		}
		if w, ok := h.s.NextWake(); ok && w < next {
			next, done = w, 0
		}
		if next >= until {
			return
		}
		h.set(next)
		if done != 0 {
			delete(m.running, done)
			st := m.streamOf[done]
			m.deliv[st] = append(m.deliv[st], Delivery{At: h.now, Capture: m.capture[done]})
			m.handle(h.complete(done, true))
			continue
		}
		fired := false
		for i := range m.sensors {
			s := &m.sensors[i]
			if s.next == h.now {
				fired = true
				model := ""
				for _, sp := range h.s.cfg.Streams {
					if sp.Name == s.stream {
						model = sp.Model
					}
				}
				h.tok++
				m.model[h.tok] = model
				m.streamOf[h.tok] = s.stream
				m.capture[h.tok] = h.now
				_, acts := h.arriveReq(Request{Token: h.tok, Stream: s.stream, Model: model})
				m.handle(acts)
				s.next = s.next.Add(s.every)
			}
		}
		if !fired {
			m.handle(h.tick())
		}
	}
}
