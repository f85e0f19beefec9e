package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// batchConfig is one slot with a batching detector "det" (its cameras given
// as name → class, max_age) and any other models given.
func batchConfig(maxBatch int, cost []BatchCost, cams []StreamSpec, others ...ModelSpec) Config {
	cfg := Config{Slots: 1, SafetyMargin: DefaultMargin, NoPipeline: true,
		Models: append([]ModelSpec{{Name: "det", Exec: 10 * ms, MaxBatch: maxBatch, BatchExec: cost}}, others...)}
	for _, c := range cams {
		if c.Model == "" {
			c.Model = "det"
		}
		if c.Period == 0 {
			c.Period = 33 * ms
		}
		cfg.Streams = append(cfg.Streams, c)
	}
	return cfg
}

var seededE = []BatchCost{{1, 10 * ms}, {8, 27500 * time.Microsecond}}

func cam(name string, class Class, maxAge time.Duration) StreamSpec {
	return StreamSpec{Name: name, Class: class, MaxAge: maxAge, Queue: Latest}
}

// arriveCam sends a frame of a camera with batch key 7 (one row).
func (h *harness) arriveCam(stream string, capture Time) (uint64, []Action) {
	h.t.Helper()
	model := "det"
	for _, sp := range h.s.cfg.Streams {
		if sp.Name == stream {
			model = sp.Model
		}
	}
	key := uint64(0)
	if model == "det" {
		key = 7
	}
	tok, acts := h.arriveReq(Request{Stream: stream, Model: model, Capture: capture, BatchKey: key, Rows: 1})
	return tok, acts
}

// batchOf returns the tokens of the batch led by lead in acts, lead first,
// checking that its Dispatches agree with each other.
func batchOf(t *testing.T, acts []Action, lead uint64) []uint64 {
	t.Helper()
	var toks []uint64
	var first Action
	for _, a := range acts {
		if a.Kind != Dispatch || a.Batch != lead {
			continue
		}
		if len(toks) == 0 {
			first = a
			if a.Token != lead {
				t.Fatalf("batch %d: first dispatch is %d, not its lead", lead, a.Token)
			}
		} else if a.Slot != first.Slot || a.Start != first.Start || a.Queued != first.Queued || a.BatchSize != first.BatchSize {
			t.Fatalf("batch %d: dispatches disagree: %+v vs %+v", lead, a, first)
		}
		toks = append(toks, a.Token)
	}
	if len(toks) > 0 && len(toks) != first.BatchSize {
		t.Fatalf("batch %d: %d dispatches, BatchSize %d", lead, len(toks), first.BatchSize)
	}
	return toks
}

// TestBatchTakesWaitingHeads: frames of three streams of a batching model that
// wait behind another job run as one job when the slot frees; Complete of the
// lead finishes all three; a frame with another batch key runs apart.
func TestBatchTakesWaitingHeads(t *testing.T) {
	cfg := batchConfig(8, seededE, []StreamSpec{cam("a", High, 66*ms), cam("b", High, 66*ms), cam("c", High, 66*ms), cam("d", High, 66*ms),
		{Name: "blk", Model: "other", Class: High, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest}},
		ModelSpec{Name: "other", Exec: 20 * ms})
	h := newHarness(t, cfg)
	blk, acts := h.arriveCam("blk", 0)
	mustDispatch(t, acts, blk)
	var toks []uint64
	for i, n := range []string{"a", "b", "c"} {
		h.set(at(float64(1 + i)))
		tok, acts := h.arriveCam(n, 0)
		mustNothing(t, acts, tok)
		toks = append(toks, tok)
	}
	h.set(at(4))
	d, _ := h.arriveReq(Request{Stream: "d", Model: "det", BatchKey: 8})
	h.set(at(20))
	// d's frame can still land in the first window alone: it goes first,
	// and alone (another key).
	acts = h.complete(blk, true)
	if a := mustDispatch(t, acts, d); a.Batch != 0 {
		t.Fatalf("d runs alone: %+v", a)
	}
	h.set(at(31))
	acts = h.complete(d, true)
	var lead uint64
	for _, a := range acts {
		if a.Kind == Dispatch && a.Batch != 0 {
			lead = a.Batch
			break
		}
	}
	got := batchOf(t, acts, lead)
	if len(got) != 3 {
		t.Fatalf("want a batch of a, b, c; actions %s, batch %v", fmtActs(acts), got)
	}
	for _, tok := range toks {
		if a := mustDispatch(t, acts, tok); a.Batch != lead {
			t.Fatalf("token %d not in the batch: %+v", tok, a)
		}
	}
	h.set(at(40))
	for _, tok := range toks {
		if tok != lead {
			if acts := h.complete(tok, true); len(acts) != 0 {
				t.Fatalf("Complete of a member %d acted: %s", tok, fmtActs(acts))
			}
		}
	}
	h.set(at(48))
	h.complete(lead, true)
	for _, n := range []string{"a", "b", "c"} {
		if st := h.stats(n); st.Forwarded != 1 || st.Running != 0 {
			t.Fatalf("%s: %+v", n, st.Counters)
		}
	}
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	if len(snap.Batches) != 1 || snap.Batches[0].Sizes[3] != 1 || snap.Batches[0].Sizes[1] != 1 { // a, b, c; d alone
		t.Fatalf("batch counts %+v", snap.Batches)
	}
}

// TestBatchFailsAndCancelsPerMember: a failed batch fails each member; a
// member whose client left while it ran counts cancelled, the others are
// forwarded.
func TestBatchFailsAndCancelsPerMember(t *testing.T) {
	cfg := batchConfig(8, seededE, []StreamSpec{cam("a", High, 66*ms), cam("b", High, 66*ms),
		{Name: "blk", Model: "other", Class: High, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest}},
		ModelSpec{Name: "other", Exec: 20 * ms})
	for _, ok := range []bool{true, false} {
		h := newHarness(t, cfg)
		blk, _ := h.arriveCam("blk", 0)
		h.set(at(1))
		a, _ := h.arriveCam("a", 0)
		b, _ := h.arriveCam("b", 0)
		h.set(at(20))
		acts := h.complete(blk, true)
		if got := batchOf(t, acts, a); len(got) != 2 {
			t.Fatalf("want a batch of a and b: %s", fmtActs(acts))
		}
		h.set(at(25))
		if acts := h.cancel(b); len(acts) != 0 {
			t.Fatalf("cancel of a running member acted: %s", fmtActs(acts))
		}
		h.set(at(33))
		h.complete(a, ok)
		sa, sb := h.stats("a"), h.stats("b")
		if sb.Cancelled != 1 || sb.Forwarded+sb.BackendError != 0 {
			t.Fatalf("ok=%v b: %+v", ok, sb.Counters)
		}
		if ok && sa.Forwarded != 1 || !ok && sa.BackendError != 1 {
			t.Fatalf("ok=%v a: %+v", ok, sa.Counters)
		}
	}
}

// TestBatchStaleFrameNotTaken: a frame whose result would be stale at the
// batch's end does not join it, although it would be fresh alone: it runs
// alone, and the other frame waits for its own job.
func TestBatchStaleFrameNotTaken(t *testing.T) {
	cfg := batchConfig(8, seededE, []StreamSpec{cam("a", High, 66*ms), cam("b", High, 66*ms),
		{Name: "blk", Model: "other", Class: High, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest}},
		ModelSpec{Name: "other", Exec: 20 * ms})
	h := newHarness(t, cfg)
	blk, _ := h.arriveCam("blk", 0)
	h.set(at(1))
	// b's deadline, 32 ms, is after its own job's predicted end (20 + 11)
	// but before a batch of two's (20 + 13.75).
	b, _ := h.arriveCam("b", at(-34))
	h.set(at(2))
	a, _ := h.arriveCam("a", 0)
	h.set(at(20))
	acts := h.complete(blk, true)
	if got := mustDispatch(t, acts, b); got.Batch != 0 {
		t.Fatalf("b joined a batch it would leave stale: %s", fmtActs(acts))
	}
	mustNothing(t, acts, a)
	// With b fresh enough, the two run as one.
	h2 := newHarness(t, cfg)
	blk, _ = h2.arriveCam("blk", 0)
	h2.set(at(1))
	b, _ = h2.arriveCam("b", at(-30))
	h2.set(at(2))
	h2.arriveCam("a", 0)
	h2.set(at(20))
	acts = h2.complete(blk, true)
	if got := batchOf(t, acts, b); len(got) != 2 {
		t.Fatalf("b fresh at the batch's end: want a batch of two: %s", fmtActs(acts))
	}
}

// TestBatchGuardsProtected: a batch that would make a protected frame of
// another model miss its deadline is not started whole: the largest batch that
// keeps the guarantee runs, and the protected frame meets its deadline.
func TestBatchGuardsProtected(t *testing.T) {
	cfg := batchConfig(8, seededE, []StreamSpec{cam("a", High, 66*ms), cam("b", High, 66*ms), cam("c", High, 66*ms), cam("d", High, 66*ms),
		{Name: "p", Model: "pm", Class: Protected, Period: 33 * ms, MaxAge: 14 * ms, Queue: Latest},
		{Name: "blk", Model: "other", Class: High, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest}},
		ModelSpec{Name: "pm", Exec: 8 * ms}, ModelSpec{Name: "other", Exec: 12 * ms})
	h := newHarness(t, cfg)
	p, _ := h.arriveCam("p", 0)
	h.set(at(1))
	blk, _ := h.arriveCam("blk", 0)
	h.set(at(8))
	mustDispatch(t, h.complete(p, true), blk)
	var cams []uint64
	for i, n := range []string{"a", "b", "c", "d"} {
		h.set(at(float64(9 + i)))
		tok, _ := h.arriveCam(n, 0)
		cams = append(cams, tok)
	}
	// At 20 the slot frees. p's next frame (captured at 33) must start by
	// 33 + 14 − 8.8 = 38.2: a batch of four (20 + 19.25) would end after,
	// a batch of three (20 + 16.5) before.
	h.set(at(20))
	acts := h.complete(blk, true)
	got := batchOf(t, acts, cams[0])
	if len(got) != 3 {
		t.Fatalf("want a batch of three (four would block p): %s", fmtActs(acts))
	}
	h.set(at(33))
	p2, acts := h.arriveCam("p", 0)
	mustNothing(t, acts, p2)
	h.set(at(36))
	acts = h.complete(cams[0], true)
	mustDispatch(t, acts, p2)
	if st := h.stats("p"); st.LateDropped != 0 {
		t.Fatalf("p late: %+v", st.Counters)
	}
}

// TestBatchFillsWithinSlack: a frame alone waits for the next frame of another
// stream of its model when the batch of both would still meet its target, and
// does not when that would take it past its slack.
func TestBatchFillsWithinSlack(t *testing.T) {
	for _, tc := range []struct {
		maxAge time.Duration
		waits  bool
	}{{20 * ms, true}, {14 * ms, false}} {
		t.Run(fmt.Sprint("max_age ", tc.maxAge), func(t *testing.T) {
			cfg := batchConfig(8, seededE, []StreamSpec{cam("a", Protected, tc.maxAge), cam("b", High, 66*ms)})
			h := newHarness(t, cfg)
			a0, _ := h.arriveCam("a", 0)
			h.set(at(3))
			b0, _ := h.arriveCam("b", 0)
			h.set(at(10))
			mustDispatch(t, h.complete(a0, true), b0)
			h.set(at(20))
			h.complete(b0, true)
			h.set(at(33))
			a1, acts := h.arriveCam("a", 0)
			if !tc.waits {
				if a := mustDispatch(t, acts, a1); a.Batch != 0 {
					t.Fatalf("a ran in a batch: %+v", a)
				}
				return
			}
			mustNothing(t, acts, a1)
			w, ok := h.s.NextWake()
			if !ok || w > at(33+3+4) {
				t.Fatalf("waiting for b's frame due at 36: NextWake %v %v", w, ok)
			}
			h.set(at(36))
			b1, acts := h.arriveCam("b", 0)
			if got := batchOf(t, acts, a1); len(got) != 2 || got[1] != b1 {
				t.Fatalf("want a batch of a and b at 36: %s", fmtActs(acts))
			}
			if st := h.stats("a"); st.BatchWaits != 1 {
				t.Fatalf("a: BatchWaits %d", st.BatchWaits)
			}
		})
	}
}

// TestBatchNoGainRunsAlone: a model whose batch of b costs b frames alone
// (batch_exec_ms {1: 10, 8: 80}) never batches: batching would only delay the
// first frame's result.
func TestBatchNoGainRunsAlone(t *testing.T) {
	cfg := batchConfig(8, []BatchCost{{1, 10 * ms}, {8, 80 * ms}}, []StreamSpec{cam("a", High, 66*ms), cam("b", High, 66*ms), cam("c", High, 66*ms),
		{Name: "blk", Model: "other", Class: High, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest}},
		ModelSpec{Name: "other", Exec: 20 * ms})
	h := newHarness(t, cfg)
	blk, _ := h.arriveCam("blk", 0)
	h.set(at(1))
	for _, n := range []string{"a", "b", "c"} {
		h.arriveCam(n, 0)
	}
	h.set(at(20))
	for _, a := range h.complete(blk, true) {
		if a.Kind == Dispatch && a.Batch != 0 {
			t.Fatalf("batched without gain: %+v", a)
		}
	}
}

// TestBatchRowsWithinMaxBatch: a batch never carries more rows than
// MaxBatch.
func TestBatchRowsWithinMaxBatch(t *testing.T) {
	cfg := batchConfig(3, seededE, []StreamSpec{cam("a", High, 66*ms), cam("b", High, 66*ms), cam("c", High, 66*ms), cam("d", High, 66*ms),
		{Name: "blk", Model: "other", Class: High, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest}},
		ModelSpec{Name: "other", Exec: 20 * ms})
	h := newHarness(t, cfg)
	blk, _ := h.arriveCam("blk", 0)
	h.set(at(1))
	a, _ := h.arriveReq(Request{Stream: "a", Model: "det", BatchKey: 7, Rows: 2})
	for _, n := range []string{"b", "c", "d"} {
		h.arriveCam(n, 0)
	}
	h.set(at(20))
	acts := h.complete(blk, true)
	if got := batchOf(t, acts, a); len(got) != 2 {
		t.Fatalf("a carries 2 rows, max_batch 3: want a batch of a and one more: %s", fmtActs(acts))
	}
}

// TestMaxBatchOneIsUnbatched: with MaxBatch 1 (or 0) the scheduler decides
// exactly as it does for requests without a batch key: the same actions, in
// the same order, on a random workload.
//
// So does a model whose batches never pay (batch_exec_ms {1: 10, 8: 80}: a
// batch costs what its frames cost alone).
func TestMaxBatchOneIsUnbatched(t *testing.T) {
	run := func(maxBatch int, key uint64, cost []BatchCost) []string {
		cfg := batchConfig(maxBatch, cost, []StreamSpec{cam("a", Protected, 50*ms), cam("b", High, 66*ms), cam("c", High, 66*ms),
			{Name: "o", Model: "other", Class: High, Period: 50 * ms, MaxAge: 80 * ms, Queue: Latest}},
			ModelSpec{Name: "other", Exec: 6 * ms})
		cfg.NoPipeline = false
		h := newHarness(t, cfg)
		rng := rand.New(rand.NewPCG(3, 4))
		var log []string
		var running []uint64
		for i := 0; i < 3000; i++ {
			h.set(h.now.Add(time.Duration(rng.IntN(4000)) * time.Microsecond))
			var acts []Action
			switch r := rng.IntN(10); {
			case r < 6:
				n := []string{"a", "b", "c", "o"}[rng.IntN(4)]
				m := "det"
				if n == "o" {
					m = "other"
				}
				_, acts = h.arriveReq(Request{Stream: n, Model: m, BatchKey: key, Rows: 1})
			case r < 9 && len(running) > 0:
				acts = h.complete(running[0], rng.IntN(20) > 0)
				running = running[1:]
			default:
				acts = h.tick()
			}
			for _, a := range acts {
				if a.Kind == Dispatch {
					if a.Batch != 0 {
						t.Fatalf("max_batch %d batched: %+v", maxBatch, a)
					}
					running = append(running, a.Token)
				}
				log = append(log, fmt.Sprintf("%d %+v", h.now, a))
			}
		}
		return log
	}
	want := run(0, 0, nil)
	for _, tc := range []struct {
		mb   int
		cost []BatchCost
	}{{0, nil}, {1, nil}, {8, []BatchCost{{1, 10 * ms}, {8, 80 * ms}}}} {
		got := run(tc.mb, 9, tc.cost)
		if len(got) != len(want) {
			t.Fatalf("max_batch %d %v: %d actions, unbatched %d", tc.mb, tc.cost, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("max_batch %d %v: action %d differs:\n got %s\nwant %s", tc.mb, tc.cost, i, got[i], want[i])
			}
		}
	}
}

// TestBatchEstimatorLearnsSizes: a model given only max_batch learns the cost
// of the sizes it runs and refits those it has not run from them.
func TestBatchEstimatorLearnsSizes(t *testing.T) {
	s, err := New(batchConfig(8, nil, []StreamSpec{cam("a", High, 66*ms)}))
	if err != nil {
		t.Fatal(err)
	}
	m := &s.models[0]
	if got, want := m.estimateN(0, 5), 30*ms; got != want { // the default slope 0.5
		t.Fatalf("prior of 5: %v, want %v", got, want)
	}
	// Batches of 3 cost 10 × (1 + 0.25·2) = 15 ms: slope 0.25.
	for i := 0; i < 4; i++ {
		m.learnBatch(0, 1, 10*ms, s.margin)
		m.learnBatch(0, 3, 15*ms, s.margin)
	}
	if got, want := m.estimateN(0, 7), 25*ms; got < want-ms/2 || got > want+ms/2 {
		t.Fatalf("refit of 7: %v, want ≈ %v", got, want)
	}
	if got := s.costN(0, 0, 7); got != s.margin.Apply(m.estimateN(0, 7)) {
		t.Fatalf("cost of 7 %v not the estimate with margin", got)
	}
}

// TestSetMaxBatch: a model configured without max_batch batches once the
// server's max_batch_size is set at run time, with a request table large
// enough for its batches, and stops when it is set back to 1.
func TestSetMaxBatch(t *testing.T) {
	cfg := batchConfig(0, nil, []StreamSpec{cam("a", High, 66*ms), cam("b", High, 66*ms), cam("c", High, 66*ms),
		{Name: "blk", Model: "other", Class: High, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest}},
		ModelSpec{Name: "other", Exec: 20 * ms})
	h := newHarness(t, cfg)
	if h.s.SetMaxBatch("nope", 4) || h.s.SetMaxBatch("det", -1) {
		t.Fatal("SetMaxBatch accepted an unknown model or a negative size")
	}
	before := len(h.s.reqs)
	if !h.s.SetMaxBatch("det", 8) {
		t.Fatal("SetMaxBatch(det, 8) refused")
	}
	if len(h.s.reqs) <= before {
		t.Fatalf("request table %d, was %d: too small for batches of 8", len(h.s.reqs), before)
	}
	for round := 0; round < 2; round++ {
		blk, _ := h.arriveCam("blk", 0)
		h.set(h.now.Add(ms))
		var toks []uint64
		for _, n := range []string{"a", "b", "c"} {
			tok, _ := h.arriveCam(n, 0)
			toks = append(toks, tok)
		}
		h.set(h.now.Add(20 * ms))
		acts := h.complete(blk, true)
		batched := 0
		for _, a := range acts {
			if a.Kind == Dispatch && a.Batch != 0 {
				batched++
			}
		}
		if round == 0 && batched != 3 || round == 1 && batched != 0 {
			t.Fatalf("round %d: %d batched dispatches: %s", round, batched, fmtActs(acts))
		}
		for _, tok := range toks {
			h.set(h.now.Add(30 * ms))
			h.complete(tok, true)
		}
		h.set(h.now.Add(100 * ms))
		h.s.SetMaxBatch("det", 1)
	}
}

// TestBatchExtraWaitsBounded: an extra frame of a batching model (its window
// already has a result) does not run alone while its model's other streams
// send — it would only double the window — but runs once starting it lands
// in the next window, without waiting for another event.
func TestBatchExtraWaitsBounded(t *testing.T) {
	// b sends every 500 ms: a peer, but none of its frames is due soon.
	slow := cam("b", High, 200*ms)
	slow.Period = 500 * ms
	cfg := batchConfig(8, seededE, []StreamSpec{cam("a", High, 200*ms), slow})
	h := newHarness(t, cfg)
	a0, _ := h.arriveCam("a", 0)
	h.set(at(1))
	b0, _ := h.arriveCam("b", 0)
	h.set(at(11))
	mustDispatch(t, h.complete(a0, true), b0) // a's first window has its result
	h.set(at(14))
	h.complete(b0, true)
	h.set(at(15))
	a1, acts := h.arriveCam("a", 0)
	mustNothing(t, acts, a1)
	w, ok := h.s.NextWake()
	if !ok || w > at(33-11) {
		t.Fatalf("the extra waits with no wake-up before its next window: NextWake %v %v", w, ok)
	}
	// It runs at a wake-up of its own, by 33 ms: its result then lands in
	// the next window.
	for range 3 {
		h.set(w)
		if _, ok := find(h.tick(), a1); ok {
			if h.now > at(33) {
				t.Fatalf("a1 dispatched at %v, after its next window began", time.Duration(h.now))
			}
			return
		}
		if w, ok = h.s.NextWake(); !ok {
			t.Fatal("a1 waits with no wake-up")
		}
	}
	t.Fatalf("a1 not dispatched by %v", time.Duration(h.now))
}
