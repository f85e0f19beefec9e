package sched

import (
	"testing"
	"time"
)

// The fixed workloads of SCENARIOS.md, simulated on the fake clock with the
// mock backend's execution-time factor in [0.9, 1.3]. The simulation has no
// transport latency, so these are properties of the policy, not predictions
// of the wire benchmark.

type scenarioStream struct {
	name                  string
	class                 Class
	frame, period, maxAge time.Duration
	exec                  time.Duration
	minRate               float64
}

type scenarioResult struct {
	cov   map[string]CoverageResult
	stats map[string]StreamStats
}

func runScenario(t *testing.T, slots int, streams []scenarioStream, dur time.Duration) scenarioResult {
	t.Helper()
	cfg := Config{Slots: slots, SafetyMargin: DefaultMargin}
	exec := map[string]time.Duration{}
	for _, s := range streams {
		cfg.Models = append(cfg.Models, ModelSpec{Name: s.name, Exec: s.exec})
		cfg.Streams = append(cfg.Streams, StreamSpec{Name: s.name, Model: s.name, Class: s.class,
			Period: s.period, MaxAge: s.maxAge, FrameInterval: s.frame, Queue: Latest, MinRateHz: s.minRate})
		exec[s.name] = s.exec
	}
	m := newSim(t, cfg, exec)
	m.jitter = true
	for i, s := range streams {
		m.sensor(s.name, time.Duration(i)*3*ms, s.frame)
	}
	m.run(Time(dur))
	res := scenarioResult{cov: map[string]CoverageResult{}, stats: map[string]StreamStats{}}
	for _, s := range streams {
		res.cov[s.name] = Coverage(0, Time(dur), s.period, s.maxAge, m.deliv[s.name])
		res.stats[s.name] = m.h.stats(s.name)
		st := res.stats[s.name]
		t.Logf("%-8s coverage %4d/%4d  %+v budget runs %d cost %d blocked %d", s.name,
			res.cov[s.name].Covered, res.cov[s.name].Windows, st.Counters, st.BudgetRuns, st.BudgetCost, st.BudgetBlocked)
	}
	return res
}

func scenarioB(vlmRate float64) []scenarioStream {
	return []scenarioStream{
		{"detector", Protected, 50 * ms, 50 * ms, 50 * ms, 8 * ms, 0},
		{"pose", High, 33 * ms, 33 * ms, 66 * ms, 5 * ms, 0},
		{"depth", High, 33 * ms, 33 * ms, 100 * ms, 10 * ms, 0},
		{"vlm", BestEffort, 1000 * ms, 1000 * ms, 2000 * ms, 200 * ms, vlmRate},
	}
}

func full(t *testing.T, r scenarioResult, names ...string) {
	t.Helper()
	for _, n := range names {
		if c := r.cov[n]; c.Covered != c.Windows {
			t.Errorf("%s coverage %d/%d, want every window", n, c.Covered, c.Windows)
		}
	}
}

func TestScenarioAOverload(t *testing.T) {
	// Sensors demand ~141 % of the slot; the contracts ~52 %. LATEST queues
	// and class order cover every protected and high window.
	r := runScenario(t, 1, []scenarioStream{
		{"detector", Protected, 33 * ms, 50 * ms, 50 * ms, 12 * ms, 0},
		{"pose", High, 33 * ms, 100 * ms, 100 * ms, 8 * ms, 0},
		{"depth", High, 33 * ms, 100 * ms, 150 * ms, 20 * ms, 0},
		{"vlm", BestEffort, 1000 * ms, 1000 * ms, 2000 * ms, 200 * ms, 0},
	}, 20*time.Second)
	full(t, r, "detector", "pose", "depth")
	if r.stats["depth"].Superseded == 0 {
		t.Error("overload without supersession: the scenario is not overloaded")
	}
}

func TestScenarioBStarvesVLMWithoutBudget(t *testing.T) {
	r := runScenario(t, 1, scenarioB(0), 20*time.Second)
	full(t, r, "detector", "pose", "depth")
	if vlm := r.stats["vlm"]; vlm.Forwarded != 0 || vlm.Deferred != vlm.Received {
		t.Errorf("vlm %+v: want deferred every time, never run", vlm.Counters)
	}
}

func TestScenarioBBudgetedVLM(t *testing.T) {
	r := runScenario(t, 1, scenarioB(0.2), 20*time.Second)
	vlm, det := r.stats["vlm"], r.stats["detector"]
	if vlm.Forwarded < 3 || vlm.BudgetRuns != vlm.Forwarded || vlm.BudgetCost == 0 {
		t.Errorf("vlm %+v, budget runs %d, cost %d", vlm.Counters, vlm.BudgetRuns, vlm.BudgetCost)
	}
	// The cost is real and bounded: a few detector windows per VLM run.
	c := r.cov["detector"]
	if c.Covered == c.Windows || c.Windows-c.Covered > 5*int(vlm.BudgetRuns) {
		t.Errorf("detector coverage %d/%d with %d budget runs", c.Covered, c.Windows, vlm.BudgetRuns)
	}
	if det.LateDropped != det.BudgetBlocked {
		t.Errorf("detector late drops %d, %d attributed to the budget", det.LateDropped, det.BudgetBlocked)
	}
}

func TestScenarioCTwoSlots(t *testing.T) {
	// Plenty of headroom: nothing may be dropped, deferred or superseded.
	r := runScenario(t, 2, scenarioB(0), 20*time.Second)
	full(t, r, "detector", "pose", "depth", "vlm")
	for n, st := range r.stats {
		if st.Superseded+st.LateDropped+st.Deferred+st.Rejected != 0 {
			t.Errorf("%s: %+v", n, st.Counters)
		}
	}
}
