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
