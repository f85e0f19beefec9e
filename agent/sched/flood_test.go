package sched

import (
	"testing"
	"time"
)

// A sensor that sends faster than its contract (period_ms) gets one
// guaranteed result per window; its other frames are extras, ranked as
// best_effort (doc.go, Extra frames).

// detPose is one slot with a protected detector (50 ms windows) and a high
// pose stream (33 ms windows), both on the grid told at 0.
func detPose() Config {
	return Config{
		Slots:        1,
		SafetyMargin: DefaultMargin,
		Models:       []ModelSpec{{Name: "det", Exec: 8 * ms}, {Name: "pose", Exec: 5 * ms}},
		Streams: []StreamSpec{
			{Name: "detector", Model: "det", Class: Protected, Period: 50 * ms, MaxAge: 50 * ms, Queue: Latest, WindowAligned: true},
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest, WindowAligned: true},
		},
	}
}

func TestExtraYieldsToContractedFrame(t *testing.T) {
	h := newHarness(t, detPose())
	d0, acts := h.arrive("detector", 0) // covers the detector's window [0, 50)
	mustDispatch(t, acts, d0)
	h.set(at(8))
	h.complete(d0, true)
	h.set(at(10))
	p0, acts := h.arrive("pose", 0) // the next pose frame is due at 43
	mustDispatch(t, acts, p0)
	h.set(at(15))
	h.complete(p0, true)

	// An extra (its window is covered) that would end before the next
	// pose frame: the slot is idle otherwise, so it runs.
	h.set(at(20))
	d1, acts := h.arrive("detector", 0)
	mustDispatch(t, acts, d1)
	h.set(at(28))
	h.complete(d1, true)

	// An extra that would still run (8.8 ms with margin) when the pose
	// frame comes at 43. Pose would meet its window even behind it, but
	// an extra takes nothing a contracted frame could use: it waits.
	h.set(at(36))
	d2, acts := h.arrive("detector", 0)
	mustNothing(t, acts, d2)
	if st := h.stats("detector"); st.Yielded != 1 || st.Waiting != 1 {
		t.Fatalf("detector %+v, yielded %d", st.Counters, st.Yielded)
	}
	if w, ok := h.s.NextWake(); !ok || w > at(43)+Time(defaultCommitLead)+1 {
		t.Fatalf("NextWake %v %v: the extra must be re-evaluated once the pose frame is overdue", time.Duration(w), ok)
	}
	h.set(at(43))
	p1, acts := h.arrive("pose", 0)
	if a := mustDispatch(t, acts, p1); a.Waited != 0 || a.Queued {
		t.Fatalf("pose dispatch %+v: want started on arrival", a)
	}
	// LATEST is unchanged for extras: a newer frame supersedes the waiting one.
	h.set(at(45))
	_, acts = h.arrive("detector", 0)
	mustAnswer(t, acts, d2, Aborted, Superseded)
}

func TestExtraStillServedWhenIdle(t *testing.T) {
	// Work conserving: a stream alone at 10× its contract is served as
	// often as the accelerator can.
	cfg := detPose()
	cfg.Streams = cfg.Streams[:1]
	m := newSim(t, cfg, map[string]time.Duration{"det": 8 * ms})
	m.sensor("detector", 0, 5*ms)
	m.run(Time(time.Second))
	c := Coverage(0, Time(time.Second), 50*ms, 50*ms, m.deliv["detector"])
	if c.Covered != c.Windows {
		t.Errorf("detector coverage %d/%d", c.Covered, c.Windows)
	}
	// 8 ms jobs back to back on one slot: ~5 per 50 ms window.
	if st := m.h.stats("detector"); st.Forwarded < 4*uint64(c.Windows) {
		t.Errorf("detector alone: %d forwarded in %d windows, want the idle slot used", st.Forwarded, c.Windows)
	}
}

// floodB runs scenario B on the fake clock with stream flooder's sensor at
// factor times its contracted frame rate (the contract unchanged), and
// returns each stream's coverage and longest wait in vig.
func floodB(t *testing.T, flooder string, factor int) (map[string]CoverageResult, map[string]time.Duration, map[string]StreamStats) {
	t.Helper()
	const dur = 20 * time.Second
	streams := scenarioB(0)
	cfg := Config{Slots: 1, SafetyMargin: DefaultMargin}
	exec := map[string]time.Duration{}
	for _, s := range streams {
		cfg.Models = append(cfg.Models, ModelSpec{Name: s.name, Exec: s.exec})
		cfg.Streams = append(cfg.Streams, StreamSpec{Name: s.name, Model: s.name, Class: s.class,
			Period: s.period, MaxAge: s.maxAge, FrameInterval: s.frame, Queue: Latest})
		exec[s.name] = s.exec
	}
	m := newSim(t, cfg, exec)
	m.jitter = true
	for i, s := range streams {
		every := s.frame
		if s.name == flooder {
			every /= time.Duration(factor)
		}
		m.sensor(s.name, time.Duration(i)*3*ms, every)
	}
	m.run(Time(dur))
	cov, stats := map[string]CoverageResult{}, map[string]StreamStats{}
	for _, s := range streams {
		cov[s.name] = Coverage(0, Time(dur), s.period, s.maxAge, m.deliv[s.name])
		stats[s.name] = m.h.stats(s.name)
		t.Logf("%s ×%d: %-8s coverage %4d/%4d longest wait %v %+v", flooder, factor, s.name,
			cov[s.name].Covered, cov[s.name].Windows, m.waited[s.name], stats[s.name].Counters)
	}
	return cov, m.waited, stats
}

func TestFloodingProtectedLeavesHighItsCoverage(t *testing.T) {
	_, base, _ := floodB(t, "", 1)
	cov, waited, stats := floodB(t, "detector", 10)
	for _, n := range []string{"detector", "pose", "depth"} {
		if c := cov[n]; c.Covered != c.Windows {
			t.Errorf("%s coverage %d/%d with the detector at 10×", n, c.Covered, c.Windows)
		}
	}
	// The detector's extras take nothing from pose and depth: neither
	// waits in vig longer than when the detector keeps its contract. A job
	// committed behind a running one is dispatched when that job may end
	// within CommitLead (its p10, learnt), so its recorded wait moves by up
	// to CommitLead with the estimates the two runs learnt.
	for _, n := range []string{"pose", "depth"} {
		if waited[n] > base[n]+defaultCommitLead {
			t.Errorf("%s waited up to %v with the detector at 10×, %v without", n, waited[n], base[n])
		}
	}
	// Work conserving: the detector gets more than its contract where the
	// slot has room.
	if det := stats["detector"]; det.Forwarded <= uint64(cov["detector"].Windows) {
		t.Errorf("detector forwarded %d in %d windows: extras never served", det.Forwarded, cov["detector"].Windows)
	}
}

func TestFloodingHighLeavesProtectedAndPeers(t *testing.T) {
	_, base, _ := floodB(t, "", 1)
	cov, waited, _ := floodB(t, "pose", 10)
	for _, n := range []string{"detector", "pose", "depth"} {
		if c := cov[n]; c.Covered != c.Windows {
			t.Errorf("%s coverage %d/%d with pose at 10×", n, c.Covered, c.Windows)
		}
	}
	for _, n := range []string{"detector", "depth"} {
		if waited[n] > base[n] {
			t.Errorf("%s waited up to %v with pose at 10×, %v without", n, waited[n], base[n])
		}
	}
}

func TestProtectedExtraIsAdmitted(t *testing.T) {
	// Two protected streams. The detector's window [50, 150) is covered,
	// so its next frame is an extra, and an extra is admitted like a
	// best_effort job: it may not make the lidar's frame miss.
	h := newHarness(t, Config{
		Slots:        1,
		SafetyMargin: DefaultMargin,
		Models:       []ModelSpec{{Name: "det", Exec: 8 * ms}, {Name: "lidar", Exec: 10 * ms}},
		Streams: []StreamSpec{
			{Name: "detector", Model: "det", Class: Protected, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest,
				WindowAligned: true, WindowOffset: 50 * ms},
			{Name: "lidar", Model: "lidar", Class: Protected, Period: 100 * ms, MaxAge: 20 * ms, Queue: Latest, WindowAligned: true},
		},
	})
	l0, acts := h.arrive("lidar", 0)
	mustDispatch(t, acts, l0)
	h.set(at(10))
	h.complete(l0, true)
	h.set(at(60))
	d0, acts := h.arrive("detector", 0)
	mustDispatch(t, acts, d0)
	h.set(at(68))
	h.complete(d0, true)

	// The lidar frame captured at 100 is late to vig but can still make
	// its deadline (120) if it starts by 109; the extra (8.8 ms with
	// margin) started at 103 would hold the slot until 111.8.
	h.set(at(103))
	d1, acts := h.arrive("detector", 0)
	mustNothing(t, acts, d1)
	if st := h.stats("detector"); st.Deferred != 1 {
		t.Fatalf("detector %+v: want its extra deferred", st.Counters)
	}
	h.set(at(104))
	l1, acts := h.arrive("lidar", at(100))
	mustDispatch(t, acts, l1)
	mustNothing(t, acts, d1)
	h.set(at(114))
	acts = h.complete(l1, true)
	mustDispatch(t, acts, d1) // nothing left to protect: the slot would idle
	if st := h.stats("lidar"); st.LateDropped != 0 || st.Forwarded != 2 {
		t.Fatalf("lidar %+v", st.Counters)
	}
}
