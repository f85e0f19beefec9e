package doctor

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/config"
)

const msNs = int64(1e6)

func tk(name string, c, t, d int64) task {
	return task{name: name, c: c * msNs, t: t * msNs, d: d * msNs}
}

func msList(ns []int64) []int64 {
	out := make([]int64, len(ns))
	for k, v := range ns {
		out[k] = v / msNs
	}
	return out
}

// TestResponseTimeHandComputed checks the analysis against cases worked by hand
// (the iterations are written out in the comments).
func TestResponseTimeHandComputed(t *testing.T) {
	tests := []struct {
		name      string
		i         task
		hp        []task
		b         int64 // ms
		slots     int
		busy      int64   // ms
		r         []int64 // ms, per job of the busy period
		worst     int
		unbounded bool
	}{
		{
			// Scenario B's detector behind the 200 ms VLM:
			// t: 208 → 200+⌈208/50⌉·8 = 240 → 240. Q = ⌈240/50⌉ = 5.
			// w(q) = 200 + 8q (no higher priority), R(q) = 200 + 8q − 50q + 8 = 208 − 42q.
			name: "B detector blocked by vlm", i: tk("detector", 8, 50, 50), b: 200, slots: 1,
			busy: 240, r: []int64{208, 166, 124, 82, 40}, worst: 0,
		},
		{
			// Scenario A's detector (frames every 33 ms):
			// t: 212 → 200+7·12 = 284 → 200+9·12 = 308 → 200+10·12 = 320 → 320. Q = 10.
			// R(q) = 200 + 12q − 33q + 12 = 212 − 21q.
			name: "A detector blocked by vlm", i: tk("detector", 12, 33, 50), b: 200, slots: 1,
			busy: 320, r: []int64{212, 191, 170, 149, 128, 107, 86, 65, 44, 23}, worst: 0,
		},
		{
			// The CAN trap (Davis et al. 2007, Fig. 1, times ×10): A(C10,T25) > B(C10,T35) > i(C10,T35).
			// t: 30 → 0+2·10+1·10+1·10 = 40 → 2·10+2·10+2·10 = 60 → 3·10+2·10+2·10 = 70 → 70. Q = 2.
			// q=0: w: 0 → 20 → (⌊20/25⌋+1)·10 + (⌊20/35⌋+1)·10 = 20.  R(0) = 20 + 10 = 30.
			// q=1: w: 10 → 30 → 10+2·10+1·10 = 40 → 10+2·10+2·10 = 50 → 10+3·10+2·10 = 60 → 60.
			//      R(1) = 60 − 35 + 10 = 35: the second job is the worst.
			name: "later job is worst", i: tk("c", 10, 35, 32), hp: []task{tk("a", 10, 25, 25), tk("b", 10, 35, 35)},
			slots: 1, busy: 70, r: []int64{30, 35}, worst: 1,
		},
		{
			// Blocking and one higher-priority task: hp j(C3,T10), i(C4,T12), B = 5.
			// t: 5+3+4 = 12 → 5+⌈12/12⌉·4+⌈12/10⌉·3 = 15 → 5+2·4+2·3 = 19 → 19. Q = 2.
			// q=0: w: 5 → 5+1·3 = 8 → 8.  R(0) = 12.
			// q=1: w: 9 → 9+1·3 = 12 → 9+2·3 = 15 → 15.  R(1) = 15 − 12 + 4 = 7.
			name: "blocking and interference", i: tk("i", 4, 12, 20), hp: []task{tk("j", 3, 10, 10)}, b: 5,
			slots: 1, busy: 19, r: []int64{12, 7}, worst: 0,
		},
		{
			// Scenario C on two slots: B = 2nd longest lower job (10 ms), nothing
			// ahead: w = 10, R = 18; busy period 10 + 8 = 18.
			name: "two slots", i: tk("detector", 8, 50, 50), b: 10, slots: 2, busy: 18, r: []int64{18}, worst: 0,
		},
		{
			// Two slots, work ahead divided: hp j(C6,T10) twice over… i(C4,T20), B = 0.
			// t: ⌈6/2⌉+4 = 7 → ⌈(0+1·6)/2⌉+4 = 7. Q = 1. w: 0 → ⌈6/2⌉ = 3 → 3. R = 7.
			name: "two slots with interference", i: tk("i", 4, 20, 20), hp: []task{tk("j", 6, 10, 10)},
			slots: 2, busy: 7, r: []int64{7}, worst: 0,
		},
		{
			name: "overloaded", i: tk("i", 5, 10, 10), hp: []task{tk("j", 6, 10, 10)}, slots: 1, unbounded: true,
		},
		{
			// U = 1 exactly never lets the busy period end in this model.
			name: "exactly full", i: tk("i", 5, 10, 10), hp: []task{tk("j", 5, 10, 10)}, slots: 1, unbounded: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := responseTime(tt.i, tt.hp, tt.b*msNs, tt.slots)
			if a.unbounded != tt.unbounded {
				t.Fatalf("unbounded = %v, want %v", a.unbounded, tt.unbounded)
			}
			if tt.unbounded {
				return
			}
			if a.busy != tt.busy*msNs || !slices.Equal(msList(a.r), tt.r) || a.worst != tt.worst {
				t.Errorf("busy %d ms, R %v ms, worst job %d; want busy %d, R %v, worst %d",
					a.busy/msNs, msList(a.r), a.worst, tt.busy, tt.r, tt.worst)
			}
		})
	}
}

// TestOnlyLaterJobMisses is the CAN trap through the whole analysis: the first job
// of the lowest protected stream meets max_age, the second one does not; an
// analysis that stops at the first job would call this config clean.
func TestOnlyLaterJobMisses(t *testing.T) {
	const yaml = `
backend: {slots: 1}
models:
  m: {exec_ms: 10}
streams:
  - {name: a, model: m, class: protected, period_ms: 25, max_age_ms: 25}
  - {name: b, model: m, class: protected, period_ms: 35, max_age_ms: 30}
  - {name: c, model: m, class: protected, period_ms: 35, max_age_ms: 32}
`
	c, err := config.Parse("trap.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	fs := Analyze(c)
	f, ok := find(fs, CodeProtectedUnsched, "c")
	if !ok {
		t.Fatalf("no %s for c; findings: %+v", CodeProtectedUnsched, fs)
	}
	if f.Numbers["r_first_ms"] != 30 || f.Numbers["r_ms"] != 35 || f.Numbers["worst_job"] != 1 {
		t.Errorf("numbers = %v, want first job 30 ms, worst 35 ms at job 1", f.Numbers)
	}
	if !strings.Contains(f.Message, "job 1") || !strings.Contains(f.Message, "first job's response is 30 ms") {
		t.Errorf("message does not say which job misses: %s", f.Message)
	}
	for _, s := range []string{"a", "b"} {
		if _, ok := find(fs, CodeResponseTime, s); !ok {
			t.Errorf("%s should be reported schedulable", s)
		}
	}
	if u := f.Numbers; u == nil {
		t.Fatal("no numbers")
	}
	if _, ok := find(fs, CodeUtilization, ""); !ok {
		t.Error("utilization not reported")
	}
}

func TestBlocking(t *testing.T) {
	i := tk("detector", 8, 50, 50)
	vlm, depth, pose := tk("vlm", 200, 1000, 2000), tk("depth", 10, 33, 100), tk("pose", 5, 33, 66)
	alone := vlm
	alone.alone = true
	tests := []struct {
		name  string
		i     task
		lower []task
		slots int
		want  int64 // ms
	}{
		{"one slot: longest", i, []task{pose, depth, vlm}, 1, 200},
		{"two slots: second longest", i, []task{pose, depth, vlm}, 2, 10},
		{"three slots: third longest", i, []task{pose, depth, vlm}, 3, 5},
		{"more slots than blockers", i, []task{vlm}, 2, 0},
		{"alone blocks whole length", i, []task{pose, depth, alone}, 2, 200},
		{"alone victim waits for all", task{c: 8 * msNs, t: 50 * msNs, alone: true}, []task{pose, depth, vlm}, 2, 200},
		{"nothing lower", i, nil, 1, 0},
	}
	for _, tt := range tests {
		if got := blocking(tt.i, tt.lower, tt.slots); got != tt.want*msNs {
			t.Errorf("%s: B = %d ms, want %d", tt.name, got/msNs, tt.want)
		}
	}
}

func TestTolerableBlocking(t *testing.T) {
	// R = B + 8 ≤ 50 ⇔ B ≤ 42 ms, to the nanosecond.
	if got := tolerableBlocking(tk("detector", 8, 50, 50), nil, 200*msNs, 1); got != 42*msNs {
		t.Errorf("tolerable = %d ns, want 42 ms", got)
	}
	// The CAN trap misses without any blocking.
	if got := tolerableBlocking(tk("c", 10, 35, 32), []task{tk("a", 10, 25, 25), tk("b", 10, 35, 35)}, 0, 1); got != -1 {
		t.Errorf("tolerable = %d, want -1", got)
	}
}

func TestLateFramesPerRun(t *testing.T) {
	// B: ⌈(200 + 8 − 50)/50⌉ = ⌈3.16⌉ = 4; A: ⌈(200 + 12 − 50)/33⌉ = ⌈4.9⌉ = 5.
	if got := lateFramesPerRun(200*msNs, tk("detector", 8, 50, 50)); got != 4 {
		t.Errorf("B: %d, want 4", got)
	}
	if got := lateFramesPerRun(200*msNs, tk("detector", 12, 33, 50)); got != 5 {
		t.Errorf("A: %d, want 5", got)
	}
	if got := lateFramesPerRun(20*msNs, tk("detector", 8, 50, 50)); got != 0 {
		t.Errorf("short job: %d, want 0", got)
	}
}

// BenchmarkAnalyze measures the whole static analysis of scenario A (run by `vig
// serve` at every start).
func BenchmarkAnalyze(b *testing.B) {
	data, err := os.ReadFile("../../examples/scenarios/a.yaml")
	if err != nil {
		b.Fatal(err)
	}
	c, err := config.Parse("a.yaml", data)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		Analyze(c)
	}
}
