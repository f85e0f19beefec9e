package sched

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// detVLM is scenario B's core: a protected 50 ms detector and a 200 ms VLM.
func detVLM(slots int, vlmExclusive bool, detInterval time.Duration) Config {
	return Config{
		Slots:        slots,
		SafetyMargin: 110,
		Models: []ModelSpec{
			{Name: "det", Exec: 8 * ms},
			{Name: "vlm", Exec: 200 * ms, Exclusive: vlmExclusive},
		},
		Streams: []StreamSpec{
			{Name: "detector", Model: "det", Class: Protected, Period: detInterval, MaxAge: 50 * ms, Queue: Latest},
			{Name: "vlm", Model: "vlm", Class: BestEffort, Period: 1000 * ms, MaxAge: 2000 * ms, Queue: Latest},
		},
	}
}

func TestLatestBurstSupersedes(t *testing.T) {
	h := newHarness(t, Config{
		Slots:        1,
		SafetyMargin: 110,
		Models:       []ModelSpec{{Name: "det", Exec: 8 * ms}, {Name: "slow", Exec: 15 * ms}},
		Streams: []StreamSpec{
			{Name: "cam", Model: "det", Class: High, Period: 50 * ms, MaxAge: time.Second, Queue: Latest},
			{Name: "other", Model: "slow", Class: High, Period: 50 * ms, MaxAge: time.Second, Queue: Latest},
		},
	})
	busy, acts := h.arrive("other", 0)
	mustDispatch(t, acts, busy)
	var toks []uint64
	for i := 1; i <= 10; i++ {
		h.set(at(float64(i)))
		tok, acts := h.arrive("cam", 0)
		if len(toks) > 0 {
			prev := toks[len(toks)-1]
			a := mustAnswer(t, acts, prev, Aborted, Superseded)
			if a.Reason != ReasonSuperseded {
				t.Fatalf("reason %v", a.Reason)
			}
		}
		mustNothing(t, acts, tok)
		toks = append(toks, tok)
	}
	if st := h.stats("cam"); st.Superseded != 9 || st.Waiting != 1 {
		t.Fatalf("after burst: %+v", st.Counters)
	}
	h.set(at(15))
	acts = h.complete(busy, true)
	newest := toks[len(toks)-1]
	if len(acts) != 1 {
		t.Fatalf("want only the newest frame dispatched, got %s", fmtActs(acts))
	}
	if a := mustDispatch(t, acts, newest); a.Waited != 5*ms || a.Capture != at(10) {
		t.Fatalf("newest frame: waited %v, capture %v", a.Waited, a.Capture)
	}
	h.set(at(23))
	h.complete(newest, true)
	if st := h.stats("cam"); st.Received != 10 || st.Forwarded != 1 || st.Superseded != 9 {
		t.Fatalf("final: %+v", st.Counters)
	}
}

func TestLatestOlderArrivalIsSuperseded(t *testing.T) {
	h := newHarness(t, detVLM(1, false, 50*ms))
	h.set(at(100))
	busy, _ := h.arrive("vlm", 0)
	newer, _ := h.arrive("detector", at(99))
	older, acts := h.arrive("detector", at(95)) // reordered in transport
	mustAnswer(t, acts, older, Aborted, Superseded)
	mustNothing(t, acts, newer)
	_ = busy
}

func TestStaleFrameNeverDispatched(t *testing.T) {
	h := newHarness(t, detVLM(1, false, 50*ms))
	h.set(at(1000))
	// Cost is 8 ms × 110 % = 8.8 ms; max_age 50 ms.
	cases := []struct {
		capture float64
		late    bool
	}{
		{capture: 900, late: true},  // already past its deadline
		{capture: 950, late: true},  // deadline now
		{capture: 945, late: true},  // 1000+8.8 > 995
		{capture: 958, late: true},  // 1008.8 > 1008
		{capture: 959, late: false}, // 1008.8 ≤ 1009
	}
	for _, c := range cases {
		tok, acts := h.arrive("detector", at(c.capture))
		if c.late {
			a := mustAnswer(t, acts, tok, DeadlineExceeded, LateDropped)
			if a.Reason != ReasonLate {
				t.Fatalf("reason %v", a.Reason)
			}
			continue
		}
		mustDispatch(t, acts, tok)
		h.complete(tok, true)
	}

	// A frame waiting behind a long job is dropped as soon as it can no
	// longer make it, at the time NextWake announced, not when the slot
	// frees.
	h.set(at(2000))
	long, acts := h.arrive("vlm", 0)
	mustDispatch(t, acts, long)
	frame, acts := h.arrive("detector", 0)
	mustNothing(t, acts, frame)
	w, ok := h.s.NextWake()
	want := at(2050) - Time(8800*time.Microsecond) + 1
	if !ok || w != want {
		t.Fatalf("NextWake = %v, %v; want %v", time.Duration(w), ok, time.Duration(want))
	}
	h.set(w - 1)
	mustNothing(t, h.tick(), frame)
	h.set(w)
	mustAnswer(t, h.tick(), frame, DeadlineExceeded, LateDropped)
	if _, ok := h.s.NextWake(); ok {
		t.Fatal("NextWake armed with nothing waiting on time")
	}
	h.set(at(2220))
	if acts := h.complete(long, true); len(acts) != 0 {
		t.Fatalf("stale frame dispatched: %s", fmtActs(acts))
	}
}

func TestProbeBreaksEstimateStarvation(t *testing.T) {
	cfg := detVLM(1, false, 50*ms)
	cfg.Models[0].Exec = 60 * ms // prior above max_age: every frame predicted late
	cfg.ProbeAfter = 3
	h := newHarness(t, cfg)
	var probes int
	for i := 0; i < 8; i++ {
		h.set(at(float64(100 * (i + 1))))
		// A frame already past its deadline is never probed.
		stale, acts := h.arrive("detector", h.now-Time(50*ms))
		mustAnswer(t, acts, stale, DeadlineExceeded, LateDropped)
		tok, acts := h.arrive("detector", 0)
		if a, ok := find(acts, tok); ok && a.Kind == Dispatch {
			if !a.Probe {
				t.Fatal("dispatch despite a predicted miss without Probe flag")
			}
			probes++
			if i != 3 && i != 7 {
				t.Fatalf("probe at frame %d; want after 3 late drops", i)
			}
			h.set(h.now.Add(5 * ms))
			h.complete(tok, true)
			continue
		}
		mustAnswer(t, acts, tok, DeadlineExceeded, LateDropped)
	}
	if st := h.stats("detector"); probes != 2 || st.Probes != 2 {
		t.Fatalf("probes %d, stats %d", probes, st.Probes)
	}
	if e, _ := h.s.Estimate("det", 0); e != 60*ms {
		t.Fatalf("two fast samples among 32 seeds moved the p90 to %v", e)
	}
	// Under load the starved frames are dropped while the slot is busy;
	// they count too, and the first frame finding the slot free probes.
	cfg.ProbeAfter = 2
	h = newHarness(t, cfg)
	long, acts := h.arrive("vlm", 0)
	mustDispatch(t, acts, long)
	for _, at_ := range []float64{0, 10, 20} {
		h.set(at(at_))
		tok, acts := h.arrive("detector", 0)
		mustAnswer(t, acts, tok, DeadlineExceeded, LateDropped)
	}
	h.set(at(25))
	h.complete(long, true)
	h.set(at(30))
	tok, acts := h.arrive("detector", at(29))
	if a := mustDispatch(t, acts, tok); !a.Probe || a.Capture != at(29) || a.Waited != 0 {
		t.Fatalf("probe %+v", a)
	}
	// Probing can be disabled.
	cfg.ProbeAfter = -1
	h = newHarness(t, cfg)
	for i := 0; i < 50; i++ {
		h.set(at(float64(100 * (i + 1))))
		tok, acts := h.arrive("detector", 0)
		mustAnswer(t, acts, tok, DeadlineExceeded, LateDropped)
	}
}

func TestVLMDeferredBeforeProtectedFrame(t *testing.T) {
	h := newHarness(t, detVLM(1, false, 50*ms))
	det0, acts := h.arrive("detector", 0)
	mustDispatch(t, acts, det0)
	h.set(at(8))
	h.complete(det0, true)

	// 5 ms before the next detector frame is due: starting the 220 ms
	// (with margin) VLM would leave that frame no slot until 265 ms.
	h.set(at(45))
	vlm, acts := h.arrive("vlm", 0)
	mustNothing(t, acts, vlm)
	if st := h.stats("vlm"); st.Deferred != 1 || st.Waiting != 1 {
		t.Fatalf("vlm: %+v", st.Counters)
	}
	// Re-evaluation is due when frame 50 could no longer make it anyway.
	if w, ok := h.s.NextWake(); !ok || w != at(100)-Time(8800*time.Microsecond)+1 {
		t.Fatalf("NextWake %v %v", time.Duration(w), ok)
	}
	h.set(at(50))
	det1, acts := h.arrive("detector", 0)
	mustDispatch(t, acts, det1)
	mustNothing(t, acts, vlm)
	h.set(at(58))
	acts = h.complete(det1, true)
	mustNothing(t, acts, vlm) // frame 100 would be blocked just the same
	if st := h.stats("vlm"); st.Deferred != 1 {
		t.Fatalf("deferred counted per attempt: %d", st.Deferred)
	}
	// A protected stream that stopped sending is not guarded forever.
	h.set(at(58 + 150))
	mustDispatch(t, h.tick(), vlm)
}

func TestVLMStartsRightAfterProtectedFrameWhenItFits(t *testing.T) {
	// The detector sends every 250 ms: the VLM cannot start 5 ms before a
	// frame, but fits between two.
	h := newHarness(t, detVLM(1, false, 250*ms))
	det0, _ := h.arrive("detector", 0)
	h.set(at(8))
	h.complete(det0, true)
	h.set(at(245))
	vlm, acts := h.arrive("vlm", 0)
	mustNothing(t, acts, vlm)
	h.set(at(250))
	det1, acts := h.arrive("detector", 0)
	mustDispatch(t, acts, det1)
	h.set(at(258))
	acts = h.complete(det1, true)
	a := mustDispatch(t, acts, vlm) // ends by 478 < next frame at 500
	if a.Busy != 0 || a.Budget {
		t.Fatalf("vlm dispatch %+v", a)
	}
	if st := h.stats("vlm"); st.Deferred != 1 {
		t.Fatalf("deferred %d", st.Deferred)
	}
}

func TestAdmissionWithTwoSlots(t *testing.T) {
	// Two slots, VLM may co-run: the detector keeps a free slot, so the VLM
	// starts at once.
	h := newHarness(t, detVLM(2, false, 50*ms))
	det0, _ := h.arrive("detector", 0)
	h.set(at(8))
	h.complete(det0, true)
	h.set(at(45))
	vlm, acts := h.arrive("vlm", 0)
	mustDispatch(t, acts, vlm)
	h.set(at(50))
	det1, acts := h.arrive("detector", 0)
	if a := mustDispatch(t, acts, det1); a.Busy != 1 || a.Slot != 1 {
		t.Fatalf("detector beside the VLM: %+v", a)
	}

	// Two slots but the VLM runs alone: it would block the detector.
	h = newHarness(t, detVLM(2, true, 50*ms))
	det0, _ = h.arrive("detector", 0)
	h.set(at(8))
	h.complete(det0, true)
	h.set(at(45))
	vlm, acts = h.arrive("vlm", 0)
	mustNothing(t, acts, vlm)
	if st := h.stats("vlm"); st.Deferred != 1 {
		t.Fatalf("exclusive vlm not deferred: %+v", st.Counters)
	}
}

func TestOccupancyRecordedAtDecision(t *testing.T) {
	h := newHarness(t, Config{
		Slots:           2,
		SafetyMargin:    NoMargin,
		EstimatorWindow: 1, // estimate = last sample
		Models:          []ModelSpec{{Name: "m", Exec: 10 * ms}},
		Streams: []StreamSpec{
			{Name: "a", Model: "m", Class: High, Period: 100 * ms, MaxAge: time.Second, Queue: FIFO, Capacity: 4},
			{Name: "b", Model: "m", Class: High, Period: 100 * ms, MaxAge: time.Second, Queue: FIFO, Capacity: 4},
			{Name: "tight", Model: "m", Class: High, Period: 100 * ms, MaxAge: 35 * ms, Queue: Latest},
		},
	})
	a1, acts := h.arrive("a", 0)
	if a := mustDispatch(t, acts, a1); a.Busy != 0 {
		t.Fatalf("first dispatch busy %d", a.Busy)
	}
	h.set(at(1))
	b1, acts := h.arrive("b", 0)
	if a := mustDispatch(t, acts, b1); a.Busy != 1 {
		t.Fatalf("second dispatch busy %d", a.Busy)
	}
	// a1 finishes while b1 still runs (busy 2 then 1), b1 finishes alone
	// (busy 1 then 0): had the occupancy been read at completion, the
	// samples would land in the wrong windows.
	h.set(at(30))
	h.complete(a1, true)
	h.set(at(41))
	h.complete(b1, true)
	if e, _ := h.s.Estimate("m", 0); e != 30*ms {
		t.Fatalf("estimate at occupancy 0 = %v, want 30ms (a1 dispatched alone)", e)
	}
	if e, _ := h.s.Estimate("m", 1); e != 40*ms {
		t.Fatalf("estimate at occupancy 1 = %v, want 40ms (b1 dispatched beside a1)", e)
	}
	// Decisions use the estimate at the occupancy they are taken under:
	// alone, 30 ms fits a 35 ms max_age; beside another job, 40 ms does not.
	h.set(at(100))
	t1, acts := h.arrive("tight", 0)
	mustDispatch(t, acts, t1)
	t2, acts := h.arrive("tight", 0)
	mustAnswer(t, acts, t2, DeadlineExceeded, LateDropped)
}

func TestMarginInDecisions(t *testing.T) {
	for _, c := range []struct {
		margin Margin
		late   bool
	}{{NoMargin, false}, {104, false}, {106, true}, {110, true}} {
		cfg := detVLM(1, false, 50*ms)
		cfg.SafetyMargin = c.margin
		h := newHarness(t, cfg)
		h.set(at(100))
		// 8 ms job, 8.4 ms left before the deadline.
		tok, acts := h.arrive("detector", at(100-41.6))
		if c.late {
			mustAnswer(t, acts, tok, DeadlineExceeded, LateDropped)
		} else {
			mustDispatch(t, acts, tok)
		}
		if h.s.Margin() != c.margin {
			t.Fatalf("margin %v", h.s.Margin())
		}
	}
}

func TestExclusiveRunsAlone(t *testing.T) {
	h := newHarness(t, Config{
		Slots:        2,
		SafetyMargin: 110,
		Models: []ModelSpec{
			{Name: "det", Exec: 8 * ms},
			{Name: "vlm", Exec: 200 * ms, Exclusive: true},
			{Name: "other", Exec: 10 * ms},
		},
		Streams: []StreamSpec{
			// A slow pose stream: no predicted pose frame falls within the
			// VLM's run, so the VLM does not yield to one (see lookahead).
			{Name: "pose", Model: "det", Class: High, Period: time.Second, MaxAge: time.Second, Queue: Latest},
			{Name: "vlm", Model: "vlm", Class: High, Period: time.Second, MaxAge: 5 * time.Second, Queue: Latest},
			{Name: "log", Model: "other", Class: BestEffort, Period: time.Second, MaxAge: 10 * time.Second, Queue: FIFO, Capacity: 4},
		},
	})
	p1, acts := h.arrive("pose", 0)
	mustDispatch(t, acts, p1)
	h.set(at(1))
	v1, acts := h.arrive("vlm", 0)
	mustNothing(t, acts, v1) // waits for the accelerator to empty
	h.set(at(2))
	l1, acts := h.arrive("log", 0)
	mustNothing(t, acts, l1) // a free slot, but reserved for the VLM
	h.set(at(9))
	acts = h.complete(p1, true)
	if a := mustDispatch(t, acts, v1); a.Busy != 0 {
		t.Fatalf("exclusive dispatch busy %d", a.Busy)
	}
	mustNothing(t, acts, l1)
	h.set(at(10))
	p2, acts := h.arrive("pose", 0)
	mustNothing(t, acts, p2) // nothing beside a corun:false job
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	if !snap.Exclusive || snap.Busy != 1 {
		t.Fatalf("snapshot busy=%d exclusive=%v", snap.Busy, snap.Exclusive)
	}
	h.set(at(209))
	acts = h.complete(v1, true)
	mustDispatch(t, acts, p2)
	mustDispatch(t, acts, l1)
}

func TestMinRateBudget(t *testing.T) {
	run := func(rate float64) (*sim, StreamStats, StreamStats) {
		cfg := detVLM(1, false, 50*ms)
		cfg.Streams[1].MinRateHz = rate
		m := newSim(t, cfg, map[string]time.Duration{"det": 8 * ms, "vlm": 200 * ms})
		m.sensor("detector", 0, 50*ms)
		m.sensor("vlm", 25*ms, time.Second)
		m.run(at(10_000))
		return m, m.h.stats("detector"), m.h.stats("vlm")
	}

	// Without a budget the VLM starves: every one of its frames is
	// deferred, and the detector covers every window.
	m, det, vlm := run(0)
	if m.dispatch["vlm"] != 0 || vlm.Deferred != 10 || vlm.BudgetRuns != 0 {
		t.Fatalf("no budget: vlm dispatched %d, %+v", m.dispatch["vlm"], vlm.Counters)
	}
	if cov := Coverage(0, at(10_000), 50*ms, 50*ms, m.deliv["detector"]); cov.Covered != cov.Windows || cov.Windows != 200 {
		t.Fatalf("no budget: detector coverage %+v", cov)
	}
	if det.Coverage != 1 || det.CoverageWindows < 190 {
		t.Fatalf("no budget: detector coverage gauge %d/%d", det.CoveredWindows, det.CoverageWindows)
	}
	if det.LateDropped != 0 || det.BudgetBlocked != 0 {
		t.Fatalf("no budget: detector %+v", det.Counters)
	}

	// 0.5 Hz: the VLM runs at its first deferral (25 ms; the budget starts
	// with a run owed), then every 2 s, and the cost shows on both sides.
	m, det, vlm = run(0.5)
	if m.dispatch["vlm"] != 5 || vlm.BudgetRuns != 5 {
		t.Fatalf("budget: vlm dispatched %d, budget runs %d", m.dispatch["vlm"], vlm.BudgetRuns)
	}
	if vlm.BudgetCost == 0 {
		t.Fatal("budget runs cost no predicted protected frame")
	}
	if det.BudgetBlocked == 0 || det.BudgetBlocked != det.LateDropped {
		t.Fatalf("detector late drops %d, attributed to the budget %d", det.LateDropped, det.BudgetBlocked)
	}
	cov := Coverage(0, at(10_000), 50*ms, 50*ms, m.deliv["detector"])
	if cov.Covered == cov.Windows || cov.Covered < cov.Windows*9/10 {
		t.Fatalf("budget: detector coverage %+v", cov)
	}
}

func TestBudgetRunStepByStep(t *testing.T) {
	cfg := detVLM(1, false, 50*ms)
	cfg.NoPipeline = true         // one job at the backend at a time keeps the steps readable
	cfg.Streams[1].MinRateHz = 10 // one run per 100 ms, the first owed at once
	h := newHarness(t, cfg)
	det, _ := h.arrive("detector", 0)
	h.set(at(8))
	h.complete(det, true)
	h.set(at(45))
	vlm, acts := h.arrive("vlm", 0)
	if a := mustDispatch(t, acts, vlm); !a.Budget {
		t.Fatal("budget dispatch not flagged")
	}
	st := h.stats("vlm")
	if st.BudgetRuns != 1 || st.BudgetCost != 4 || st.Deferred != 0 {
		t.Fatalf("vlm: runs %d cost %d deferred %d", st.BudgetRuns, st.BudgetCost, st.Deferred)
	}
	// Protected frames lost while it runs are attributed to it.
	h.set(at(50))
	a, _ := h.arrive("detector", 0)
	h.set(at(60))
	b, acts := h.arrive("detector", 0)
	mustAnswer(t, acts, a, Aborted, Superseded)
	h.set(at(101.2) + 1)
	mustAnswer(t, h.tick(), b, DeadlineExceeded, LateDropped)
	if st := h.stats("detector"); st.BudgetBlocked != 2 {
		t.Fatalf("detector budget blocked %d", st.BudgetBlocked)
	}
	h.set(at(266))
	h.complete(vlm, true)
	h.set(at(300))
	c, acts := h.arrive("detector", 0)
	mustDispatch(t, acts, c) // and keeps the slot busy
	h.set(at(320))
	d, acts := h.arrive("detector", 0)
	mustNothing(t, acts, d)
	h.set(at(330))
	e, acts := h.arrive("detector", 0)
	mustAnswer(t, acts, d, Aborted, Superseded)
	mustNothing(t, acts, e)
	if st := h.stats("detector"); st.BudgetBlocked != 2 {
		t.Fatalf("losses without a budget job attributed to it: %d", st.BudgetBlocked)
	}
}

func TestUnknownStreams(t *testing.T) {
	cfg := detVLM(1, false, 50*ms)
	cfg.Models = append(cfg.Models, ModelSpec{Name: "ocr", Exec: 5 * ms})
	h := newHarness(t, cfg)
	tok, acts := h.arriveReq(Request{Stream: "nope", Model: "det"})
	a := mustAnswer(t, acts, tok, NotFound, Rejected)
	if a.Reason != ReasonUnknownStream || a.Stream != -1 {
		t.Fatalf("%+v", a)
	}
	tok, acts = h.arriveReq(Request{Model: "ocr"})
	mustAnswer(t, acts, tok, NotFound, Rejected)
	tok, acts = h.arriveReq(Request{Model: "missing"})
	if a := mustAnswer(t, acts, tok, NotFound, Rejected); a.Reason != ReasonUnknownModel {
		t.Fatalf("reason %v", a.Reason)
	}
	// Model mismatch on a configured stream.
	tok, acts = h.arriveReq(Request{Stream: "detector", Model: "vlm"})
	if a := mustAnswer(t, acts, tok, InvalidArgument, Rejected); a.Stream < 0 || a.Reason != ReasonModelMismatch {
		t.Fatalf("%+v", a)
	}
	// No vig_stream: the only stream of the model is meant.
	tok, acts = h.arriveReq(Request{Model: "det"})
	if a := mustDispatch(t, acts, tok); a.Stream != 0 {
		t.Fatalf("routed to stream %d", a.Stream)
	}
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	if snap.Unrouted.Received != 3 || snap.Unrouted.Rejected != 3 || !snap.Unrouted.Balanced() {
		t.Fatalf("unrouted %+v", snap.Unrouted)
	}

	cfg.UnknownStreams = DefaultContract
	h = newHarness(t, cfg)
	tok, acts = h.arriveReq(Request{Stream: "nope", Model: "ocr"})
	a = mustDispatch(t, acts, tok)
	st := h.stats("default/ocr")
	if !st.Default || st.Class != BestEffort || st.Running != 1 || st.Model != "ocr" {
		t.Fatalf("default stream %+v", st)
	}
	if a.Stream != len(cfg.Streams)+2 || h.s.StreamName(a.Stream) != "default/ocr" {
		t.Fatalf("default stream index %d (%q)", a.Stream, h.s.StreamName(a.Stream))
	}
	if h.s.NumStreams() != len(cfg.Streams)+len(cfg.Models) || h.s.StreamName(-1) != "" || h.s.StreamName(0) != "detector" {
		t.Fatal("stream names")
	}
	tok, acts = h.arriveReq(Request{Model: "missing"})
	mustAnswer(t, acts, tok, NotFound, Rejected)
}

func TestTritonPriorityAndTimeout(t *testing.T) {
	cfg := detVLM(1, false, 50*ms)
	cfg.Models = append(cfg.Models, ModelSpec{Name: "ocr", Exec: 5 * ms})
	cfg.UnknownStreams = DefaultContract
	cfg.DefaultCapacity = 8
	cfg.NoPipeline = true // the order of starts is the point, not their overlap
	h := newHarness(t, cfg)
	busy, acts := h.arriveReq(Request{Model: "ocr"})
	mustDispatch(t, acts, busy)
	plain, _ := h.arriveReq(Request{Model: "ocr"})
	low, _ := h.arriveReq(Request{Model: "ocr", Priority: 2, HasPriority: true})
	high, _ := h.arriveReq(Request{Model: "ocr", Priority: 1, HasPriority: true})
	zero, _ := h.arriveReq(Request{Model: "ocr", Priority: 0, HasPriority: true})
	timed, _ := h.arriveReq(Request{Model: "ocr", Timeout: 3 * ms})
	tok, acts := h.arriveReq(Request{Model: "ocr", Timeout: -1})
	if a := mustAnswer(t, acts, tok, InvalidArgument, Rejected); a.Reason != ReasonBadTimeout {
		t.Fatalf("reason %v", a.Reason)
	}
	if w, ok := h.s.NextWake(); !ok || w != at(3)+1 {
		t.Fatalf("NextWake %v %v, want the queue timeout", time.Duration(w), ok)
	}
	h.set(at(3) + 1)
	acts = h.tick()
	if a := mustAnswer(t, acts, timed, Unavailable, LateDropped); a.Reason != ReasonQueueTimeout {
		t.Fatalf("reason %v", a.Reason)
	}
	// Priority 1 first, then 2, then the default level in arrival order.
	order := []uint64{high, low, plain, zero}
	prev := busy
	for i, want := range order {
		h.set(at(float64(10 * (i + 1))))
		mustDispatch(t, h.complete(prev, true), want)
		prev = want
	}
	// Triton parameters do not override a stream contract.
	h.set(at(100))
	det, acts := h.arriveReq(Request{Stream: "detector", Model: "det", Timeout: time.Nanosecond, Priority: 9, HasPriority: true})
	mustNothing(t, acts, det)
	h.set(at(101))
	mustNothing(t, h.tick(), det)
}

func TestCancel(t *testing.T) {
	h := newHarness(t, detVLM(1, false, 50*ms))
	h.set(at(100))
	vlm, _ := h.arrive("vlm", 0)
	det, acts := h.arrive("detector", 0)
	mustNothing(t, acts, det)
	// Waiting: removed at once, no answer (the client is gone).
	if acts := h.cancel(det); len(acts) != 0 {
		t.Fatalf("cancel answered: %s", fmtActs(acts))
	}
	if st := h.stats("detector"); st.Cancelled != 1 || st.Waiting != 0 {
		t.Fatalf("%+v", st.Counters)
	}
	if _, ok := h.s.NextWake(); ok {
		t.Fatal("timer left armed for a cancelled request")
	}
	// Running: the slot stays busy until Complete, which counts it
	// cancelled rather than forwarded; the next request then starts.
	h.cancel(vlm)
	h.set(at(150))
	det2, acts := h.arrive("detector", 0)
	mustNothing(t, acts, det2)
	h.set(at(180))
	acts = h.complete(vlm, true)
	mustDispatch(t, acts, det2)
	if st := h.stats("vlm"); st.Cancelled != 1 || st.Forwarded != 0 || st.Running != 0 {
		t.Fatalf("%+v", st.Counters)
	}
	// Unknown and repeated tokens are ignored.
	h.cancel(det)
	h.complete(det, true)
	h.cancel(12345)
}

func TestDrain(t *testing.T) {
	h := newHarness(t, detVLM(1, false, 50*ms))
	h.set(at(100))
	vlm, _ := h.arrive("vlm", 0)
	det, _ := h.arrive("detector", 0)
	acts := h.s.Drain(h.now, nil)
	h.check()
	if a := mustAnswer(t, acts, det, Unavailable, Rejected); a.Reason != ReasonDraining {
		t.Fatalf("reason %v", a.Reason)
	}
	if h.s.Drained() {
		t.Fatal("drained with a job running")
	}
	late, acts := h.arrive("detector", 0)
	mustAnswer(t, acts, late, Unavailable, Rejected)
	h.set(at(300))
	if acts := h.complete(vlm, true); len(acts) != 0 {
		t.Fatalf("dispatch while draining: %s", fmtActs(acts))
	}
	if !h.s.Drained() {
		t.Fatal("not drained")
	}
	if st := h.stats("vlm"); st.Forwarded != 1 {
		t.Fatalf("running request not completed normally: %+v", st.Counters)
	}
}

func TestBackendDown(t *testing.T) {
	h := newHarness(t, detVLM(1, false, 50*ms))
	h.set(at(100))
	vlm, _ := h.arrive("vlm", 0)
	det, _ := h.arrive("detector", 0)
	acts := h.s.SetBackendAvailable(h.now, false, nil)
	h.check()
	mustAnswer(t, acts, det, Unavailable, Rejected)
	tok, acts := h.arrive("detector", 0)
	if a := mustAnswer(t, acts, tok, Unavailable, Rejected); a.Reason != ReasonBackendDown {
		t.Fatalf("reason %v", a.Reason)
	}
	h.set(at(110))
	h.complete(vlm, false)
	if st := h.stats("vlm"); st.BackendError != 1 {
		t.Fatalf("%+v", st.Counters)
	}
	if e, _ := h.s.Estimate("vlm", 0); e != 200*ms {
		t.Fatalf("failed job taught the estimator: %v", e)
	}
	h.s.SetBackendAvailable(h.now, true, nil)
	tok, acts = h.arrive("detector", 0)
	mustDispatch(t, acts, tok)
}

func TestArrivalValidation(t *testing.T) {
	cfg := detVLM(1, false, 50*ms)
	cfg.Streams = append(cfg.Streams, StreamSpec{Name: "q", Model: "det", Class: High, Period: 50 * ms, MaxAge: time.Second, Queue: FIFO, Capacity: 2})
	h := newHarness(t, cfg)
	h.set(at(2 * 3600 * 1000))
	tok, acts := h.arrive("detector", h.now.Add(6*ms))
	if a := mustAnswer(t, acts, tok, InvalidArgument, Rejected); a.Reason != ReasonCaptureFuture {
		t.Fatalf("reason %v", a.Reason)
	}
	tok, acts = h.arrive("detector", h.now-Time(time.Hour)-1)
	if a := mustAnswer(t, acts, tok, InvalidArgument, Rejected); a.Reason != ReasonCaptureTooOld {
		t.Fatalf("reason %v", a.Reason)
	}
	// Within the skew: clamped to now and served.
	tok, acts = h.arrive("detector", h.now.Add(4*ms))
	mustDispatch(t, acts, tok)
	// Duplicate live token.
	_, acts = h.arriveReq(Request{Token: tok, Stream: "detector", Model: "det"})
	if a := mustAnswer(t, acts, tok, InvalidArgument, Rejected); a.Reason != ReasonDuplicateToken {
		t.Fatalf("reason %v", a.Reason)
	}
	// FIFO overflow.
	q1, _ := h.arrive("q", 0)
	q2, _ := h.arrive("q", 0)
	q3, acts := h.arrive("q", 0)
	if a := mustAnswer(t, acts, q3, ResourceExhausted, Rejected); a.Reason != ReasonQueueFull {
		t.Fatalf("reason %v", a.Reason)
	}
	h.set(h.now.Add(9 * ms))
	acts = h.complete(tok, true)
	mustDispatch(t, acts, q1)
	mustNothing(t, acts, q2)
}

func TestNoTimerWhenIdle(t *testing.T) {
	h := newHarness(t, detVLM(1, false, 50*ms))
	if _, ok := h.s.NextWake(); ok {
		t.Fatal("timer armed on a fresh scheduler")
	}
	tok, _ := h.arrive("detector", 0)
	if _, ok := h.s.NextWake(); ok {
		t.Fatal("timer armed with only running jobs")
	}
	h.set(at(8))
	h.complete(tok, true)
	if _, ok := h.s.NextWake(); ok {
		t.Fatal("timer armed when idle")
	}
}

func TestConfigErrors(t *testing.T) {
	good := detVLM(1, false, 50*ms)
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no slots", func(c *Config) { c.Slots = 0 }, "slots"},
		{"no margin", func(c *Config) { c.SafetyMargin = 0 }, "≥ 100%"},
		{"small margin", func(c *Config) { c.SafetyMargin = 99 }, "≥ 100%"},
		{"no models", func(c *Config) { c.Models = nil }, "no models"},
		{"dup model", func(c *Config) { c.Models = append(c.Models, c.Models[0]) }, "twice"},
		{"no exec", func(c *Config) { c.Models[0].Exec = 0 }, "exec_ms"},
		{"dup stream", func(c *Config) { c.Streams = append(c.Streams, c.Streams[0]) }, "twice"},
		{"unknown model", func(c *Config) { c.Streams[0].Model = "x" }, `model "x"`},
		{"no period", func(c *Config) { c.Streams[0].Period = 0 }, "period_ms"},
		{"no max age", func(c *Config) { c.Streams[0].MaxAge = 0 }, "max_age_ms"},
		{"latest capacity", func(c *Config) { c.Streams[0].Capacity = 4 }, "queue: fifo"},
		{"fifo capacity", func(c *Config) { c.Streams[0].Queue = FIFO }, "capacity"},
		{"protected min rate", func(c *Config) { c.Streams[0].MinRateHz = 1 }, "min_rate_hz"},
		{"negative min rate", func(c *Config) { c.Streams[1].MinRateHz = -1 }, "min_rate_hz"},
		{"window", func(c *Config) { c.EstimatorWindow = 5000 }, "estimator window"},
		{"class", func(c *Config) { c.Streams[0].Class = 7 }, "class"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			cfg.Models = append([]ModelSpec(nil), good.Models...)
			cfg.Streams = append([]StreamSpec(nil), good.Streams...)
			c.mod(&cfg)
			_, err := New(cfg)
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v; want an ErrConfig mentioning %q", err, c.want)
			}
		})
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
}

func TestParseEnums(t *testing.T) {
	for c := Protected; c < numClasses; c++ {
		if got, err := ParseClass(c.String()); err != nil || got != c {
			t.Fatalf("class %v: %v %v", c, got, err)
		}
	}
	if _, err := ParseClass("urgent"); err == nil {
		t.Fatal("ParseClass accepted urgent")
	}
	for _, q := range []QueueKind{Latest, FIFO} {
		if got, err := ParseQueueKind(q.String()); err != nil || got != q {
			t.Fatalf("queue %v: %v %v", q, got, err)
		}
	}
	for _, p := range []UnknownPolicy{RejectUnknown, DefaultContract} {
		if got, err := ParseUnknownPolicy(p.String()); err != nil || got != p {
			t.Fatalf("policy %v: %v %v", p, got, err)
		}
	}
	for r := Reason(1); r < numReasons; r++ {
		if r.String() == "" {
			t.Fatalf("reason %d has no text", r)
		}
	}
}

// TestBudgetCountsGuardedHigh: a best_effort budget job is admitted against
// high frames too, so BudgetCost counts the high frames it was predicted to
// make miss and BudgetBlocked the high requests lost while it runs.
func TestBudgetCountsGuardedHigh(t *testing.T) {
	cfg := detVLM(1, false, 50*ms)
	cfg.Streams[0].Class = High
	cfg.NoPipeline = true
	cfg.Streams[1].MinRateHz = 10
	h := newHarness(t, cfg)
	det, _ := h.arrive("detector", 0)
	h.set(at(8))
	h.complete(det, true)
	h.set(at(45))
	vlm, acts := h.arrive("vlm", 0)
	if a := mustDispatch(t, acts, vlm); !a.Budget {
		t.Fatal("budget dispatch not flagged")
	}
	if st := h.stats("vlm"); st.BudgetRuns != 1 || st.BudgetCost == 0 {
		t.Fatalf("vlm: runs %d cost %d: the high frames it blocks are its cost", st.BudgetRuns, st.BudgetCost)
	}
	h.set(at(50))
	a, _ := h.arrive("detector", 0)
	h.set(at(60))
	_, acts = h.arrive("detector", 0)
	mustAnswer(t, acts, a, Aborted, Superseded)
	h.set(at(200))
	h.tick()
	det1 := h.stats("detector")
	if lost := det1.Superseded + det1.LateDropped; det1.BudgetBlocked == 0 || det1.BudgetBlocked != lost {
		t.Fatalf("high detector: %d lost while the budget job ran, %d attributed to it", lost, det1.BudgetBlocked)
	}
}
