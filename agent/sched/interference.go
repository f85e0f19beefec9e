package sched

import "time"

// Interference between accelerators (AcceleratorSpec.Interference; see More
// than one kind of accelerator in doc.go). The accelerators of one device
// share its memory bandwidth: a job takes longer while another accelerator
// runs one. Each engine prices a job with its accelerator's factor when
// another accelerator has a job at the backend (running or committed) past
// the job's start, learns that factor from the jobs that started so, and
// keeps them out of its solo estimates.

// interference is an engine's view of the other accelerators, kept by the
// front; the zero value (one accelerator) assumes none.
type interference struct {
	front *Scheduler // nil on one accelerator
	part  int32      // this engine's accelerator in the front
	// until is the latest predicted end of a job at the backend on another
	// accelerator, as of the engine's current event (syncCo).
	until Time
	pm    int64  // the factor in use, per mille (≥ 1000)
	win   window // the factors measured (per mille), seeded by the config
	n     uint64 // samples learnt from co-run jobs
}

// factorPM is the config's factor per mille (0 and 1 are none).
func factorPM(f float64) int64 { return max(int64(f*1000+0.5), 1000) }

// syncCo refreshes the engine's view of the other accelerators at now.
func (s *Scheduler) syncCo(now Time) {
	if f := s.ifr.front; f != nil {
		s.ifr.until = f.othersUntil(s.ifr.part, now)
	}
}

// coAt reports whether a job starting at start would co-run: another
// accelerator has a job at the backend predicted to end after start.
func (s *Scheduler) coAt(start Time) bool { return s.ifr.pm > 1000 && s.ifr.until > start }

// coScale is c, a solo cost, for a job starting at start: × the factor when
// it would co-run.
func (s *Scheduler) coScale(c time.Duration, start Time) time.Duration {
	if s.coAt(start) {
		return time.Duration(int64(c) * s.ifr.pm / 1000)
	}
	return c
}

// costAt is the margin-scaled estimate of a job of model mi started at
// start under occupancy occ, with the interference it would meet.
func (s *Scheduler) costAt(mi int32, occ int, start Time) time.Duration {
	return s.coScale(s.cost(mi, occ), start)
}

// costNAt is costAt for a job of n frames.
func (s *Scheduler) costNAt(mi int32, occ, n int, start Time) time.Duration {
	return s.coScale(s.costN(mi, occ, n), start)
}

// learn takes the execution time d of request r (its job of n frames of
// model m, from its observed start to now) into the solo estimate as what
// it would have taken alone. A job that started while another accelerator
// ran one measures the factor: d over the median solo estimate, into a
// window whose median (at least 1) is the factor in use; its solo sample is
// d over the factor it was priced with. Any other job is a solo sample as
// it is: the factor applies to a job by whether another accelerator is busy
// when it starts, as it is priced (on a device whose slowdown follows the
// overlap instead, the factor and the solo estimate absorb the average).
// The factor is measured against jobs that ran alone: while most jobs
// co-run it stays near its seed, and estimate × factor, the price of a
// co-running job, still follows what they measure.
func (s *Scheduler) learn(m *model, r *request, n int, d time.Duration) {
	if r.coStart {
		pm := s.ifr.pm
		if solo := m.win(int(r.occ), n).p50; solo > 0 {
			f := min(max(int64(d)*1000/int64(solo), 1000), 1000*maxInterference)
			s.ifr.win.add(time.Duration(f))
			s.ifr.pm = int64(s.ifr.win.p50)
			s.ifr.n++
		}
		d = time.Duration(int64(d) * 1000 / pm)
	}
	if m.maxBatch > 1 {
		m.learnBatch(int(r.occ), n, d, s.margin)
	} else {
		m.est[r.occ].add(d)
		m.refresh(s.margin)
	}
}

// started records, for a job starting now, whether it co-runs.
func (s *Scheduler) started(r *request) {
	r.coStart = s.ifr.front != nil && s.ifr.front.othersBusy(s.ifr.part)
}

// Factor returns the interference factor in use (1 for none).
func (s *Scheduler) factor() float64 { return float64(s.ifr.pm) / 1000 }

// othersUntil is the latest predicted end of a job at the backend on an
// accelerator other than p, or 0 when they are idle.
func (s *Scheduler) othersUntil(p int32, now Time) Time {
	t := Time(0)
	for q := range s.accels {
		e := s.accels[q].e
		if int32(q) == p || e == nil || e.busy+e.committed == 0 {
			continue
		}
		for i, x := range e.slotRun {
			if x >= 0 || e.slotNext[i] >= 0 {
				t = max(t, e.slotFree(i, now))
			}
		}
	}
	return t
}

// othersBusy reports whether an accelerator other than p runs a job now.
func (s *Scheduler) othersBusy(p int32) bool {
	for q := range s.accels {
		if e := s.accels[q].e; int32(q) != p && e != nil && e.busy > 0 {
			return true
		}
	}
	return false
}
