package sched

import (
	"testing"
	"time"
)

// seqCfg: a stateful tracker on a Latest stream, sharing its slots with a slow
// model that keeps them busy.
func seqCfg(slots int) Config {
	return Config{
		Slots:        slots,
		SafetyMargin: 110,
		Models:       []ModelSpec{{Name: "trk", Exec: 5 * ms}, {Name: "slow", Exec: 100 * ms}},
		Streams: []StreamSpec{
			{Name: "cam", Model: "trk", Class: High, Period: 10 * ms, MaxAge: 20 * ms, Queue: Latest},
			{Name: "other", Model: "slow", Class: Protected, Period: 100 * ms, MaxAge: time.Second, Queue: Latest},
		},
	}
}

func (h *harness) frame(id uint64, start, end bool) (uint64, []Action) {
	h.t.Helper()
	return h.arriveReq(Request{Stream: "cam", Model: "trk", SequenceID: id, SequenceStart: start, SequenceEnd: end})
}

// A START waiting behind a busy slot is neither superseded by the frames after
// it nor late-dropped when it goes stale: it runs first, then the newest frame.
func TestSequenceStartNeverSupersededNorDropped(t *testing.T) {
	h := newHarness(t, seqCfg(1))
	busy, acts := h.arrive("other", 0)
	mustDispatch(t, acts, busy)
	start, acts := h.frame(7, true, false)
	mustNothing(t, acts, start)
	var last uint64
	for i := 1; i <= 5; i++ {
		h.set(at(float64(i)))
		tok, acts := h.frame(7, false, false)
		mustNothing(t, acts, start)
		if last != 0 {
			mustAnswer(t, acts, last, Aborted, Superseded)
		}
		last = tok
	}
	h.set(at(60)) // every frame is stale now: the middle one goes, the START stays
	acts = h.tick()
	mustAnswer(t, acts, last, DeadlineExceeded, LateDropped)
	mustNothing(t, acts, start)
	h.set(at(100))
	acts = h.complete(busy, true)
	if a := mustDispatch(t, acts, start); a.Deadline != at(20) {
		t.Fatalf("START dispatched with deadline %v, want its capture + max_age (20ms)", a.Deadline)
	}
	if st := h.stats("cam"); st.Superseded != 4 || st.LateDropped != 1 || st.Running != 1 {
		t.Fatalf("cam: %+v", st.Counters)
	}
}

// The END of one sequence survives the START and middle frames of the next
// arriving behind it, and the Latest queue refuses a pinned frame beyond its
// room rather than drop one.
func TestSequenceEndNeverLost(t *testing.T) {
	h := newHarness(t, seqCfg(1))
	busy, acts := h.arrive("other", 0)
	mustDispatch(t, acts, busy)
	h.set(at(1))
	end, acts := h.frame(1, false, true)
	mustNothing(t, acts, end)
	h.set(at(2))
	start2, acts := h.frame(2, true, false)
	mustNothing(t, acts, end)
	mustNothing(t, acts, start2)
	h.set(at(3))
	mid, acts := h.frame(2, false, false)
	mustNothing(t, acts, mid)
	h.set(at(4))
	// A third pinned frame supersedes the middle one; a fourth finds no room.
	end2, acts := h.frame(2, false, true)
	mustAnswer(t, acts, mid, Aborted, Superseded)
	h.set(at(5))
	over, acts := h.frame(3, true, false)
	mustAnswer(t, acts, over, ResourceExhausted, Rejected)
	h.set(at(100))
	acts = h.complete(busy, true)
	mustDispatch(t, acts, end)
	mustNothing(t, acts, start2)
	h.set(at(105))
	acts = h.complete(end, true)
	mustDispatch(t, acts, start2)
	h.set(at(110))
	acts = h.complete(start2, true)
	mustDispatch(t, acts, end2)
}

// With two slots, the next frame of a sequence waits for the previous one's
// answer although a slot is free; a frame of another sequence does not.
func TestSequenceOrderTwoSlots(t *testing.T) {
	cfg := seqCfg(2)
	cfg.Streams = append(cfg.Streams, StreamSpec{Name: "cam2", Model: "trk", Class: High, Period: 10 * ms, MaxAge: 20 * ms, Queue: Latest})
	h := newHarness(t, cfg)
	f1, acts := h.frame(9, true, false)
	mustDispatch(t, acts, f1)
	h.set(at(1))
	f2, acts := h.frame(9, false, false)
	mustNothing(t, acts, f2)
	if a, ok := find(acts, f2); ok {
		t.Fatalf("frame 2 of a sequence decided while frame 1 runs: %s", fmtAct(a))
	}
	other, acts := h.arriveReq(Request{Stream: "cam2", Model: "trk", SequenceID: 10, SequenceStart: true})
	mustDispatch(t, acts, other)
	h.set(at(5))
	acts = h.complete(f1, true)
	mustDispatch(t, acts, f2)
	h.set(at(6))
	f3, acts := h.frame(9, false, true)
	mustNothing(t, acts, f3)
	h.set(at(8)) // past the commit time of f2: still not committed behind it
	acts = h.tick()
	mustNothing(t, acts, f3)
	h.set(at(10))
	acts = h.complete(f2, true)
	mustDispatch(t, acts, f3)
}

// Without a sequence id the flags mean nothing: such frames are superseded as
// any other.
func TestSequenceFlagsWithoutID(t *testing.T) {
	h := newHarness(t, seqCfg(1))
	busy, acts := h.arrive("other", 0)
	mustDispatch(t, acts, busy)
	a, _ := h.frame(0, true, false)
	h.set(at(1))
	_, acts = h.frame(0, false, false)
	mustAnswer(t, acts, a, Aborted, Superseded)
}

// CompleteLate counts the request late_dropped and keeps the counters balanced,
// for every member of a batch too.
func TestCompleteLate(t *testing.T) {
	h := newHarness(t, seqCfg(1))
	tok, acts := h.arrive("cam", 0)
	mustDispatch(t, acts, tok)
	h.set(at(3))
	h.acts = h.s.CompleteLate(h.now, tok, h.acts[:0])
	h.check()
	if st := h.stats("cam"); st.LateDropped != 1 || st.Running != 0 || st.BackendError != 0 || st.Forwarded != 0 {
		t.Fatalf("cam after CompleteLate: %+v", st.Counters)
	}
	if h.snap.Busy != 0 {
		t.Fatalf("slot still busy after CompleteLate: %d", h.snap.Busy)
	}
}
