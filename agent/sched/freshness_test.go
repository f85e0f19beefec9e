package sched

import (
	"testing"
	"time"
)

func TestCoverageHandWorked(t *testing.T) {
	ds := []Delivery{
		{At: at(199), Capture: at(160)}, // window 3, age 39: covered
		{At: at(10), Capture: at(0)},    // window 0, age 10: covered
		{At: at(60), Capture: at(5)},    // window 1, age 55: too old
		{At: at(99), Capture: at(60)},   // window 1, age 39: covered
		{At: at(150), Capture: at(100)}, // window 3, age 50 is not < 50
		{At: at(200), Capture: at(190)}, // window 4 is incomplete at end=200
		{At: at(-5), Capture: at(-10)},  // before start
	}
	got := Coverage(0, at(200), 50*ms, 50*ms, ds)
	if got != (CoverageResult{Windows: 4, Covered: 3}) {
		t.Fatalf("got %+v", got)
	}
	if r := got.Ratio(); r != 0.75 {
		t.Fatalf("ratio %v", r)
	}
	// Only complete windows count; windows move with start.
	if got := Coverage(0, at(230), 50*ms, 50*ms, ds); got.Windows != 4 {
		t.Fatalf("partial window counted: %+v", got)
	}
	if got := Coverage(at(25), at(225), 50*ms, 50*ms, ds); got != (CoverageResult{Windows: 4, Covered: 2, Doubled: 1}) || got.Empty() != 2 {
		// [25,75): 60 too old (10 is before start); [75,125): 99
		// covers; [125,175): 150 age 50 does not; [175,225): 199 and
		// 200 cover (doubled).
		t.Fatalf("shifted: %+v", got)
	}
	if got := Coverage(0, at(40), 50*ms, 50*ms, ds); got.Windows != 0 || got.Ratio() != 0 {
		t.Fatalf("no complete window: %+v", got)
	}
}

func TestAoIHandWorked(t *testing.T) {
	// From 10 ms the AoI rises 10→60 ms until 60 ms, then 10→50 ms until
	// end=100: a uniform density on [10,60) of weight 50 ms plus one on
	// [10,50) of weight 40 ms.
	ds := []Delivery{
		{At: at(60), Capture: at(50)},
		{At: at(70), Capture: at(20)}, // older frame: does not reset the age
		{At: at(10), Capture: at(0)},
		{At: at(120), Capture: at(110)}, // after end
	}
	got := AoI(0, at(100), ds)
	want := AoIStats{
		P50:  time.Duration(32.5 * float64(ms)), // 2(x−10) = 45
		P95:  time.Duration(55.5 * float64(ms)), // 40 + (x−10) = 85.5
		P99:  time.Duration(59.1 * float64(ms)), // 40 + (x−10) = 89.1
		Mean: 2950 * ms / 90,
		Max:  60 * ms,
		Span: 90 * ms,
	}
	if d := got.Mean - want.Mean; d < -1 || d > 1 {
		t.Fatalf("mean %v want %v", got.Mean, want.Mean)
	}
	got.Mean = want.Mean
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if ds[0].At != at(60) {
		t.Fatal("AoI reordered its input")
	}

	// A delivery before start defines the age at start.
	got = AoI(0, at(10), []Delivery{{At: at(-10), Capture: at(-20)}})
	if got.Span != 10*ms || got.Max != 30*ms || got.P50 != 25*ms {
		t.Fatalf("pre-start delivery: %+v", got)
	}
	// Nothing delivered: no AoI.
	if got := AoI(0, at(10), nil); got != (AoIStats{}) {
		t.Fatalf("empty: %+v", got)
	}
}

func TestCoverageGauge(t *testing.T) {
	var g coverageGauge
	g.init(make([]uint64, 1), 4, 50*ms)
	if c, w := g.ratio(at(100)); c != 0 || w != 0 {
		t.Fatal("ratio before start")
	}
	g.start(0)
	g.start(at(5)) // the epoch is the first capture
	for _, d := range []float64{10, 60, 160} {
		g.deliver(at(d))
	}
	check := func(now float64, wantC, wantW int) {
		t.Helper()
		if c, w := g.ratio(at(now)); c != wantC || w != wantW {
			t.Fatalf("ratio(%v) = %d/%d, want %d/%d", now, c, w, wantC, wantW)
		}
	}
	check(40, 0, 0)     // no complete window yet
	check(120, 2, 2)    // windows 0, 1
	check(200, 3, 4)    // windows 0..3: 2 missing
	check(260, 2, 4)    // windows 1..4
	g.deliver(at(1000)) // window 20: everything before falls out
	check(1010, 0, 4)
	check(1050, 1, 4)
	g.deliver(at(120)) // too old for the ring
	check(1050, 1, 4)
	g.deliver(at(960)) // window 19, still in the ring
	check(1050, 2, 4)
}
