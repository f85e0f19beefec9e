package sched

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// scenarioD is SCENARIOS.md's scenario D: a Jetson's GPU (1 slot) and two
// DLA cores; the VLM runs alone on the GPU with a budget of one run per 5 s.
func scenarioD() Config {
	return Config{
		Accelerators:   []AcceleratorSpec{{Name: "gpu", Slots: 1}, {Name: "dla", Slots: 2}},
		SafetyMargin:   DefaultMargin,
		UnknownStreams: DefaultContract,
		Models: []ModelSpec{
			{Name: "detector", Exec: 12 * ms, Accelerator: "dla"},
			{Name: "segment", Exec: 20 * ms, Accelerator: "dla"},
			{Name: "pose", Exec: 5 * ms, Accelerator: "gpu"},
			{Name: "depth", Exec: 10 * ms, Accelerator: "gpu"},
			{Name: "vlm", Exec: 200 * ms, Accelerator: "gpu", Exclusive: true},
		},
		Streams: []StreamSpec{
			{Name: "detector", Model: "detector", Class: Protected, Period: 33 * ms, MaxAge: 50 * ms, Queue: Latest},
			{Name: "segment", Model: "segment", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
			{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest},
			{Name: "vlm", Model: "vlm", Class: BestEffort, Period: time.Second, MaxAge: 2 * time.Second, Queue: Latest, MinRateHz: 0.2},
		},
	}
}

// onePool is cfg with its accelerators merged into one pool of slots, as
// vig configured before accelerators existed.
func onePool(cfg Config, slots int) Config {
	cfg.Accelerators, cfg.Slots = nil, slots
	cfg.Models = append([]ModelSpec(nil), cfg.Models...)
	for i := range cfg.Models {
		cfg.Models[i].Accelerator = ""
	}
	return cfg
}

func dlaSlot(t *testing.T, a Action) {
	t.Helper()
	if a.Slot != 1 && a.Slot != 2 {
		t.Fatalf("dispatch(%d) on slot %d: the DLA's slots are 1 and 2 (the GPU's is 0)", a.Token, a.Slot)
	}
}

// A GPU job does not start on a free DLA slot: with the GPU busy, a GPU
// request waits although two slots are free; a DLA request takes one of
// them, and its occupancy counts only DLA jobs. As one pool of 3 slots the
// GPU request would start at once (beside the running GPU job).
func TestAccelGPUJobWaitsForTheGPU(t *testing.T) {
	h := newHarness(t, scenarioD())
	h.set(at(1000))
	pose, acts := h.arrive("pose", 0)
	if a := mustDispatch(t, acts, pose); a.Slot != 0 || a.Busy != 0 {
		t.Fatalf("pose: %s, want slot 0 (the GPU) beside nothing", fmtAct(a))
	}
	h.set(at(1001))
	depth, acts := h.arrive("depth", 0)
	mustNothing(t, acts, depth) // the GPU is busy; the DLA is not the GPU
	if st := h.stats("depth"); st.Waiting != 1 {
		t.Fatalf("depth: %+v, want waiting", st.Counters)
	}
	det, acts := h.arrive("detector", 0)
	a := mustDispatch(t, acts, det)
	dlaSlot(t, a)
	if a.Busy != 0 {
		t.Fatalf("detector dispatched under occupancy %d: the GPU job is not on its accelerator", a.Busy)
	}
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	if len(snap.Accelerators) != 2 || snap.Accelerators[0].Busy != 1 || snap.Accelerators[1].Busy != 1 || snap.Busy != 2 || snap.Slots != 3 {
		t.Fatalf("snapshot: busy %d of %d, per accelerator %+v", snap.Busy, snap.Slots, snap.Accelerators)
	}
	h.set(at(1006))
	acts = h.complete(pose, true)
	if a := mustDispatch(t, acts, depth); a.Slot != 0 {
		t.Fatalf("depth: %s, want the GPU's slot 0", fmtAct(a))
	}
	// Busy slot time per accelerator: the GPU ran pose 1000–1006 and depth
	// since, the DLA the detector since 1001.
	h.s.Snapshot(at(1010), &snap)
	if g, d := snap.Accelerators[0].BusyTime, snap.Accelerators[1].BusyTime; g != 10*ms || d != 9*ms {
		t.Fatalf("busy time: gpu %v, dla %v", g, d)
	}

	// The same events on one pool of three slots start depth beside pose:
	// the ablation the test is about.
	p := newHarness(t, onePool(scenarioD(), 3))
	p.set(at(1000))
	p.arrive("pose", 0)
	p.set(at(1001))
	depth, acts = p.arrive("depth", 0)
	mustDispatch(t, acts, depth)
}

// A DLA job never waits behind a GPU job: while the VLM (corun: false on
// the GPU) runs, DLA frames start at once; as one pool the VLM's corun:
// false would hold them until it ends.
func TestAccelDLANotBehindExclusiveGPUJob(t *testing.T) {
	h := newHarness(t, scenarioD())
	h.set(at(1000))
	vlm, acts := h.arrive("vlm", 0)
	if a := mustDispatch(t, acts, vlm); a.Slot != 0 {
		t.Fatalf("vlm: %s, want the GPU", fmtAct(a))
	}
	for i, name := range []string{"detector", "segment"} {
		h.set(at(1001 + float64(i)))
		tok, acts := h.arrive(name, 0)
		a := mustDispatch(t, acts, tok)
		dlaSlot(t, a)
		if a.Busy != i {
			t.Fatalf("%s: occupancy %d, want %d (DLA jobs only)", name, a.Busy, i)
		}
	}
	h.set(at(1003))
	pose, acts := h.arrive("pose", 0)
	mustNothing(t, acts, pose) // the GPU is the VLM's alone

	p := newHarness(t, onePool(scenarioD(), 3))
	p.set(at(1000))
	vlm, acts = p.arrive("vlm", 0)
	mustDispatch(t, acts, vlm)
	p.set(at(1001))
	det, acts := p.arrive("detector", 0)
	mustNothing(t, acts, det)
}

// Admission guards a protected stream only against jobs on its own
// accelerator: the VLM on the GPU is not deferred for the detector's frames
// on the DLA (no budget needed), where as one pool it is.
func TestAccelAdmissionPerAccelerator(t *testing.T) {
	cfg := scenarioD()
	cfg.Streams[4].MinRateHz = 0 // no budget: admission alone decides
	for _, tc := range []struct {
		name     string
		cfg      Config
		deferred bool
	}{
		{"accelerators", cfg, false},
		{"one pool of 3", onePool(cfg, 3), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			h.set(at(1000))
			det, acts := h.arrive("detector", 0)
			mustDispatch(t, acts, det)
			h.set(at(1012))
			h.complete(det, true)
			h.set(at(1013))
			vlm, acts := h.arrive("vlm", 0)
			_, dispatched := find(acts, vlm)
			if st := h.stats("vlm"); dispatched == tc.deferred || (st.Deferred == 1) != tc.deferred {
				t.Fatalf("vlm dispatched %v, deferred %d; want deferred %v (actions %s)", dispatched, st.Deferred, tc.deferred, fmtActs(acts))
			}
		})
	}
}

func TestAccelRoutingAndSnapshot(t *testing.T) {
	h := newHarness(t, scenarioD())
	s := h.s
	// Streams are numbered as one engine would number them: configured
	// ones in config order, then the default contracts in model order.
	want := []string{"detector", "segment", "pose", "depth", "vlm",
		"default/detector", "default/segment", "default/pose", "default/depth", "default/vlm"}
	if s.NumStreams() != len(want) {
		t.Fatalf("NumStreams %d, want %d", s.NumStreams(), len(want))
	}
	for i, name := range want {
		if got := s.StreamName(i); got != name {
			t.Fatalf("stream %d is %q, want %q", i, got, name)
		}
	}
	h.set(at(1000))
	tok, acts := h.arrive("depth", 0)
	if a := mustDispatch(t, acts, tok); a.Stream != 3 || s.StreamName(a.Stream) != "depth" || s.AcceleratorOf(a.Slot) != 0 {
		t.Fatalf("depth: %s stream %d", fmtAct(a), a.Stream)
	}
	// A default-contract request on a DLA model runs on the DLA.
	tok, acts = h.arriveReq(Request{Stream: "cam9", Model: "segment"})
	if a := mustDispatch(t, acts, tok); s.StreamName(a.Stream) != "default/segment" || s.AcceleratorOf(a.Slot) != 1 {
		t.Fatalf("cam9: %s stream %q", fmtAct(a), s.StreamName(a.Stream))
	}
	// A token live on the GPU is a duplicate on the DLA too; the live
	// request is unaffected.
	_, acts = h.arriveReq(Request{Token: 1, Stream: "detector", Model: "detector"})
	if a := mustAnswer(t, acts, 1, InvalidArgument, Rejected); a.Reason != ReasonDuplicateToken {
		t.Fatalf("duplicate: %s", fmtAct(a))
	}
	// A stream configured for a model on the other accelerator.
	tok, acts = h.arriveReq(Request{Stream: "detector", Model: "pose"})
	mustAnswer(t, acts, tok, InvalidArgument, Rejected)
	// An unknown model is NotFound, counted unrouted.
	tok, acts = h.arriveReq(Request{Model: "nope"})
	mustAnswer(t, acts, tok, NotFound, Rejected)
	var snap Snapshot
	s.Snapshot(h.now, &snap)
	if snap.Unrouted.Received != 1 || snap.Streams[1].Received != 0 || snap.Streams[0].Received != 2 {
		t.Fatalf("unrouted %+v, detector %+v", snap.Unrouted, snap.Streams[0].Counters)
	}
	if len(snap.Accelerators) != 2 || snap.Accelerators[0].Name != "gpu" || snap.Accelerators[1].Name != "dla" ||
		snap.Accelerators[0].Busy != 1 || snap.Accelerators[1].Busy != 1 {
		t.Fatalf("accelerators %+v", snap.Accelerators)
	}
	if e, ok := s.Estimate("segment", 1); !ok || e != 20*ms {
		t.Fatalf("Estimate(segment, 1) = %v %v", e, ok)
	}
	if _, ok := s.Estimate("pose", 1); ok {
		t.Fatal("Estimate(pose, 1): the GPU has one slot")
	}
	s.ObserveBackendStats("pose", uint64(7*ms), 1)
	if e, _ := s.Estimate("pose", 0); e != 7*ms {
		t.Fatalf("pose estimate after backend stats: %v", e)
	}
	h.acts = s.Drain(h.now, h.acts[:0])
	if s.Drained() {
		t.Fatal("drained with two jobs running")
	}
	h.complete(1, true)
	h.complete(2, true)
	if !s.Drained() {
		t.Fatal("not drained")
	}
	if _, ok := s.NextWake(); ok {
		t.Fatal("timer armed after drain")
	}
}

func TestAccelConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"both", func(c *Config) { c.Slots = 3 }, "both slots (3) and accelerators"},
		{"undeclared", func(c *Config) { c.Models[0].Accelerator = "npu" }, `model "detector": accelerator "npu" is not declared`},
		{"missing", func(c *Config) { c.Models[0].Accelerator = "" }, `model "detector": no accelerator given`},
		{"twice", func(c *Config) { c.Accelerators[1].Name = "gpu" }, `accelerator "gpu" declared twice`},
		{"no slots", func(c *Config) { c.Accelerators[1].Slots = 0 }, `accelerator "dla": 0 slots`},
		{"empty name", func(c *Config) { c.Accelerators[0].Name = "" }, "accelerators[0]: empty name"},
		{"on without accelerators", func(c *Config) { *c = onePool(*c, 1); c.Models[2].Accelerator = "gpu" }, "no accelerators are declared"},
		{"stream checks still apply", func(c *Config) { c.Streams[0].MaxAge = 0 }, "max_age_ms must be > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := scenarioD()
			cfg.Models = append([]ModelSpec(nil), cfg.Models...)
			cfg.Accelerators = append([]AcceleratorSpec(nil), cfg.Accelerators...)
			tc.edit(&cfg)
			_, err := New(cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	// One accelerator declared is the shorthand's scheduler, named.
	cfg := onePool(scenarioD(), 0)
	cfg.Accelerators = []AcceleratorSpec{{Name: "npu", Slots: 2}}
	s, err := New(cfg)
	if err != nil || s.multi() || s.slots != 2 || s.Accelerators()[0].Name != "npu" {
		t.Fatalf("one accelerator: %v multi=%v", err, s != nil && s.multi())
	}
	// An accelerator nothing runs on is allowed, and shown idle.
	cfg = scenarioD()
	cfg.Accelerators = append(cfg.Accelerators, AcceleratorSpec{Name: "cpu", Slots: 4})
	h := newHarness(t, cfg)
	var snap Snapshot
	h.s.Snapshot(0, &snap)
	if len(snap.Accelerators) != 3 || snap.Accelerators[2].Name != "cpu" || snap.Slots != 7 {
		t.Fatalf("idle accelerator: %+v", snap.Accelerators)
	}
}

// The scenario on the fake clock with the mock's execution-time factor:
// every contract stream keeps its windows but for the VLM's budgeted runs,
// which cost only the GPU's streams, and the VLM gets its budget.
func TestAccelScenarioDSimulation(t *testing.T) {
	exec := map[string]time.Duration{"detector": 12 * ms, "segment": 20 * ms, "pose": 5 * ms, "depth": 10 * ms, "vlm": 200 * ms}
	cov := func(cfg Config) map[string]CoverageResult {
		m := newSim(t, cfg, exec)
		m.jitter = true
		for i, name := range []string{"detector", "segment", "pose", "depth"} {
			m.sensor(name, time.Duration(7*i)*ms, 33*ms)
		}
		m.sensor("vlm", 28*ms, time.Second)
		end := Time(30 * time.Second)
		m.run(end)
		out := map[string]CoverageResult{}
		for _, sp := range cfg.Streams {
			out[sp.Name] = Coverage(Time(time.Second), end-Time(time.Second), sp.Period, sp.MaxAge, m.deliv[sp.Name])
		}
		return out
	}
	got := cov(scenarioD())
	for name, floor := range map[string]float64{"detector": 1, "segment": 1, "pose": 0.93, "depth": 0.93} {
		if r := got[name].Ratio(); r < floor {
			t.Errorf("%s: coverage %.3f (%d of %d), want ≥ %.2f", name, r, got[name].Covered, got[name].Windows, floor)
		}
	}
	// Its budget: one run per 5 s, so 5 of the 28 windows measured.
	if v := got["vlm"]; v.Covered < v.Windows/5 {
		t.Errorf("vlm: %d of %d windows, want its budget of one in 5", v.Covered, v.Windows)
	}
	// As one pool of 3 slots with the VLM on its budget, the detector loses
	// windows while the VLM runs alone on the "whole device".
	pool := cov(onePool(scenarioD(), 3))
	if pool["detector"].Covered >= got["detector"].Covered {
		t.Errorf("one pool: detector %d windows, accelerators %d: the ablation shows nothing", pool["detector"].Covered, got["detector"].Covered)
	}
	t.Logf("accelerators: %v", got)
	t.Logf("one pool of 3: %v", pool)
}

// A frame whose fastest result would land in a window its stream already has
// (doubling it) while its predicted result lands in the next one is held until
// even its fastest result lands there: a result on the window's edge covers
// one window or the other by chance, a held one the right one.
func TestHeldToLandInItsWindow(t *testing.T) {
	cfg := Config{
		Slots: 1, SafetyMargin: 110,
		Models:  []ModelSpec{{Name: "depth", Exec: 10 * ms}},
		Streams: []StreamSpec{{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest}},
	}
	h := newHarness(t, cfg)
	a, acts := h.arrive("depth", 0) // the grid starts here
	mustDispatch(t, acts, a)
	h.set(at(10))
	h.complete(a, true) // window 0 is covered
	h.set(at(22.5))
	b, acts := h.arrive("depth", 0)
	mustNothing(t, acts, b) // at 22.5 + 10 it would double window 0
	if w, ok := h.s.NextWake(); !ok || w != at(23) {
		t.Fatalf("NextWake %v %v, want 23 ms (window 1's start − 10 ms)", time.Duration(w), ok)
	}
	h.set(at(23))
	mustDispatch(t, h.tick(), b)
	if st := h.stats("depth"); st.Held != 1 {
		t.Fatalf("held %d", st.Held)
	}
	// Not held when its sensor's next frame comes before the hold would end
	// (that frame serves the window; holding would only lose this one).
	cfg.Streams[0].FrameInterval = ms / 4
	h = newHarness(t, cfg)
	a, acts = h.arrive("depth", 0)
	mustDispatch(t, acts, a)
	h.set(at(10))
	h.complete(a, true)
	h.set(at(22.5))
	b, acts = h.arrive("depth", 0)
	mustDispatch(t, acts, b)
}

// A stream running late keeps its pace: its frame would land in its own
// capture window, already covered by the older frame that ran late, so it is
// held until even its fastest result lands in the next window (run at once,
// it would double that window and leave the next one empty).
func TestHeldToKeepALatePace(t *testing.T) {
	cfg := Config{
		Slots: 1, SafetyMargin: 100,
		Models: []ModelSpec{{Name: "lane", Exec: 14 * ms}, {Name: "long", Exec: 20 * ms}},
		Streams: []StreamSpec{
			{Name: "lane", Model: "lane", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
			{Name: "long", Model: "long", Class: High, Period: time.Second, MaxAge: 2 * time.Second, Queue: Latest},
		},
	}
	h := newHarness(t, cfg)
	long, acts := h.arrive("long", 0)
	mustDispatch(t, acts, long) // 0–20 ms
	h.set(at(1))
	a, acts := h.arrive("lane", 0) // the grid starts here
	mustNothing(t, acts, a)
	h.set(at(20))
	mustDispatch(t, h.complete(long, true), a) // 20–34 ms
	h.set(at(34))
	h.complete(a, true) // window 1, by a frame of window 0
	h.set(at(35))
	b, acts := h.arrive("lane", at(33))
	mustNothing(t, acts, b) // at 35 + 14 it would double window 1
	if w, ok := h.s.NextWake(); !ok || w != at(52) {
		t.Fatalf("NextWake %v %v, want 52 ms (window 2's start − 14 ms)", time.Duration(w), ok)
	}
	h.set(at(52))
	mustDispatch(t, h.tick(), b)
	if st := h.stats("lane"); st.Held != 1 {
		t.Fatalf("held %d", st.Held)
	}
}

// A frame committed behind a running job is held, as on a free slot, when its
// fastest result could double a window its stream already has: judged from
// the running job's earliest plausible end (its p10), not its predicted one
// (p90), since the backend starts the committed job the moment the running
// one ends.
func TestHeldBehindAnEarlyEnd(t *testing.T) {
	cfg := Config{
		Slots: 1, SafetyMargin: 100,
		Models: []ModelSpec{{Name: "depth", Exec: 10 * ms}, {Name: "pose", Exec: 10 * ms}},
		Streams: []StreamSpec{
			{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest},
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
		},
	}
	h := newHarness(t, cfg)
	// pose runs 6 or 14 ms (p10 6, p90 14); depth 10 ms.
	for k := range 20 {
		base := at(float64(33 * k))
		h.set(base)
		p, acts := h.arrive("pose", base)
		mustDispatch(t, acts, p)
		h.set(base.Add(time.Duration(6+8*(k%2)) * ms))
		h.complete(p, true)
	}
	base := at(33 * 20)
	h.set(base.Add(2 * ms))
	d, acts := h.arrive("depth", base.Add(2*ms))
	mustDispatch(t, acts, d)
	h.set(base.Add(12 * ms))
	h.complete(d, true) // depth's window 20 covered
	h.set(base.Add(16 * ms))
	p, acts := h.arrive("pose", base.Add(16*ms))
	mustDispatch(t, acts, p) // ends at 22–30 ms into the window
	h.set(base.Add(21 * ms))
	d, acts = h.arrive("depth", base.Add(21*ms))
	// Behind pose's predicted end (30) depth would land at 40, in window
	// 21; behind its earliest (22) at 31, doubling window 20.
	mustNothing(t, acts, d)
	if st := h.stats("depth"); st.Held != 1 {
		t.Fatalf("held %d", st.Held)
	}
}
