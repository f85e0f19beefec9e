package sched

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vig-edge/vig/internal/fuzztest"
)

// fuzzConfig has every feature at once: three classes, both queue kinds, an
// exclusive model, a budget, and default contracts.
func fuzzConfig(slots int) Config {
	return Config{
		Slots:           slots,
		SafetyMargin:    110,
		UnknownStreams:  DefaultContract,
		DefaultCapacity: 3,
		EstimatorWindow: 4,
		ProbeAfter:      2,
		Models: []ModelSpec{
			{Name: "det", Exec: 8 * ms},
			{Name: "pose", Exec: 5 * ms},
			{Name: "depth", Exec: 10 * ms},
			{Name: "vlm", Exec: 200 * ms, Exclusive: true},
			{Name: "ocr", Exec: 3 * ms},
			{Name: "scan", Exec: 12 * ms, Exclusive: true},
		},
		Streams: []StreamSpec{
			{Name: "detector", Model: "det", Class: Protected, Period: 50 * ms, MaxAge: 50 * ms, Queue: Latest},
			{Name: "lidar", Model: "scan", Class: Protected, Period: 100 * ms, MaxAge: 80 * ms, FrameInterval: 50 * ms, Queue: Latest},
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: FIFO, Capacity: 3},
			{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest, MinRateHz: 2},
			{Name: "vlm", Model: "vlm", Class: BestEffort, Period: time.Second, MaxAge: 2 * time.Second, Queue: Latest, MinRateHz: 0.5},
		},
	}
}

// fuzzAccelConfig is fuzzConfig on a GPU and a DLA: the protected detector
// and one exclusive model on each, so admission, exclusivity and budgets
// run on both.
func fuzzAccelConfig(gpu, dla int) Config {
	cfg := fuzzConfig(0)
	cfg.Accelerators = []AcceleratorSpec{{Name: "gpu", Slots: gpu}, {Name: "dla", Slots: dla}}
	on := map[string]string{"det": "dla", "scan": "dla", "ocr": "dla", "pose": "gpu", "depth": "gpu", "vlm": "gpu"}
	for i := range cfg.Models {
		cfg.Models[i].Accelerator = on[cfg.Models[i].Name]
	}
	return cfg
}

type tokState uint8

const (
	tokNone tokState = iota
	tokWaiting
	tokRunning
	tokDone
)

// eventChecker replays an event sequence decoded from bytes and checks the
// scheduler's safety properties after every call.
type eventChecker struct {
	h       *harness
	state   map[uint64]tokState
	capture map[uint64]Time
	running []uint64
	live    []uint64
	pinned  map[uint64]bool // carries a sequence's START or END
}

func (c *eventChecker) apply(acts []Action) {
	t, s := c.h.t, c.h.s
	for _, a := range acts {
		st := c.state[a.Token]
		switch a.Kind {
		case Dispatch:
			if st != tokWaiting {
				t.Fatalf("dispatch of token %d in state %d", a.Token, st)
			}
			c.state[a.Token] = tokRunning
			c.running = append(c.running, a.Token)
			e, str, base := engineOfDispatch(s, a.Token)
			if a.Slot < base || a.Slot >= base+e.slots {
				t.Fatalf("token %d dispatched to slot %d, outside its model's accelerator (slots %d..%d)", a.Token, a.Slot, base, base+e.slots-1)
			}
			dl := c.capture[a.Token].Add(str.maxAge)
			if str.adhoc {
				dl = Never
			}
			if a.Capture != c.capture[a.Token] || a.Waited < 0 {
				t.Fatalf("token %d dispatched with capture %v (sent %v), waited %v", a.Token, a.Capture, c.capture[a.Token], a.Waited)
			}
			if a.Deadline != dl {
				t.Fatalf("token %d dispatched with deadline %v, want %v", a.Token, a.Deadline, dl)
			}
			if dl <= c.h.now && !c.pinned[a.Token] {
				t.Fatalf("stale token %d dispatched at %v, deadline %v", a.Token, c.h.now, dl)
			}
			if !a.Probe && !c.pinned[a.Token] && a.Start.Add(e.cost(str.model, a.Busy)) > dl {
				t.Fatalf("token %d dispatched to miss its deadline", a.Token)
			}
			if (!a.Queued && a.Start != c.h.now) || a.Start < c.h.now {
				t.Fatalf("token %d: queued %v, start %v at %v", a.Token, a.Queued, a.Start, c.h.now)
			}
			if a.Queued {
				if e.reqs[e.tokens.get(a.Token)].state != stCommitted {
					t.Fatalf("queued token %d not committed", a.Token)
				}
				if e.models[str.model].spec.Exclusive && e.slots > 1 {
					t.Fatalf("exclusive token %d committed behind a running job", a.Token)
				}
			}
			if r := &e.reqs[e.tokens.get(a.Token)]; (a.Model != "") != r.variant || (r.variant && a.Model != str.spec.Model) {
				t.Fatalf("token %d (a logical model's: %v) dispatched as model %q on stream %s of %s", a.Token, r.variant, a.Model, str.name, str.spec.Model)
			}
			if e.models[str.model].spec.Exclusive && a.Busy != 0 {
				t.Fatalf("exclusive token %d dispatched beside %d jobs", a.Token, a.Busy)
			}
		case Answer:
			if a.Reason == ReasonDuplicateToken {
				if st != tokWaiting && st != tokRunning {
					t.Fatalf("duplicate-token answer for token %d in state %d", a.Token, st)
				}
				continue // the live request is unaffected
			}
			if st != tokWaiting && st != tokNone {
				t.Fatalf("answer to token %d in state %d", a.Token, st)
			}
			if c.pinned[a.Token] && (a.Outcome == Superseded || a.Reason == ReasonLate) {
				t.Fatalf("token %d carrying a sequence's START or END answered %v (%v)", a.Token, a.Outcome, a.Reason)
			}
			c.state[a.Token] = tokDone
		default:
			t.Fatalf("bad action %+v", a)
		}
	}
	// Slots and exclusivity, from the caller's point of view, per
	// accelerator.
	c.running = c.prune(c.running)
	c.live = c.prune(c.live)
	// A job at the backend has started or is committed behind a started
	// one: at most one of each per slot of its accelerator, and an
	// exclusive job (on more than one slot) has its accelerator to itself.
	for _, e := range engines(s) {
		n, started := 0, 0
		excl := false
		for _, tok := range c.running {
			if c.state[tok] != tokRunning || engineOfToken(s, tok) != e {
				continue
			}
			n++
			r := &e.reqs[e.tokens.get(tok)]
			if r.state == stRunning {
				started++
				if e.models[e.streams[r.stream].model].spec.Exclusive {
					excl = true
				}
			}
		}
		if started > e.slots || n > 2*e.slots || (excl && e.slots > 1 && n > 1) {
			t.Fatalf("accelerator %q: %d jobs at the backend, %d started (exclusive %v) on %d slots", e.accelName, n, started, excl, e.slots)
		}
		if n != e.busy+e.committed || started != e.busy {
			t.Fatalf("accelerator %q: caller sees %d at the backend (%d started), scheduler %d + %d committed", e.accelName, n, started, e.busy, e.committed)
		}
	}
	// At most one request of a sequence (of a model) at the backend.
	type seqKey struct {
		model string
		id    uint64
	}
	atBackend := map[seqKey]uint64{}
	for _, tok := range c.running {
		if c.state[tok] != tokRunning {
			continue
		}
		e := engineOfToken(s, tok)
		r := &e.reqs[e.tokens.get(tok)]
		if k := (seqKey{e.streams[r.stream].spec.Model, r.seqID}); k.id != 0 {
			if other, dup := atBackend[k]; dup {
				t.Fatalf("tokens %d and %d of sequence %d of model %s at the backend together", other, tok, k.id, k.model)
			}
			atBackend[k] = tok
		}
	}
}

// engines returns the one-accelerator schedulers behind s.
func engines(s *Scheduler) []*Scheduler {
	if !s.multi() {
		return []*Scheduler{s}
	}
	var es []*Scheduler
	for _, a := range s.accels {
		if a.e != nil {
			es = append(es, a.e)
		}
	}
	return es
}

// engineOfDispatch returns the engine holding tok, its stream there (a copy,
// for a logical model's frame) and the global number of its slot 0.
func engineOfDispatch(s *Scheduler, tok uint64) (*Scheduler, *stream, int) {
	if !s.multi() {
		return s, &s.streams[s.reqs[s.tokens.get(tok)].stream], 0
	}
	a := &s.accels[s.partOfToken(tok)]
	return a.e, &a.e.streams[a.e.reqs[a.e.tokens.get(tok)].stream], a.slotBase
}

// engineOfToken returns the engine holding tok (s itself on one accelerator).
func engineOfToken(s *Scheduler, tok uint64) *Scheduler {
	if !s.multi() {
		return s
	}
	if p := s.partOfToken(tok); p >= 0 {
		return s.accels[p].e
	}
	return nil
}

// prune drops finished tokens from list.
func (c *eventChecker) prune(list []uint64) []uint64 {
	out := list[:0]
	for _, tok := range list {
		if c.state[tok] != tokDone {
			out = append(out, tok)
		}
	}
	return out
}

func (c *eventChecker) pick(b byte, list []uint64) (uint64, bool) {
	if len(list) == 0 {
		return 0, false
	}
	return list[int(b)%len(list)], true
}

var fuzzStreams = []Request{
	{Stream: "detector", Model: "det"},
	{Stream: "lidar", Model: "scan"},
	{Stream: "pose", Model: "pose"},
	{Stream: "depth", Model: "depth"},
	{Stream: "vlm", Model: "vlm"},
	{Model: "ocr"},                     // default contract
	{Stream: "cam9", Model: "det"},     // unknown stream, default contract
	{Stream: "detector", Model: "ocr"}, // model mismatch
	{Model: "nope"},                    // unknown model
}

func runEvents(t testing.TB, data []byte) {
	if len(data) == 0 {
		return
	}
	// The first byte picks the device: one pool of 1–3 slots, or (128 and
	// up) a GPU and a DLA of 1–2 slots each, every model on one of them.
	cfg := fuzzConfig(1 + int(data[0]%3))
	reqs := fuzzStreams
	switch {
	case data[0] >= 128:
		cfg = fuzzAccelConfig(1+int(data[0]%2), 1+int(data[0]>>1%2))
	case data[0] >= 96:
		cfg, reqs = fuzzVariantConfig(1+int(data[0]%2)), fuzzVariantStreams
	}
	data = data[1:]
	c := &eventChecker{
		h:       newHarness(t, cfg),
		state:   map[uint64]tokState{},
		capture: map[uint64]Time{},
		pinned:  map[uint64]bool{},
	}
	h := c.h
	h.set(Time(time.Hour)) // room for old captures
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	drained := false
	dups := 0
	for len(data) > 0 {
		op := next()
		switch op % 8 {
		case 0, 1, 2:
			r := reqs[int(next())%len(reqs)]
			h.tok++
			r.Token = h.tok
			dup := false
			if op == 2 && len(c.live) > 0 && next() < 16 {
				r.Token, dup = c.live[int(next())%len(c.live)], true
				dups++
			}
			switch b := next(); {
			case b < 128:
				r.Capture = h.now - Time(time.Duration(b)*ms/2)
			case b < 136:
				r.Capture = h.now + Time(time.Duration(b-128)*ms)
			case b < 138:
				r.Capture = h.now - Time(2*time.Hour)
			case b < 140:
				r.Capture = math.MinInt64 + 1
			case b < 142:
				r.Capture = math.MaxInt64
			}
			if b := next(); b >= 200 {
				r.Priority, r.HasPriority = uint64(b-200), true
			} else if b < 8 {
				r.Timeout = time.Duration(int(b)-1) * ms
			} else if b < 40 {
				// Frames of three sequences, some carrying START or END.
				r.SequenceID, r.SequenceStart, r.SequenceEnd = uint64(b%3)+1, b&8 != 0, b&16 != 0
			}
			if !dup {
				c.pinned[r.Token] = r.SequenceStart || r.SequenceEnd
				c.state[r.Token] = tokWaiting
				cap := r.Capture
				if cap == 0 || cap > h.now {
					cap = h.now
				}
				c.capture[r.Token] = cap
				c.live = append(c.live, r.Token)
			}
			h.acts = h.s.Arrive(h.now, r, h.acts[:0])
			h.check()
			// An answer to the arriving token itself comes with state
			// "waiting"; apply accepts that.
			c.apply(h.acts)
		case 3, 4:
			tok, ok := c.pick(next(), c.running)
			if !ok {
				continue
			}
			h.set(h.now.Add(time.Duration(next()) * ms / 4))
			c.state[tok] = tokDone
			c.apply(h.complete(tok, op%2 == 0))
		case 5:
			h.set(h.now.Add(time.Duration(next()) * ms / 2))
			c.apply(h.tick())
		case 6:
			if w, ok := h.s.NextWake(); ok {
				h.set(w)
				c.apply(h.tick())
			}
		case 7:
			switch b := next(); {
			case b < 100:
				tok, ok := c.pick(next(), c.live)
				if !ok {
					continue
				}
				if c.state[tok] == tokWaiting {
					c.state[tok] = tokDone
				}
				c.apply(h.cancel(tok))
			case b < 110 && !drained:
				drained = true
				h.acts = h.s.Drain(h.now, h.acts[:0])
				h.check()
				c.apply(h.acts)
			case b < 130:
				h.acts = h.s.SetBackendAvailable(h.now, b < 120, h.acts[:0])
				h.check()
				c.apply(h.acts)
			case b < 150:
				m := fuzzConfig(1).Models[int(next())%6]
				h.s.ObserveBackendStats(m.Name, uint64(next())*uint64(ms), uint64(next()%4))
				h.check()
			}
		}
	}
	// Finish: drain, complete everything still running, and every token
	// must have ended exactly once.
	h.acts = h.s.Drain(h.now, h.acts[:0])
	h.check()
	c.apply(h.acts)
	for _, tok := range append([]uint64(nil), c.running...) {
		if c.state[tok] == tokRunning {
			h.set(h.now.Add(ms))
			c.state[tok] = tokDone
			c.apply(h.complete(tok, true))
		}
	}
	for tok, st := range c.state {
		if st != tokDone {
			t.Fatalf("token %d never answered (state %d)", tok, st)
		}
	}
	if !h.s.Drained() {
		t.Fatal("not drained at the end")
	}
	if _, ok := h.s.NextWake(); ok {
		t.Fatal("timer armed after drain")
	}
	// Every arrival is counted once, on a stream or as unrouted.
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	total := snap.Unrouted.Received
	for _, st := range snap.Streams {
		total += st.Received
		if st.InFlight() != 0 {
			t.Fatalf("stream %s still has %d in flight", st.Name, st.InFlight())
		}
	}
	if total != uint64(len(c.state)+dups) {
		t.Fatalf("received %d, arrivals %d", total, len(c.state)+dups)
	}
	// The request tables are whole again.
	for _, e := range engines(h.s) {
		free := 0
		for i := s32(e.free); i >= 0; i = s32(e.reqs[i].next) {
			free++
		}
		if free != len(e.reqs) {
			t.Fatalf("accelerator %q: request table leaked: %d of %d free", e.accelName, free, len(e.reqs))
		}
	}
}

func s32(i int32) int { return int(i) }

func seedCorpus() [][]byte {
	seeds := [][]byte{
		{0},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 40},
		{1, 0, 4, 0, 0, 0, 0, 0, 0, 5, 100, 3, 0, 255, 7, 105, 6},
		{2, 0, 4, 200, 250, 0, 0, 10, 9, 6, 6, 5, 255, 5, 255, 3, 0, 200, 7, 50, 0},
		{128, 0, 4, 0, 0, 1, 3, 0, 0, 0, 0, 5, 100, 3, 0, 255, 7, 105, 6},
		{97, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 20, 0, 0, 9, 0, 0, 5, 100, 3, 0, 255, 7, 105, 6, 0, 6, 0, 0, 7, 20, 0},
		{131, 0, 4, 200, 250, 0, 1, 10, 9, 0, 2, 0, 0, 6, 6, 5, 255, 5, 255, 3, 0, 200, 7, 50, 0},
	}
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 40; i++ {
		b := make([]byte, 100+r.IntN(400))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		seeds = append(seeds, b)
	}
	return seeds
}

func FuzzEvents(f *testing.F) {
	for _, s := range seedCorpus() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		defer fuzztest.Bound(t)()
		if len(data) > 4096 {
			return
		}
		runEvents(t, data)
	})
}

// TestRandomEvents runs longer random sequences than the seed corpus.
func TestRandomEvents(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 30
	}
	r := rand.New(rand.NewPCG(11, 13))
	for i := 0; i < n; i++ {
		b := make([]byte, 2000)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		runEvents(t, b)
	}
}
