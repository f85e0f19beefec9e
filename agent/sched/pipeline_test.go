package sched

import (
	"testing"
	"time"
)

// answers counts the terminal decisions per token: an Answer, or a Dispatch
// (which ends with Complete).
type answers map[uint64]int

func (n answers) add(t *testing.T, acts []Action) {
	t.Helper()
	for _, a := range acts {
		n[a.Token]++
		if n[a.Token] > 1 {
			t.Fatalf("token %d decided twice: %v", a.Token, fmtAct(a))
		}
	}
}

func TestPipelinedCommit(t *testing.T) {
	cfg := detVLM(1, false, 50*ms)
	h := newHarness(t, cfg)
	n := answers{}
	f1, acts := h.arrive("detector", 0)
	n.add(t, acts)
	if a := mustDispatch(t, acts, f1); a.Queued || a.Start != 0 {
		t.Fatalf("first frame on the idle slot: %+v", a)
	}
	h.set(at(3))
	f2, acts := h.arrive("detector", 0)
	n.add(t, acts)
	mustNothing(t, acts, f2) // waits in vig: not committed yet
	// Committed at the first job's earliest plausible end (8 ms, the prior)
	// minus the 2 ms lead.
	if w, ok := h.s.NextWake(); !ok || w != at(6) {
		t.Fatalf("NextWake %v %v, want the commit time", time.Duration(w), ok)
	}
	h.set(at(5))
	f3, acts := h.arrive("detector", 0)
	n.add(t, acts)
	mustAnswer(t, acts, f2, Aborted, Superseded) // before commit: superseded
	mustNothing(t, acts, f3)

	h.set(at(6))
	acts = h.tick()
	n.add(t, acts)
	a := mustDispatch(t, acts, f3)
	if !a.Queued || a.Slot != 0 || a.Start != at(8.8) || a.Busy != 0 {
		t.Fatalf("commit: %+v, want queued behind slot 0 at its predicted end 8.8 ms, occupancy 0", a)
	}
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	if snap.Busy != 1 || snap.Committed != 1 {
		t.Fatalf("busy %d committed %d", snap.Busy, snap.Committed)
	}

	h.set(at(7))
	f4, acts := h.arrive("detector", 0)
	n.add(t, acts)
	mustNothing(t, acts, f3) // after commit: not superseded
	mustNothing(t, acts, f4) // and the newer frame waits its turn

	// Frame 1 ends: frame 3 starts at once (it was queued at the backend);
	// nothing needs sending.
	h.set(at(8))
	acts = h.complete(f1, true)
	n.add(t, acts)
	if len(acts) != 0 {
		t.Fatalf("completion of the running job: %s", fmtActs(acts))
	}
	h.s.Snapshot(h.now, &snap)
	if snap.Busy != 1 || snap.Committed != 0 {
		t.Fatalf("after promotion: busy %d committed %d", snap.Busy, snap.Committed)
	}
	if w, _ := h.s.NextWake(); w != at(14) {
		t.Fatalf("NextWake %v, want 8 + 8 − 2 ms", time.Duration(w))
	}
	h.set(at(14))
	acts = h.tick()
	n.add(t, acts)
	if a := mustDispatch(t, acts, f4); !a.Queued {
		t.Fatalf("frame 4 not committed behind frame 3: %+v", a)
	}
	// Frame 3 ran 8 ms from its observed start (frame 1's Complete), not
	// 10 ms from its dispatch: its queueing at the backend is not learnt.
	h.set(at(16))
	n.add(t, h.complete(f3, true))
	w := &h.s.models[0].est[0]
	if got := time.Duration(w.ring[(w.pos+len(w.ring)-1)%len(w.ring)]); got != 8*ms || w.real != 2 {
		t.Fatalf("learnt %v (%d samples), want 8ms", got, w.real)
	}
	h.set(at(24))
	n.add(t, h.complete(f4, true))

	st := h.stats("detector")
	if st.Received != 4 || st.Forwarded != 3 || st.Superseded != 1 || st.InFlight() != 0 {
		t.Fatalf("detector %+v", st.Counters)
	}
	for _, tok := range []uint64{f1, f2, f3, f4} {
		if n[tok] != 1 {
			t.Fatalf("token %d decided %d times", tok, n[tok])
		}
	}
}

func TestCommittedEndsOnItsOwn(t *testing.T) {
	// A committed job that fails or is cancelled before vig saw it start
	// leaves the running job alone and frees the place behind it.
	h := newHarness(t, detVLM(1, false, 50*ms))
	f1, _ := h.arrive("detector", 0)
	h.set(at(6))
	f2, _ := h.arrive("detector", 0)
	h.set(at(6.5))
	acts := h.tick()
	if a, ok := find(acts, f2); ok && a.Kind == Dispatch {
		t.Fatalf("unexpected second dispatch")
	}
	// f2 was committed on arrival (6 ms is frame 1's commit time).
	if st := h.stats("detector"); st.Running != 2 {
		t.Fatalf("running %d, want 1 started + 1 committed", st.Running)
	}
	h.cancel(f2) // the client left: the caller cancels the call at the backend
	h.set(at(7))
	if acts := h.complete(f2, false); len(acts) != 0 {
		t.Fatalf("%s", fmtActs(acts))
	}
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	if snap.Busy != 1 || snap.Committed != 0 {
		t.Fatalf("busy %d committed %d", snap.Busy, snap.Committed)
	}
	f3, acts := h.arrive("detector", 0)
	if a := mustDispatch(t, acts, f3); !a.Queued {
		t.Fatal("the place behind the running job was not freed")
	}
	h.set(at(8))
	h.complete(f1, true)
	h.set(at(16))
	h.complete(f3, true)
	if st := h.stats("detector"); st.Cancelled != 1 || st.Forwarded != 2 || st.InFlight() != 0 {
		t.Fatalf("detector %+v", st.Counters)
	}
}

func TestNoPipeline(t *testing.T) {
	cfg := detVLM(1, false, 50*ms)
	cfg.NoPipeline = true
	h := newHarness(t, cfg)
	f1, _ := h.arrive("detector", 0)
	h.set(at(7))
	f2, acts := h.arrive("detector", 0)
	mustNothing(t, acts, f2)
	if w, _ := h.s.NextWake(); w <= at(8) {
		t.Fatalf("a commit wake-up without pipelining: %v", time.Duration(w))
	}
	h.set(at(8))
	if a := mustDispatch(t, h.complete(f1, true), f2); a.Queued {
		t.Fatal("queued without pipelining")
	}
}

// windowPair is a protected detector (50 ms windows) and a high depth stream
// (33 ms windows) on one slot, both on a told grid, plus a filler job that
// holds the slot until 20 ms.
func windowPair(order Order, detOffset time.Duration) Config {
	return Config{
		Slots: 1, SafetyMargin: 110, Order: order, NoPipeline: true,
		Models: []ModelSpec{{Name: "det", Exec: 8 * ms}, {Name: "depth", Exec: 10 * ms}, {Name: "fill", Exec: 20 * ms}},
		Streams: []StreamSpec{
			{Name: "detector", Model: "det", Class: Protected, Period: 50 * ms, MaxAge: 50 * ms, Queue: Latest,
				WindowAligned: true, WindowOffset: detOffset},
			{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest,
				WindowAligned: true},
			{Name: "fill", Model: "fill", Class: BestEffort, Period: time.Second, MaxAge: time.Second, Queue: Latest},
		},
	}
}

// runWindowPair: the filler runs 0–20 ms; a depth frame arrives at 14 ms
// (its window closes at 33 ms), a detector frame at 15 ms; the backend takes
// exactly the prior. It returns the deliveries.
func runWindowPair(t *testing.T, cfg Config) (det, depth Delivery, first string, h *harness) {
	h = newHarness(t, cfg)
	fill, acts := h.arrive("fill", 0)
	mustDispatch(t, acts, fill)
	h.set(at(14))
	dp, _ := h.arrive("depth", 0)
	h.set(at(15))
	dt, _ := h.arrive("detector", 0)
	h.set(at(20))
	acts = h.complete(fill, true)
	if len(acts) != 1 || acts[0].Kind != Dispatch {
		t.Fatalf("at 20 ms: %s", fmtActs(acts))
	}
	exec := map[uint64]time.Duration{dp: 10 * ms, dt: 8 * ms}
	names := map[uint64]string{dp: "depth", dt: "detector"}
	first = names[acts[0].Token]
	second := dp
	if acts[0].Token == dp {
		second = dt
	}
	h.set(h.now.Add(exec[acts[0].Token]))
	got := map[uint64]Delivery{acts[0].Token: {At: h.now}}
	mustDispatch(t, h.complete(acts[0].Token, true), second)
	h.set(h.now.Add(exec[second]))
	got[second] = Delivery{At: h.now}
	h.complete(second, true)
	det, depth = got[dt], got[dp]
	det.Capture, depth.Capture = at(15), at(14)
	return det, depth, first, h
}

func TestWindowAwareOrderKeepsWindow(t *testing.T) {
	// Class first: the detector (window open until 50 ms) runs 20–28 ms and
	// depth 28–38 ms, past its window's end at 33 ms: depth's window 0 is
	// left empty (and window 1 will be doubled by the next frame).
	det, depth, first, _ := runWindowPair(t, windowPair(OrderClassFirst, 0))
	if first != "detector" || depth.At != at(38) {
		t.Fatalf("class first: %s first, depth delivered at %v", first, time.Duration(depth.At))
	}
	if c := Coverage(0, at(33), 33*ms, 100*ms, []Delivery{depth}); c.Covered != 0 {
		t.Fatalf("class first covered depth's window: %+v", c)
	}
	// By laxity: depth has 33 − (20 + 11) = 2 ms to spare, the detector
	// 50 − (20 + 8.8) = 21.2 ms; depth runs first and both windows are
	// covered. Admission lets it: the detector still ends (predicted
	// 20 + 11 + 8.8 = 39.8 ms) inside its window.
	det, depth, first, _ = runWindowPair(t, windowPair(OrderLaxity, 0))
	if first != "depth" || depth.At != at(30) || det.At != at(38) {
		t.Fatalf("laxity: %s first, depth at %v, detector at %v", first, time.Duration(depth.At), time.Duration(det.At))
	}
	if c := Coverage(0, at(33), 33*ms, 100*ms, []Delivery{depth}); c.Covered != 1 {
		t.Fatalf("depth window: %+v", c)
	}
	if c := Coverage(0, at(50), 50*ms, 50*ms, []Delivery{det}); c.Covered != 1 {
		t.Fatalf("detector window: %+v", c)
	}
}

func TestProtectedWindowGuarded(t *testing.T) {
	// The detector's window now closes at 31 ms (grid offset 31 ms): its
	// laxity, 31 − 28.8 = 2.2 ms, is larger than depth's 2 ms, but depth
	// first would end it at 39.8 ms (predicted), past its window.
	// Admission defers depth and keeps the protected frame's window.
	det, _, first, h := runWindowPair(t, windowPair(OrderLaxity, 31*ms))
	if first != "detector" || det.At != at(28) {
		t.Fatalf("%s first, detector at %v", first, time.Duration(det.At))
	}
	if st := h.stats("depth"); st.Deferred != 1 {
		t.Fatalf("depth deferred %d, want once (by admission)", st.Deferred)
	}
}

func TestLookaheadYieldsToTighterFrame(t *testing.T) {
	// A depth frame is predicted at 43 ms (frame interval 33 ms; its
	// window [33, 66)). A pose frame arriving at 32 ms has a window until
	// 100 ms. Started at once, pose (predicted 22 ms, to 54 ms) would push
	// depth to 76 ms, past its window; waiting for depth, pose still ends
	// by 87 ms. So pose yields, depth runs on arrival, pose after it.
	cfg := Config{
		Slots: 1, SafetyMargin: 110,
		Models: []ModelSpec{{Name: "pose", Exec: 20 * ms}, {Name: "depth", Exec: 20 * ms}},
		Streams: []StreamSpec{
			{Name: "pose", Model: "pose", Class: High, Period: 100 * ms, MaxAge: 200 * ms, Queue: Latest, WindowAligned: true},
			{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest, WindowAligned: true},
		},
	}
	h := newHarness(t, cfg)
	h.set(at(10))
	d1, acts := h.arrive("depth", 0) // depth window 0 ends at 33 ms
	mustDispatch(t, acts, d1)
	h.set(at(30))
	h.complete(d1, true)
	h.set(at(32))
	p1, acts := h.arrive("pose", 0)
	mustNothing(t, acts, p1)
	if st := h.stats("pose"); st.Yielded != 1 {
		t.Fatalf("pose yielded %d", st.Yielded)
	}
	// Re-evaluated once the predicted frame is overdue (43 ms + lead).
	if w, _ := h.s.NextWake(); w != at(45)+1 {
		t.Fatalf("NextWake %v", time.Duration(w))
	}
	h.set(at(43))
	d2, acts := h.arrive("depth", 0)
	mustDispatch(t, acts, d2)
	mustNothing(t, acts, p1)
	h.set(at(63))
	mustDispatch(t, h.complete(d2, true), p1)
}

func TestGridLearntFromFirstCapture(t *testing.T) {
	cfg := windowPair(OrderLaxity, 0)
	for i := range cfg.Streams {
		cfg.Streams[i].WindowAligned = false
	}
	h := newHarness(t, cfg)
	h.set(at(7))
	h.arrive("depth", at(5))
	h.set(at(9))
	h.arrive("detector", 0)
	for _, st := range h.s.streams {
		if st.seen && st.origin != at(5) {
			t.Fatalf("%s: grid origin %v, want the first capture on any stream", st.name, time.Duration(st.origin))
		}
	}
}

func TestLookaheadOneSlotPair(t *testing.T) {
	// One slot; windows on a told grid. A detector frame (window [0, 100))
	// arrives at 33 ms, as a pose frame is due (window [33, 66)) and a depth
	// frame is due at 45 ms (same window), before the detector would end.
	// Detector first (13.2 ms predicted, to 46.2) leaves pose (8.8) and
	// depth (15.4) to end at 70.4 ms, past 66; either alone would fit after
	// it. Without it both make their window and the detector still makes
	// its own: it yields.
	cfg := Config{
		Slots: 1, SafetyMargin: 110, NoPipeline: true,
		Models: []ModelSpec{{Name: "det", Exec: 12 * ms}, {Name: "pose", Exec: 8 * ms}, {Name: "depth", Exec: 14 * ms}},
		Streams: []StreamSpec{
			{Name: "detector", Model: "det", Class: Protected, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest, WindowAligned: true},
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest, WindowAligned: true},
			{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest, WindowAligned: true},
		},
	}
	h := newHarness(t, cfg)
	p0, _ := h.arrive("pose", 0)
	h.set(at(8))
	h.complete(p0, true)
	h.set(at(12))
	d0, _ := h.arrive("depth", 0)
	h.set(at(26))
	h.complete(d0, true)

	h.set(at(33))
	det, acts := h.arrive("detector", 0)
	mustNothing(t, acts, det)
	if st := h.stats("detector"); st.Yielded != 1 {
		t.Fatalf("detector yielded %d", st.Yielded)
	}
	p1, acts := h.arrive("pose", 0)
	mustDispatch(t, acts, p1)
	h.set(at(41))
	mustNothing(t, h.complete(p1, true), det) // depth is still due at 45 ms
	h.set(at(45))
	d1, acts := h.arrive("depth", 0)
	mustDispatch(t, acts, d1) // less laxity than the detector
	h.set(at(59))
	mustDispatch(t, h.complete(d1, true), det)
	h.set(at(71))
	h.complete(det, true)
	for _, n := range []string{"detector", "pose", "depth"} {
		if st := h.stats(n); st.Forwarded != st.Received {
			t.Fatalf("%s: %+v", n, st.Counters)
		}
	}
}
