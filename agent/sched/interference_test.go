package sched

import (
	"math"
	"testing"
	"time"
)

// jetson is a GPU and one DLA core with the given interference factors:
// pose (10 ms) on the GPU, lane (20 ms) on the DLA.
func jetson(gpuF, dlaF float64) Config {
	return Config{
		Accelerators: []AcceleratorSpec{{Name: "gpu", Slots: 1, Interference: gpuF}, {Name: "dla0", Slots: 1, Interference: dlaF}},
		SafetyMargin: Margin(100),
		Models: []ModelSpec{
			{Name: "pose", Exec: 10 * ms, Accelerator: "gpu"},
			{Name: "lane", Exec: 20 * ms, Accelerator: "dla0"},
		},
		Streams: []StreamSpec{
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest},
			{Name: "lane", Model: "lane", Class: High, Period: 50 * ms, MaxAge: 100 * ms, Queue: Latest},
		},
	}
}

// predEnd is the end the scheduler predicts for a dispatched token.
func predEnd(t *testing.T, s *Scheduler, tok uint64) Time {
	t.Helper()
	p := s.partOfToken(tok)
	if p < 0 {
		t.Fatalf("token %d not at the backend", tok)
	}
	e := s.accels[p].e
	return e.reqs[e.tokens.get(tok)].predEnd
}

// A GPU job that starts while the DLA runs one is priced × the GPU's
// factor; one that starts on an idle device, or after the DLA job's
// predicted end, is not; and a frame that fits alone but not × the factor
// is late-dropped while the DLA runs. Without interference configured the
// co-running job is priced alone.
func TestInterferenceEstimateCoRunning(t *testing.T) {
	h := newHarness(t, jetson(1.3, 1))
	h.set(at(1000))
	pose, acts := h.arrive("pose", 0)
	mustDispatch(t, acts, pose)
	if got := predEnd(t, h.s, pose); got != at(1010) {
		t.Fatalf("pose alone: predicted end %v, want 1010 ms", time.Duration(got))
	}
	h.set(at(1010))
	h.complete(pose, true)
	lane, acts := h.arrive("lane", 0) // 20 ms on the DLA: until 1030
	mustDispatch(t, acts, lane)
	h.set(at(1011))
	pose, acts = h.arrive("pose", 0)
	mustDispatch(t, acts, pose)
	if got := predEnd(t, h.s, pose); got != at(1024) {
		t.Fatalf("pose beside the DLA job: predicted end %v, want 1024 ms (10 ms × 1.3)", time.Duration(got))
	}
	// The DLA job's predicted end is ahead; a pose frame of max_age 12 ms
	// fits alone (10 ms) but not beside it (13 ms).
	h.set(at(1024))
	h.complete(pose, true)
	cfg := jetson(1.3, 1)
	cfg.Streams[0].MaxAge = 12 * ms
	for _, f := range []float64{1.3, 0} {
		cfg.Accelerators[0].Interference = f
		h := newHarness(t, cfg)
		h.set(at(1000))
		lane, acts := h.arrive("lane", 0)
		mustDispatch(t, acts, lane)
		h.set(at(1001))
		pose, acts := h.arrive("pose", 0)
		if f > 0 {
			mustAnswer(t, acts, pose, DeadlineExceeded, LateDropped)
		} else {
			mustDispatch(t, acts, pose)
		}
	}
	var snap Snapshot
	h.s.Snapshot(h.now, &snap)
	if g, d := snap.Accelerators[0].Interference, snap.Accelerators[1].Interference; g != 1.3 || d != 1 {
		t.Fatalf("snapshot interference gpu %v dla %v, want the seeds 1.3 and 1", g, d)
	}
}

// The factor is learnt from the jobs that start while another accelerator
// runs one, against the solo estimate, which they do not raise: a backend
// that really slows co-running jobs (GPU ×1.5, DLA ×1.2) and a config
// that assumes none (GPU) or too much (DLA 1.4).
func TestInterferenceLearnsMeasuredFactor(t *testing.T) {
	m := newTritonSim(t, jetson(0, 1.4), map[string]time.Duration{"pose": 10 * ms, "lane": 20 * ms},
		map[string]float64{"gpu": 1.5, "dla0": 1.2})
	m.sensor("pose", 0, 33*ms)
	m.sensor("lane", 5*ms, 50*ms)
	m.run(at(20000))
	var snap Snapshot
	m.h.s.Snapshot(m.h.now, &snap)
	for i, want := range []float64{1.5, 1.2} {
		a := snap.Accelerators[i]
		if math.Abs(a.Interference-want) > 0.02*want || a.InterferenceSamples < 100 {
			t.Errorf("%s: learnt %.3f from %d co-run jobs, want %.2f (true) from ≥ 100", a.Name, a.Interference, a.InterferenceSamples, want)
		}
	}
	for model, solo := range map[string]time.Duration{"pose": 10 * ms, "lane": 20 * ms} {
		if est, _ := m.h.s.Estimate(model, 0); est < solo*95/100 || est > solo*105/100 {
			t.Errorf("%s: solo estimate %v, want %v ± 5%% (co-run jobs kept out)", model, est, solo)
		}
	}
	if m.coRun["pose"] < 100 || m.started["pose"]-m.coRun["pose"] < 100 {
		t.Errorf("pose: %d jobs, %d co-running: the mix does not show anything", m.started["pose"], m.coRun["pose"])
	}
}

// crossCfg is a protected detector on dla0 (20 ms, max_age 22 ms: just in
// time alone) and a high pose stream on the GPU (10 ms), no margin; the
// DLA's jobs take dlaF longer while the GPU runs one.
func crossCfg(dlaF float64, poseMinRate float64) Config {
	return Config{
		Accelerators: []AcceleratorSpec{{Name: "gpu", Slots: 1}, {Name: "dla0", Slots: 1, Interference: dlaF}},
		SafetyMargin: Margin(100),
		Models: []ModelSpec{
			{Name: "detector", Exec: 20 * ms, Accelerator: "dla0"},
			{Name: "pose", Exec: 10 * ms, Accelerator: "gpu"},
		},
		Streams: []StreamSpec{
			{Name: "detector", Model: "detector", Class: Protected, Period: 33 * ms, MaxAge: 22 * ms, Queue: Latest},
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest, MinRateHz: poseMinRate},
		},
	}
}

// An interference factor that makes a protected frame late defers the job
// that would cause it: the detector's frame runs on dla0 just in time
// alone (1000–1020 ms, deadline 1022 ms); a GPU job arriving at 1001 ms
// would slow its last 19 ms by 1.3 over its 10 ms and end it at 1022.3 ms,
// so the GPU job waits, idle GPU and all, and starts when the DLA job ends
// (or once what is left of it is too short to be pushed late).
// With no factor on the DLA it starts at once; so it does with its
// min_rate_hz budget owed (counted as a budget run costing one frame).
func TestInterferenceProtectedFrameDefersCoRunningJob(t *testing.T) {
	h := newHarness(t, crossCfg(1.3, 0))
	h.set(at(1000))
	det, acts := h.arrive("detector", 0)
	if a := mustDispatch(t, acts, det); a.Slot != 1 {
		t.Fatalf("detector: %s, want dla0's slot 1", fmtAct(a))
	}
	h.set(at(1001))
	pose, acts := h.arrive("pose", 0)
	mustNothing(t, acts, pose)
	if st := h.stats("pose"); st.Deferred != 1 || st.Waiting != 1 {
		t.Fatalf("pose: %+v, want deferred and waiting", st.Counters)
	}
	if w, ok := h.s.NextWake(); !ok || w > at(1020) {
		t.Fatalf("NextWake %v, want by the DLA job's predicted end (1020 ms)", time.Duration(w))
	}
	h.set(at(1010))
	mustNothing(t, h.tick(), pose) // 1010–1020 slowed over 10 ms: 1022.3
	// The detector's job ends early: the GPU job starts then, on the
	// DLA's Complete (an event of another accelerator).
	h.set(at(1012))
	acts = h.complete(det, true)
	if a := mustDispatch(t, acts, pose); a.Slot != 0 || a.Budget {
		t.Fatalf("pose: %s, want the GPU's slot 0 once the DLA job ended", fmtAct(a))
	}

	for _, tc := range []struct {
		name    string
		cfg     Config
		budget  bool
		wantRun bool
	}{
		{"no factor", crossCfg(0, 0), false, true},
		{"factor 1.05", crossCfg(1.05, 0), false, true}, // 19 ms slowed over 10 ms: 1020.5, in time
		{"budget owed", crossCfg(1.3, 1), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			h.set(at(1000))
			h.arrive("detector", 0)
			h.set(at(1001))
			pose, acts := h.arrive("pose", 0)
			a := mustDispatch(t, acts, pose)
			if a.Budget != tc.budget {
				t.Fatalf("pose: %s, budget %v, want %v", fmtAct(a), a.Budget, tc.budget)
			}
			if st := h.stats("pose"); tc.budget && (st.BudgetRuns != 1 || st.BudgetCost != 1) {
				t.Fatalf("pose: budget runs %d cost %d, want 1 and 1", st.BudgetRuns, st.BudgetCost)
			}
			if !tc.budget {
				return
			}
			// A detector frame late-dropped while the GPU's budget job
			// runs (captured at 1010, the DLA busy until 1020: 1040 >
			// 1032) counts BudgetBlocked, as beside a budget job on the
			// DLA itself.
			h.set(at(1010))
			det, acts := h.arrive("detector", at(1010))
			mustAnswer(t, acts, det, DeadlineExceeded, LateDropped)
			if st := h.stats("detector"); st.BudgetBlocked != 1 {
				t.Fatalf("detector: budget blocked %d, want 1", st.BudgetBlocked)
			}
		})
	}
}

// In a simulation where the DLA's jobs take 1.3× when they start while
// the GPU runs one (the mock backend's rule), GPU jobs timed to overlap
// the detector's frames would make every one of them stale (26 ms against
// a max_age of 25 ms). Admission across accelerators defers them past the
// frames' starts: every detector window is covered, and pose still runs
// every window.
func TestInterferenceSimProtectedCoverage(t *testing.T) {
	cfg := crossCfg(1.3, 0)
	cfg.SafetyMargin = DefaultMargin
	cfg.Streams[0].MaxAge = 25 * ms
	m := newTritonSim(t, cfg, map[string]time.Duration{"detector": 20 * ms, "pose": 10 * ms},
		map[string]float64{"gpu": 1, "dla0": 1.3})
	m.sensor("detector", 0, 33*ms)
	m.sensor("pose", 28*ms, 33*ms)
	m.run(at(10000))
	det := Coverage(at(100), at(9900), 33*ms, 25*ms, m.deliv["detector"])
	pose := Coverage(at(100), at(9900), 33*ms, 100*ms, m.deliv["pose"])
	if det.Ratio() < 1 || m.coRun["detector"] > 0 {
		t.Errorf("detector coverage %.3f with %d of %d jobs started beside a GPU job, want 1 and none", det.Ratio(), m.coRun["detector"], m.started["detector"])
	}
	if pose.Ratio() < 0.99 {
		t.Errorf("pose coverage %.3f, want ≥ 0.99 (deferred, not starved)", pose.Ratio())
	}
}
