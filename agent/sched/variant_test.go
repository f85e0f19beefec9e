package sched

import (
	"strings"
	"testing"
	"time"
)

// variantConfig is a Jetson-shaped device: a GPU and two DLA cores, a
// detector built for each (slower on the GPU, so that only the queues can
// make it the best), lane on DLA0, segment on DLA1 and a VLM on the GPU.
func variantConfig() Config {
	return Config{
		Accelerators: []AcceleratorSpec{{Name: "gpu", Slots: 1}, {Name: "dla0", Slots: 1}, {Name: "dla1", Slots: 1}},
		SafetyMargin: 100,
		Models: []ModelSpec{
			{Name: "detector", Variants: []string{"detector_gpu", "detector_dla0", "detector_dla1"}},
			{Name: "detector_gpu", Exec: 20 * ms, Accelerator: "gpu"},
			{Name: "detector_dla0", Exec: 14 * ms, Accelerator: "dla0"},
			{Name: "detector_dla1", Exec: 14 * ms, Accelerator: "dla1"},
			{Name: "lane", Exec: 14 * ms, Accelerator: "dla0"},
			{Name: "segment", Exec: 10 * ms, Accelerator: "dla1"},
			{Name: "vlm", Exec: 200 * ms, Accelerator: "gpu"},
		},
		Streams: []StreamSpec{
			{Name: "detector", Model: "detector", Class: Protected, Period: 33 * ms, MaxAge: 50 * ms, Queue: Latest, WindowAligned: true},
			{Name: "lane", Model: "lane", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
			{Name: "segment", Model: "segment", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
			{Name: "vlm", Model: "vlm", Class: BestEffort, Period: time.Second, MaxAge: 2 * time.Second, Queue: Latest},
		},
	}
}

// slotOf returns the global slot of accelerator name's slot 0.
func slotOf(t *testing.T, s *Scheduler, name string) int {
	t.Helper()
	for p := range s.accels {
		if s.accels[p].name == name {
			return s.accels[p].slotBase
		}
	}
	t.Fatalf("no accelerator %q", name)
	return -1
}

func mustRunAs(t *testing.T, s *Scheduler, acts []Action, tok uint64, model, accel string) Action {
	t.Helper()
	a := mustDispatch(t, acts, tok)
	if a.Model != model || a.Slot != slotOf(t, s, accel) {
		t.Fatalf("token %d ran as %q on slot %d, want %q on %s: %s", tok, a.Model, a.Slot, model, accel, fmtActs(acts))
	}
	if got := s.StreamName(a.Stream); got != "detector" {
		t.Fatalf("token %d: Dispatch names stream %q, want the logical stream", tok, got)
	}
	return a
}

// A frame goes to the variant whose result lands first: the idle GPU even
// though its engine is the slower one, and with the GPU busy the DLA core
// whose queue ends first.
func TestVariantLandsFirst(t *testing.T) {
	h := newHarness(t, variantConfig())
	h.arrive("lane", 0)    // DLA0 until 14 ms
	h.arrive("segment", 0) // DLA1 until 10 ms
	h.set(at(1))
	tok, acts := h.arrive("detector", 0)
	mustRunAs(t, h.s, acts, tok, "detector_gpu", "gpu") // lands at 21 ms; DLA1 at 24, DLA0 at 28

	h = newHarness(t, variantConfig())
	h.arrive("vlm", 0)     // the GPU until 200 ms
	h.arrive("lane", 0)    // DLA0 until 14 ms
	h.arrive("segment", 0) // DLA1 until 10 ms
	h.set(at(1))
	tok, acts = h.arrive("detector", 0)
	mustNothing(t, acts, tok) // waits at DLA1, behind segment
	h.set(at(10))
	acts = h.complete(2+1, true) // segment
	mustRunAs(t, h.s, acts, tok, "detector_dla1", "dla1")

	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	for _, v := range snap.Variants {
		want := uint64(0)
		if v.Variant == "detector_dla1" {
			want = 1
		}
		if v.Stream != "detector" || v.Model != "detector" || v.Dispatched != want {
			t.Fatalf("variant counts %+v", snap.Variants)
		}
	}
	if len(snap.Variants) != 3 {
		t.Fatalf("variant counts %+v", snap.Variants)
	}
}

// A frame does not go where it lands first when that would push another
// stream's frame past its window: DLA1 would complete the detector's frame
// first, but segment's next frame, due there 5 ms later, would then end past
// its window; DLA0 (lane's next frame misses its window either way) costs
// nothing, and the frame goes there.
func TestVariantSparesAnotherStreamsWindow(t *testing.T) {
	cfg := variantConfig()
	cfg.Models[5].Exec = 20 * ms // segment
	h := newHarness(t, cfg)
	h.arrive("vlm", 0) // the GPU until 200 ms; the grid's origin at 0
	h.set(at(5))
	seg, acts := h.arrive("segment", at(5))
	mustDispatch(t, acts, seg)
	h.set(at(22))
	lane, acts := h.arrive("lane", at(22)) // DLA0 until 36 ms
	mustDispatch(t, acts, lane)
	h.set(at(25))
	h.complete(seg, true) // segment's window 0 covered; its next frame at 38
	h.set(at(33))
	tok, acts := h.arrive("detector", at(33))
	// DLA1 lands at 47 and pushes segment to 67, past 66; DLA0 lands at 50.
	mustNothing(t, acts, tok)
	h.set(at(36))
	acts = h.complete(lane, true)
	mustRunAs(t, h.s, acts, tok, "detector_dla0", "dla0")
}

// A protected frame placed on an accelerator goes before that accelerator's
// waiting high frames (admission holds them back for it), so the windows
// those frames then miss are its cost: DLA0 would land the detector's frame
// first (28 ms against DLA1's 30), but push lane's waiting frame past its
// window (28 → 42 ms, window end 33); DLA1 costs nothing.
func TestVariantProtectedFramePricesTheGuard(t *testing.T) {
	cfg := variantConfig()
	cfg.Models[5].Exec = 16 * ms // segment
	cfg.Models = append(cfg.Models, ModelSpec{Name: "map", Exec: 14 * ms, Accelerator: "dla0"})
	cfg.Streams = append(cfg.Streams, StreamSpec{Name: "map", Model: "map", Class: BestEffort, Period: time.Second, MaxAge: 2 * time.Second, Queue: Latest})
	h := newHarness(t, cfg)
	h.arrive("vlm", 0) // the GPU until 200 ms
	mapA, _ := h.arrive("map", 0)
	h.arrive("segment", 0) // DLA1 until 16
	h.set(at(5))
	h.arrive("lane", at(5)) // waits behind map (DLA0 until 14)
	h.set(at(6))
	tok, acts := h.arrive("detector", at(6))
	mustNothing(t, acts, tok)
	h.set(at(14))
	acts = h.complete(mapA, true)                         // DLA0 frees for lane
	mustRunAs(t, h.s, acts, tok, "detector_dla1", "dla1") // committed behind segment
}

// A frame does not queue behind a job whose end is uncertain: the GPU runs a
// VLM that has taken 150 to 300 ms; predicted at its p90, the detector's frame
// would land there first (8 ms after the VLM), but were the VLM as late as its
// spread allows the frame would be stale; an idle DLA core lands it 1 ms later
// for sure.
func TestVariantAvoidsAnUncertainQueue(t *testing.T) {
	cfg := variantConfig()
	cfg.Models[1].Exec = 8 * ms // detector_gpu
	h := newHarness(t, cfg)
	for k := range 20 {
		start := at(float64(1000 * k))
		h.set(start)
		v, acts := h.arrive("vlm", start)
		mustDispatch(t, acts, v)
		h.set(start.Add(time.Duration(150+150*(k%2)) * ms))
		h.complete(v, true)
	}
	frame := at(33 * 1000)        // a window's start
	start := frame.Add(-295 * ms) // the VLM, predicted to end 5 ms after the frame
	h.set(start)
	v, acts := h.arrive("vlm", start)
	mustDispatch(t, acts, v)
	h.set(frame)
	tok, acts := h.arrive("detector", frame)
	mustRunAs(t, h.s, acts, tok, "detector_dla0", "dla0")
}

// A frame leaves the accelerator where it would land first when that one
// was busy above busyHigh of late with its own streams' work, for a less
// busy one where it is still on time; the same frame after the GPU was idle
// goes to the GPU.
func TestVariantLeavesABusyAccelerator(t *testing.T) {
	cfg := variantConfig()
	cfg.Models[1].Exec = 8 * ms // detector_gpu: the fastest
	cfg.Models = append(cfg.Models, ModelSpec{Name: "depth", Exec: 30 * ms, Accelerator: "gpu"})
	cfg.Streams = append(cfg.Streams, StreamSpec{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest})
	for _, loaded := range []bool{true, false} {
		h := newHarness(t, cfg)
		var end Time
		for k := range 40 { // the GPU busy 30 ms of every 33 (91 %) for 1.3 s
			start := at(float64(33 * k))
			h.set(start)
			if !loaded {
				continue
			}
			tok, acts := h.arrive("depth", start)
			mustDispatch(t, acts, tok)
			end = start.Add(30 * ms)
			h.set(end)
			h.complete(tok, true)
		}
		h.set(max(end, h.now).Add(ms))
		tok, acts := h.arrive("detector", h.now)
		if loaded {
			// GPU at +8 ms, DLA0 at +14 ms: both in time; the GPU is busy.
			mustRunAs(t, h.s, acts, tok, "detector_dla0", "dla0")
		} else {
			mustRunAs(t, h.s, acts, tok, "detector_gpu", "gpu")
		}
	}
}

// A frame stays where it lands first, however busy that accelerator, when
// no other would complete it in time.
func TestVariantBusyButOnlyInTime(t *testing.T) {
	cfg := variantConfig()
	cfg.Models[1].Exec = 8 * ms
	cfg.Models = append(cfg.Models, ModelSpec{Name: "depth", Exec: 30 * ms, Accelerator: "gpu"},
		ModelSpec{Name: "long", Exec: 60 * ms, Accelerator: "dla0"}, ModelSpec{Name: "long1", Exec: 60 * ms, Accelerator: "dla1"})
	cfg.Streams = append(cfg.Streams,
		StreamSpec{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest},
		StreamSpec{Name: "long", Model: "long", Class: High, Period: time.Second, MaxAge: 2 * time.Second, Queue: Latest},
		StreamSpec{Name: "long1", Model: "long1", Class: High, Period: time.Second, MaxAge: 2 * time.Second, Queue: Latest})
	h := newHarness(t, cfg)
	var end Time
	for k := range 40 {
		start := at(float64(33 * k))
		h.set(start)
		tok, acts := h.arrive("depth", start)
		mustDispatch(t, acts, tok)
		end = start.Add(30 * ms)
		h.set(end)
		h.complete(tok, true)
	}
	h.set(end.Add(ms))
	for _, n := range []string{"long", "long1"} { // both DLA cores busy 60 ms: a frame there would be 74 ms old
		tok, acts := h.arrive(n, h.now)
		mustDispatch(t, acts, tok)
	}
	tok, acts := h.arrive("detector", h.now)
	mustRunAs(t, h.s, acts, tok, "detector_gpu", "gpu")
}

// A newer frame sent to another variant supersedes the older one waiting at
// the first, which is answered Aborted exactly once and never runs; an
// arrival older than a frame waiting at any variant is itself superseded.
func TestVariantSupersedesAcrossVariants(t *testing.T) {
	h := newHarness(t, variantConfig())
	vlm, _ := h.arrive("vlm", 0)
	lane, _ := h.arrive("lane", 0)
	seg, _ := h.arrive("segment", 0)
	_ = vlm
	h.set(at(1))
	f1, acts := h.arrive("detector", 0)
	mustNothing(t, acts, f1) // waits at DLA1
	h.set(at(3))
	h.complete(lane, true) // DLA0 idle
	h.set(at(4))
	f2, acts := h.arrive("detector", at(4))
	mustRunAs(t, h.s, acts, f2, "detector_dla0", "dla0")
	mustAnswer(t, acts, f1, Aborted, Superseded)
	seen := 0
	for _, a := range acts {
		if a.Token == f1 {
			seen++
		}
	}
	if seen != 1 {
		t.Fatalf("token %d answered %d times: %s", f1, seen, fmtActs(acts))
	}
	h.set(at(10))
	acts = h.complete(seg, true)
	mustNothing(t, acts, f1)

	// f3 waits at DLA0 (behind f2 until 18 ms; DLA1 runs segment until 20
	// ms). Segment ends early, and a frame captured before f3 arrives: it
	// would land first at the idle DLA1, but f3 is newer: the arrival is
	// superseded, and f3 waits on.
	seg2, _ := h.arrive("segment", 0)
	h.set(at(11))
	f3, acts := h.arrive("detector", at(11))
	mustNothing(t, acts, f3)
	h.set(at(12))
	h.complete(seg2, true)
	old, acts := h.arrive("detector", at(5))
	mustAnswer(t, acts, old, Aborted, Superseded)
	mustNothing(t, acts, f3)
	st := h.stats("detector")
	if st.Received != 4 || st.Superseded != 2 || st.Waiting != 1 || st.Running != 1 || st.Forwarded != 0 {
		t.Fatalf("detector counters %+v", st.Counters)
	}
}

// Coverage of a logical stream counts a window once, whichever variants
// delivered in it.
func TestVariantCoverageCountsAWindowOnce(t *testing.T) {
	h := newHarness(t, variantConfig())
	f1, acts := h.arrive("detector", 0)
	mustRunAs(t, h.s, acts, f1, "detector_dla0", "dla0") // DLA0 and DLA1 tie: the first listed
	h.set(at(14))
	h.complete(f1, true) // window 0, by the second variant listed
	h.set(at(33))
	f2, acts := h.arrive("detector", 0)
	mustRunAs(t, h.s, acts, f2, "detector_dla0", "dla0")
	h.set(at(34))
	f3, acts := h.arrive("detector", 0)
	mustRunAs(t, h.s, acts, f3, "detector_dla1", "dla1") // DLA1 lands at 48, DLA0 at 61
	h.set(at(47))
	h.complete(f2, true)
	h.set(at(48))
	h.complete(f3, true) // window 1, twice
	h.set(at(100))
	st := h.stats("detector")
	if st.CoverageWindows != 3 || st.CoveredWindows != 2 {
		t.Fatalf("detector coverage %d of %d windows, want 2 of 3", st.CoveredWindows, st.CoverageWindows)
	}
	if st.Forwarded != 3 || !st.HasAoI || st.AoI != 100*ms-34*ms {
		t.Fatalf("detector %+v", st)
	}
}

// Every request of a logical stream is answered once under Cancel, a
// backend marked down and Drain, and its counters balance.
func TestVariantExactlyOnce(t *testing.T) {
	h := newHarness(t, variantConfig())
	h.arrive("vlm", 0)
	lane, _ := h.arrive("lane", 0)
	h.arrive("segment", 0)
	h.set(at(1))
	f1, _ := h.arrive("detector", 0) // waits at DLA1
	acts := h.cancel(f1)
	mustNothing(t, acts, f1)
	h.set(at(2))
	f2, _ := h.arrive("detector", 0)
	h.acts = h.s.SetBackendAvailable(h.now, false, h.acts[:0])
	h.check()
	mustAnswer(t, h.acts, f2, Unavailable, Rejected)
	h.acts = h.s.SetBackendAvailable(h.now, true, h.acts[:0])
	h.check()
	h.set(at(3))
	h.complete(lane, true)
	f3, acts := h.arrive("detector", 0) // DLA0, idle
	mustRunAs(t, h.s, acts, f3, "detector_dla0", "dla0")
	h.cancel(f3) // running: counted when it completes
	f4, _ := h.arrive("detector", 0)
	h.acts = h.s.Drain(h.now, h.acts[:0])
	h.check()
	mustAnswer(t, h.acts, f4, Unavailable, Rejected)
	h.set(at(17))
	acts = h.complete(f3, true)
	mustNothing(t, acts, f3)
	st := h.stats("detector")
	if st.Received != 4 || st.Cancelled != 2 || st.Rejected != 2 || st.InFlight() != 0 {
		t.Fatalf("detector counters %+v", st.Counters)
	}
}

// A variant is a model of its own: a request naming it without a stream goes
// to its own stream (never to a logical stream's copy), and a request naming
// the logical model without one to the logical model's only stream.
func TestVariantRouting(t *testing.T) {
	cfg := variantConfig()
	cfg.Streams = append(cfg.Streams, StreamSpec{Name: "cam", Model: "detector_dla1", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest})
	h := newHarness(t, cfg)
	tok, acts := h.arriveReq(Request{Model: "detector_dla1"})
	a := mustDispatch(t, acts, tok)
	if h.s.StreamName(a.Stream) != "cam" || a.Model != "" || a.Slot != slotOf(t, h.s, "dla1") {
		t.Fatalf("direct request: %s", fmtActs(acts))
	}
	tok, acts = h.arriveReq(Request{Model: "detector_dla0"})
	mustAnswer(t, acts, tok, NotFound, Rejected)
	tok, acts = h.arriveReq(Request{Model: "detector"})
	mustRunAs(t, h.s, acts, tok, "detector_dla0", "dla0")
	tok, acts = h.arriveReq(Request{Stream: "detector", Model: "detector_gpu"})
	mustAnswer(t, acts, tok, InvalidArgument, Rejected)
	tok, acts = h.arriveReq(Request{Stream: "nope", Model: "detector"})
	mustAnswer(t, acts, tok, NotFound, Rejected)

	// Under the default contract a request of the logical model on a stream
	// not configured joins the default stream of the variant where it lands
	// first.
	cfg.UnknownStreams = DefaultContract
	h = newHarness(t, cfg)
	tok, acts = h.arriveReq(Request{Stream: "cam9", Model: "detector"})
	a = mustDispatch(t, acts, tok)
	if a.Model != "detector_dla0" || h.s.StreamName(a.Stream) != "default/detector_dla0" {
		t.Fatalf("default contract: %s", fmtActs(acts))
	}
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	found := false
	for _, v := range snap.Variants {
		if v.Stream == "default/detector" && v.Variant == "detector_dla0" {
			found = v.Dispatched == 1
		}
	}
	if !found {
		t.Fatalf("variant counts %+v", snap.Variants)
	}
}

// Without variants, nothing changes: stream numbering and Action.Model.
func TestVariantNumberingUnchanged(t *testing.T) {
	cfg := variantConfig()
	cfg.UnknownStreams = DefaultContract
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range s.NumStreams() {
		names = append(names, s.StreamName(i))
	}
	want := "detector lane segment vlm default/detector_gpu default/detector_dla0 default/detector_dla1 default/lane default/segment default/vlm"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("streams %s\nwant    %s", got, want)
	}
}

func TestVariantConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		edit func(c *Config)
		want string
	}{
		{func(c *Config) { c.Models[0].Exec = ms }, "no exec_ms of its own"},
		{func(c *Config) { c.Models[0].Accelerator = "gpu" }, "remove on:"},
		{func(c *Config) { c.Models[0].MaxBatch = 4 }, "set max_batch on its variants"},
		{func(c *Config) { c.Models[0].Instances = 1 }, "no instances of its own"},
		{func(c *Config) { c.Models[0].Exclusive = true }, "corun: false belongs on the variants"},
		{func(c *Config) { c.Models[0].Variants = []string{"detector_gpu", "detector_npu"} }, `variant "detector_npu" is not configured`},
		{func(c *Config) { c.Models[0].Variants = []string{"detector"} }, "its own variant"},
		{func(c *Config) { c.Models[0].Variants = []string{"detector_gpu", "detector_gpu"} }, "already a variant of"},
		{func(c *Config) { c.Models[1].Variants = []string{"detector_dla0"} }, "is itself a logical model"},
		{func(c *Config) { c.Models[0].Variants = []string{"detector_dla0", "lane"} }, `both run on accelerator "dla0"`},
		{func(c *Config) {
			c.Accelerators = nil
			c.Slots = 1
			for i := range c.Models {
				c.Models[i].Accelerator = ""
			}
		}, "declare accelerators"},
		{func(c *Config) {
			c.UnknownStreams = DefaultContract
			c.Streams[1].Name = "default/detector"
		}, "default contract of logical model"},
	} {
		cfg := variantConfig()
		tc.edit(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
	}
	// One accelerator: a logical model of one variant is an alias.
	cfg := Config{Accelerators: []AcceleratorSpec{{Name: "gpu", Slots: 1}}, SafetyMargin: 100,
		Models:  []ModelSpec{{Name: "det", Variants: []string{"det_fp16"}}, {Name: "det_fp16", Exec: 8 * ms}},
		Streams: []StreamSpec{{Name: "cam", Model: "det", Class: High, Period: 33 * ms, MaxAge: 66 * ms}}}
	h := newHarness(t, cfg)
	tok, acts := h.arriveReq(Request{Model: "det"})
	if a := mustDispatch(t, acts, tok); a.Model != "det_fp16" {
		t.Fatalf("alias: %s", fmtActs(acts))
	}
}

// fuzzVariantConfig is fuzzConfig on a GPU and two DLA cores with the
// detector built for each: copies, cross-variant superseding, shared
// deliveries and guards under every event.
func fuzzVariantConfig(gpu int) Config {
	cfg := fuzzConfig(0)
	cfg.Accelerators = []AcceleratorSpec{{Name: "gpu", Slots: gpu}, {Name: "dla0", Slots: 1}, {Name: "dla1", Slots: 1}}
	on := map[string]string{"scan": "dla0", "ocr": "dla1", "pose": "gpu", "depth": "gpu", "vlm": "gpu"}
	for i := range cfg.Models {
		cfg.Models[i].Accelerator = on[cfg.Models[i].Name]
		if cfg.Models[i].Name == "det" {
			cfg.Models[i] = ModelSpec{Name: "det", Variants: []string{"det_gpu", "det_dla0", "det_dla1"}}
		}
	}
	cfg.Models = append(cfg.Models,
		ModelSpec{Name: "det_gpu", Exec: 6 * ms, Accelerator: "gpu"},
		ModelSpec{Name: "det_dla0", Exec: 12 * ms, Accelerator: "dla0"},
		ModelSpec{Name: "det_dla1", Exec: 12 * ms, Accelerator: "dla1"})
	cfg.Streams = append(cfg.Streams, StreamSpec{Name: "rear", Model: "det", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: FIFO, Capacity: 2})
	return cfg
}

var fuzzVariantStreams = []Request{
	{Stream: "detector", Model: "det"},
	{Stream: "rear", Model: "det"},
	{Stream: "lidar", Model: "scan"},
	{Stream: "pose", Model: "pose"},
	{Stream: "vlm", Model: "vlm"},
	{Model: "det"},                     // the logical model under the default contract
	{Model: "det_dla1"},                // a variant by name: its default contract
	{Stream: "detector", Model: "ocr"}, // model mismatch
	{Stream: "detector", Model: "det_gpu"},
	{Model: "nope"},
}

// wireScenarioD2 is SCENARIOS.md's scenario D2 without interference: a GPU
// (accelerator 0) and DLA cores 0 and 1 (accelerators 1 and 2), one job at
// a time each; the detector built for all three (its own accel and exec:
// detector_dla0, an operator's static choice).
func wireScenarioD2() wireScenario {
	return wireScenario{name: "D2", slots: 3, accels: []int{1, 1, 1},
		streams: []wireStream{
			{"detector", Protected, 33 * ms, 33 * ms, 50 * ms, 14 * ms, 1, false, 0},
			{"lane", High, 33 * ms, 33 * ms, 66 * ms, 14 * ms, 1, false, 0},
			{"segment", High, 33 * ms, 33 * ms, 66 * ms, 14 * ms, 2, false, 0},
			{"pose", High, 33 * ms, 33 * ms, 66 * ms, 5 * ms, 0, false, 0},
			{"depth", High, 33 * ms, 33 * ms, 100 * ms, 10 * ms, 0, false, 0},
			{"vlm", BestEffort, 1000 * ms, 1000 * ms, 2000 * ms, 200 * ms, 0, false, 0.2},
		},
		phases: []time.Duration{0, 9 * ms, 5 * ms, 7 * ms, 13 * ms, 3 * ms},
		variants: map[int][]wireVariant{0: {
			{"detector_gpu", 0, 8 * ms}, {"detector_dla0", 1, 14 * ms}, {"detector_dla1", 2, 14 * ms},
		}},
	}
}

// TestWireSimulationScenarioD2 is scenario D2 (no interference) on the fake
// clock with the bench's hops: with the detector's variants vig covers the
// detector ≥ 99 %, lane far better than direct clients, pose and depth as
// with the detector fixed on detector_dla0, and every stream within the
// issue's targets. Segment, alone
// on DLA1 with the detector fixed on DLA0, loses a few windows: while the
// VLM's budget run holds the GPU (200 ms every 5 s) the detector's frames go
// to a DLA core, where two 14 ms jobs (up to 1.3× each) in one 33 ms window
// do not always fit — the cost is spread over lane and segment rather than
// all on lane.
func TestWireSimulationScenarioD2(t *testing.T) {
	dur := 20 * time.Second
	if testing.Short() {
		dur = 10 * time.Second
	}
	sc := wireScenarioD2()
	fixed := wirePolicy{name: "vig per core, detector_dla0", order: OrderLaxity, noVariants: true}
	vars := wirePolicy{name: "vig per core, variants", order: OrderLaxity}
	res := map[string]wireSummary{}
	for _, p := range []wirePolicy{polDirect, fixed, vars} {
		res[p.name] = simulateBest(t, sc, p, dur, benchHops)
		t.Log(formatSummary(sc, p, res[p.name]))
	}
	v, f := res[vars.name], res[fixed.name]
	for i, floor := range []float64{0.99, 0.99, 0.99, 0.93, 0.93, 0.19} {
		if got := v.best[i].cov.Ratio(); got < floor {
			t.Errorf("%s %.1f%% with variants, want ≥ %.0f%%", sc.streams[i].name, 100*got, 100*floor)
		}
	}
	if got, was := v.best[1].cov.Ratio(), res[polDirect.name].best[1].cov.Ratio(); got < was+0.1 {
		t.Errorf("lane %.1f%% with variants, %.1f%% direct", 100*got, 100*was)
	}
	for i := 3; i <= 4; i++ { // pose, depth: the GPU variant must not cost them
		if got, was := v.best[i].cov.Ratio(), f.best[i].cov.Ratio(); got < was-0.005 {
			t.Errorf("%s %.1f%% with variants, %.1f%% with the detector fixed on DLA0", sc.streams[i].name, 100*got, 100*was)
		}
	}
	r := simulateWire(t, sc, vars, 4, dur, benchHops)
	var total uint64
	for _, x := range r.variants {
		t.Logf("depth 4: %s ran as %s %d times", x.Stream, x.Variant, x.Dispatched)
		total += x.Dispatched
	}
	if total == 0 {
		t.Error("no job of the detector named a variant")
	}
}

// TestWireSimulationScenarioD2Interference is scenario D2 as SCENARIOS.md
// has it: with interference (a job that starts while another accelerator
// runs one takes ×1.3 on the GPU, ×1.15 on a DLA core, as the mock backend
// slows it), vig configured as `vig bench wire` runs it: per core without
// the factors (d2.yaml), with variants told them (d2.server.yaml). With
// variants vig covers the detector ≥ 99 %, lane and segment ≥ 95 %, pose and
// depth ≥ 93 %, the VLM its budget, lane far above the detector fixed on
// DLA0, and pose and depth above direct clients.
//
// Sending every frame where it lands first would put nearly all of them on
// the GPU (8 ms, the fastest), where detector, pose and depth — 11.4 + 7.2 +
// 14.3 ms at the mean with interference — fill its 33 ms windows: depth's
// results end around its windows' ends, doubling one and leaving the next
// empty (depth 87 %). A frame goes where it costs no other stream a window
// (and the accelerator is not above busyHigh); TestWireSimulationScenarioD2Seeds
// compares the policies over six seeds.
func TestWireSimulationScenarioD2Interference(t *testing.T) {
	dur := 20 * time.Second
	if testing.Short() {
		dur = 10 * time.Second
	}
	sc := wireScenarioD2()
	sc.name, sc.interference = "D2+interference", []float64{1.3, 1.15, 1.15}
	fixed := wirePolicy{name: "vig per core, detector_dla0", order: OrderLaxity, noVariants: true}
	vars := wirePolicy{name: "vig per core, variants", order: OrderLaxity, interference: true}
	res := map[string]wireSummary{}
	for _, p := range []wirePolicy{polDirect, fixed, vars} {
		res[p.name] = simulateBest(t, sc, p, dur, benchHops)
		t.Log(formatSummary(sc, p, res[p.name]))
	}
	v, f, d := res[vars.name], res[fixed.name], res[polDirect.name]
	for i, floor := range []float64{0.99, 0.95, 0.95, 0.93, 0.93, 0.19} {
		if got := v.best[i].cov.Ratio(); got < floor {
			t.Errorf("%s %.1f%% with variants, want ≥ %.0f%%", sc.streams[i].name, 100*got, 100*floor)
		}
	}
	for i := 3; i <= 4; i++ {
		if got, was := v.best[i].cov.Ratio(), d.best[i].cov.Ratio(); got < was {
			t.Errorf("%s %.1f%% with variants, direct %.1f%%", sc.streams[i].name, 100*got, 100*was)
		}
	}
	if got, was := v.best[1].cov.Ratio(), f.best[1].cov.Ratio(); got < was+0.1 {
		t.Errorf("lane %.1f%% with variants, %.1f%% with the detector fixed on DLA0", 100*got, 100*was)
	}
	var ran [3]uint64
	for _, x := range simulateWire(t, sc, vars, 4, dur, benchHops).variants {
		for k, name := range []string{"detector_gpu", "detector_dla0", "detector_dla1"} {
			if x.Variant == name {
				ran[k] += x.Dispatched
			}
		}
	}
	t.Logf("depth 4: the detector ran on the GPU %d times, DLA0 %d, DLA1 %d", ran[0], ran[1], ran[2])
	if ran[0] == 0 || ran[1]+ran[2] == 0 {
		t.Errorf("the detector ran on the GPU %d times, the DLA cores %d and %d: the load is not spread", ran[0], ran[1], ran[2])
	}
}

// TestWireSimulationScenarioD2Seeds runs scenario D2 with interference for
// six seeds of the execution times (one is the bench's): on the mean, vig
// with the variants covers every stream but the VLM within a point (the
// bench's noise rule, as for scenario E-linear) of the better of direct
// clients and vig with the detector fixed on DLA0 (segment alone on DLA1
// either way: 100 %), and lane 15 points better than both (~77 % and ~82 %).
// Measured: detector 100, segment 99.9, pose 94.3, depth 94.0 against 100,
// 100, 94.5, 94.3 — what a frame on a DLA core or the GPU still costs another
// stream now and then: the prices are p90s, and a result predicted just
// inside a window lands past it one time in a few (see Variants in doc.go).
func TestWireSimulationScenarioD2Seeds(t *testing.T) {
	if testing.Short() {
		t.Skip("six seeds of 20 s simulated, three policies: the full run checks them")
	}
	defer func(s uint64) { simSeed = s }(simSeed)
	sc := wireScenarioD2()
	sc.name, sc.interference = "D2+interference", []float64{1.3, 1.15, 1.15}
	fixed := wirePolicy{name: "vig per core, detector_dla0", order: OrderLaxity, noVariants: true}
	vars := wirePolicy{name: "vig per core, variants", order: OrderLaxity, interference: true}
	const seeds = 6
	mean := map[string][]float64{}
	for seed := uint64(1); seed <= seeds; seed++ {
		simSeed = seed
		for _, p := range []wirePolicy{polDirect, fixed, vars} {
			r := simulateBest(t, sc, p, 20*time.Second, benchHops)
			if mean[p.name] == nil {
				mean[p.name] = make([]float64, len(sc.streams))
			}
			for i := range sc.streams {
				mean[p.name][i] += 100 * r.best[i].cov.Ratio() / seeds
			}
		}
	}
	v, f, d := mean[vars.name], mean[fixed.name], mean[polDirect.name]
	for i, st := range sc.streams[:5] {
		t.Logf("%-8s variants %6.2f %%  per core %6.2f %%  direct %6.2f %%", st.name, v[i], f[i], d[i])
		if v[i] < max(d[i], f[i])-1 {
			t.Errorf("%s: %.1f %% with variants, per core %.1f %%, direct %.1f %%", st.name, v[i], f[i], d[i])
		}
	}
	if v[1] < max(d[1], f[1])+15 {
		t.Errorf("lane %.1f %% with variants, %.1f %% per core, %.1f %% direct", v[1], f[1], d[1])
	}
}

// Only the engine the front expects the next frame at guards it: a long lane
// job on DLA0 starts while the detector's next frame is expected at the idle
// GPU, and is deferred when that frame is expected at DLA0.
func TestVariantGuardsOnlyWhereExpected(t *testing.T) {
	cfg := variantConfig()
	cfg.Models[1].Exec = 8 * ms  // detector_gpu
	cfg.Models[4].Exec = 40 * ms // lane
	cfg.Streams[1].MaxAge = 100 * ms

	h := newHarness(t, cfg)
	f1, acts := h.arrive("detector", 0)
	mustRunAs(t, h.s, acts, f1, "detector_gpu", "gpu")
	h.set(at(8))
	h.complete(f1, true)
	h.set(at(25))
	lane, acts := h.arrive("lane", 0) // 25–65 ms: the detector's frame at 33 goes to the GPU
	mustDispatch(t, acts, lane)

	h = newHarness(t, cfg)
	h.arrive("vlm", 0) // the GPU until 200 ms
	f1, acts = h.arrive("detector", 0)
	mustRunAs(t, h.s, acts, f1, "detector_dla0", "dla0")
	h.set(at(14))
	h.complete(f1, true)
	h.set(at(25))
	lane, acts = h.arrive("lane", 0) // would push the frame at 33, expected at DLA0, past its window
	mustNothing(t, acts, lane)
	if st := h.stats("lane"); st.Deferred != 1 {
		t.Fatalf("lane %+v", st.Counters)
	}
}

// eightStreamsVariants is eightStreams3Accel with the detector built for the
// GPU and the DLA: a logical model with two variants.
func eightStreamsVariants() Config {
	cfg := eightStreams3Accel()
	for i := range cfg.Models {
		if cfg.Models[i].Name == "det" {
			cfg.Models[i] = ModelSpec{Name: "det", Variants: []string{"det_gpu", "det_dla"}}
		}
	}
	cfg.Models = append(cfg.Models, ModelSpec{Name: "det_gpu", Exec: 6 * ms, Accelerator: "gpu"},
		ModelSpec{Name: "det_dla", Exec: 8 * ms, Accelerator: "dla"})
	return cfg
}

// TestDecisionAllocsVariants: a logical model's frames are routed without
// allocating.
func TestDecisionAllocsVariants(t *testing.T) {
	s, err := New(eightStreamsVariants())
	if err != nil {
		t.Fatal(err)
	}
	acts := make([]Action, 0, 16)
	var now Time
	var tok uint64
	acts = decisionLoop(s, &now, &tok, acts, 1000)
	if n := testing.AllocsPerRun(2000, func() { acts = decisionLoop(s, &now, &tok, acts, 1) }); n != 0 {
		t.Errorf("%v allocations per decision", n)
	}
	var snap Snapshot
	s.Snapshot(now, &snap)
	if n := testing.AllocsPerRun(100, func() { s.Snapshot(now, &snap) }); n != 0 {
		t.Errorf("Snapshot into a reused value: %v allocations", n)
	}
	l := &loadedLoop{s: s, acts: make([]Action, 0, 16)}
	for range 1000 {
		l.round()
	}
	if n := testing.AllocsPerRun(2000, l.round); n != 0 {
		t.Errorf("loaded: %v allocations per decision", n)
	}
	s.Snapshot(l.now, &snap)
	ran := map[string]uint64{}
	for _, v := range snap.Variants {
		ran[v.Variant] += v.Dispatched
	}
	if ran["det_gpu"] == 0 || ran["det_dla"] == 0 {
		t.Errorf("variants %+v: not exercising both", snap.Variants)
	}
}

// BenchmarkDecisionVariants is BenchmarkDecision8Streams3Accel with the
// detector a logical model of two variants.
func BenchmarkDecisionVariants(b *testing.B) {
	for _, loaded := range []bool{false, true} {
		name := "idle"
		if loaded {
			name = "loaded"
		}
		b.Run(name, func(b *testing.B) {
			s, err := New(eightStreamsVariants())
			if err != nil {
				b.Fatal(err)
			}
			if !loaded {
				acts := make([]Action, 0, 16)
				var now Time
				var tok uint64
				b.ReportAllocs()
				b.ResetTimer()
				acts = decisionLoop(s, &now, &tok, acts, b.N)
				_ = acts
				return
			}
			l := &loadedLoop{s: s, acts: make([]Action, 0, 16)}
			for range 1000 {
				l.round()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				l.round()
			}
		})
	}
}

// A logical stream's min_rate_hz budget is one budget, not one per variant:
// after a budget run at the GPU, a frame in time only at the DLA is deferred
// there like any blocked frame, not owed a first run of its own.
func TestVariantOneBudget(t *testing.T) {
	cfg := Config{
		Accelerators: []AcceleratorSpec{{Name: "gpu", Slots: 1}, {Name: "dla0", Slots: 1}},
		SafetyMargin: 100,
		Models: []ModelSpec{
			{Name: "vlm", Variants: []string{"vlm_gpu", "vlm_dla"}},
			{Name: "vlm_gpu", Exec: 200 * ms, Accelerator: "gpu"},
			{Name: "vlm_dla", Exec: 200 * ms, Accelerator: "dla0"},
			{Name: "det_g", Exec: 10 * ms, Accelerator: "gpu"},
			{Name: "det_d", Exec: 10 * ms, Accelerator: "dla0"},
		},
		Streams: []StreamSpec{
			{Name: "pg", Model: "det_g", Class: Protected, Period: 50 * ms, MaxAge: 50 * ms},
			{Name: "pd", Model: "det_d", Class: Protected, Period: 50 * ms, MaxAge: 50 * ms},
			// max_age 300 ms: behind the first run (GPU until 220 ms) a
			// second frame is in time only at the DLA.
			{Name: "vlm", Model: "vlm", Class: BestEffort, Period: time.Second, MaxAge: 300 * ms, MinRateHz: 1},
		},
	}
	h := newHarness(t, cfg)
	pg, _ := h.arrive("pg", 0)
	pd, _ := h.arrive("pd", 0)
	h.set(at(10))
	h.complete(pg, true)
	h.complete(pd, true)
	h.set(at(20))
	v1, acts := h.arrive("vlm", 0)
	if a := mustDispatch(t, acts, v1); !a.Budget || a.Model != "vlm_gpu" {
		t.Fatalf("first VLM frame: %s", fmtActs(acts))
	}
	h.set(at(30))
	v2, acts := h.arrive("vlm", 0)
	mustNothing(t, acts, v2)
	if st := h.stats("vlm"); st.BudgetRuns != 1 || st.Deferred != 1 {
		t.Fatalf("vlm %+v budget runs %d", st.Counters, st.BudgetRuns)
	}
}
