package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func newWindow(n int, prior time.Duration) *window {
	w := &window{}
	w.init(make([]int64, 2*n), prior)
	return w
}

func TestWindowOutliers(t *testing.T) {
	w := newWindow(32, 10*ms)
	if w.p90 != 10*ms {
		t.Fatalf("seeded p90 %v", w.p90)
	}
	// A tenth of the window may be outliers (a cold first inference, a
	// GC pause) without moving the estimate.
	for i := 0; i < 3; i++ {
		w.add(500 * ms)
		if w.p90 != 10*ms {
			t.Fatalf("%d outliers moved p90 to %v", i+1, w.p90)
		}
	}
	w.add(500 * ms)
	if w.p90 != 500*ms {
		t.Fatalf("4 of 32 slow samples: p90 %v, want 500ms", w.p90)
	}
	// Real samples replace seeds and outliers age out.
	for i := 0; i < 32; i++ {
		w.add(12 * ms)
	}
	if w.p90 != 12*ms || w.real != 32 {
		t.Fatalf("after a full window of 12ms: p90 %v real %d", w.p90, w.real)
	}
}

func TestWindowMatchesNaiveP90(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 10, 32, 100} {
		w := newWindow(n, 7*ms)
		var hist []int64
		for range n {
			hist = append(hist, int64(7*ms))
		}
		for i := 0; i < 2000; i++ {
			d := time.Duration(r.IntN(5)) * ms // many duplicates
			if r.IntN(10) == 0 {
				d = time.Duration(r.Int64N(int64(time.Second)))
			}
			w.add(d)
			hist = append(hist[1:], max(int64(d), 1))
			s := slices.Clone(hist)
			slices.Sort(s)
			if !slices.Equal(s, w.sorted) {
				t.Fatalf("n=%d step %d: sorted copy diverged", n, i)
			}
			if want := time.Duration(s[p90Index(n)]); w.p90 != want {
				t.Fatalf("n=%d step %d: p90 %v want %v", n, i, w.p90, want)
			}
		}
	}
}

func TestBackendStatsCorrection(t *testing.T) {
	h := newHarness(t, Config{
		Slots:        2,
		SafetyMargin: NoMargin,
		Models:       []ModelSpec{{Name: "m", Exec: 200 * ms}, {Name: "n", Exec: 5 * ms}},
		Streams: []StreamSpec{
			// A frame every 100 ms, as the loop below sends them.
			{Name: "m", Model: "m", Class: High, Period: time.Second, MaxAge: time.Second, FrameInterval: 100 * ms, Queue: Latest},
		},
		EstimatorWindow: 10,
	})
	// Learn occupancy 0 only.
	for i := 0; i < 10; i++ {
		tok, acts := h.arrive("m", 0)
		mustDispatch(t, acts, tok)
		h.set(h.now.Add(100 * ms))
		h.complete(tok, true)
	}
	// The backend reports a 120 ms mean: it replaces the prior where
	// nothing was measured, and floors what was.
	h.s.ObserveBackendStats("m", uint64(12*120*ms), 12)
	if e, _ := h.s.Estimate("m", 1); e != 120*ms {
		t.Fatalf("unmeasured occupancy: %v, want the backend mean", e)
	}
	if e, _ := h.s.Estimate("m", 0); e != 120*ms {
		t.Fatalf("measured occupancy: %v, want floored at the backend mean", e)
	}
	h.s.ObserveBackendStats("m", uint64(50*ms), 1)
	if e, _ := h.s.Estimate("m", 0); e != 100*ms {
		t.Fatalf("measured occupancy: %v, want the measured 100ms", e)
	}
	if e, _ := h.s.Estimate("m", 1); e != 50*ms {
		t.Fatalf("unmeasured occupancy reseeded: %v", e)
	}
	// Missing statistics (zero count) and unknown models change nothing.
	h.s.ObserveBackendStats("m", 0, 0)
	h.s.ObserveBackendStats("zzz", 5, 1)
	if e, _ := h.s.Estimate("n", 0); e != 5*ms {
		t.Fatalf("other model touched: %v", e)
	}
	if _, ok := h.s.Estimate("m", 2); ok {
		t.Fatal("estimate beyond the slots")
	}
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	if len(snap.Estimates) != 4 || snap.Estimates[0].Samples != 10 || snap.Estimates[0].Backend != 50*ms {
		t.Fatalf("estimates %+v", snap.Estimates)
	}
}

func TestTokenIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n = 64
	ti := newTokenIndex(n)
	ref := map[uint64]int32{}
	for i := 0; i < 100000; i++ {
		// Small key space so probe runs collide and wrap.
		k := uint64(r.IntN(200)) * 0x100000000
		if r.IntN(2) == 0 {
			k = uint64(r.IntN(200))
		}
		if _, ok := ref[k]; ok {
			ti.del(k)
			delete(ref, k)
		} else if len(ref) < n {
			v := int32(r.IntN(n))
			ti.put(k, v)
			ref[k] = v
		}
		if i%97 == 0 {
			for k, v := range ref {
				if got := ti.get(k); got != v {
					t.Fatalf("step %d: get(%d) = %d want %d", i, k, got, v)
				}
			}
		}
		v, ok := ref[k]
		if got := ti.get(k); (ok && got != v) || (!ok && got != -1) {
			t.Fatalf("step %d: get(%d) = %d, want %d (present %v)", i, k, got, v, ok)
		}
	}
}

func TestMargin(t *testing.T) {
	for m := NoMargin; m <= MaxMargin; m++ {
		got, err := ParseMargin(m.String())
		if err != nil || got != m {
			t.Fatalf("round trip %v: %v %v", m, got, err)
		}
	}
	for _, c := range []struct {
		in   string
		want Margin
		ok   bool
	}{
		{"100", 100, true}, {"100%", 100, true}, {" 110 % ", 110, true}, {"250", 250, true},
		{"99", 0, false}, {"0", 0, false}, {"", 0, false}, {"1.1", 0, false},
		{"110.0", 0, false}, {"-110", 0, false}, {"1001", 0, false}, {"1e3", 0, false},
	} {
		got, err := ParseMargin(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseMargin(%q) = %v, %v", c.in, got, err)
		}
	}
	if NoMargin.Apply(200*ms) != 200*ms || DefaultMargin.Apply(200*ms) != 220*ms || Margin(150).Apply(3) != 5 {
		t.Fatal("Apply")
	}
	if Margin(0).Validate() == nil || Margin(100).Percent() != 100 {
		t.Fatal("Validate/Percent")
	}
}
