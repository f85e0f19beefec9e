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

// coScale is c, a solo duration, for a job starting at start: × the
// accelerator's factor when it would co-run.
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

// estimateAt is the expected execution time (no margin) of a job of n
// frames of model m started at start under occupancy occ.
func (s *Scheduler) estimateAt(m *model, occ, n int, start Time) time.Duration {
	return s.coScale(m.estimateN(occ, n), start)
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
//
// The factor is measured against the jobs that ran alone. While too few
// do (under half of a model's samples), it stays near its seed, the solo
// estimate absorbs the rest, and estimate × factor, the price of a
// co-running job, still follows what such jobs measure; but a model that
// always co-runs cannot tell its own time from the slowdown, so the config
// should seed the factor.
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

// coGuards reports whether a job on this engine's accelerator may slow a
// protected job of another: one with a factor above 1 and protected
// streams.
func (s *Scheduler) coGuards() bool {
	f := s.ifr.front
	if f == nil {
		return false
	}
	for q := range f.accels {
		if e := f.accels[q].e; int32(q) != s.ifr.part && e != nil && e.ifr.pm > 1000 && len(e.protected) > 0 {
			return true
		}
	}
	return false
}

// coBudget reports whether a budget job runs on another accelerator that
// slows this one's: protected requests dropped meanwhile count
// BudgetBlocked, as beside a budget job of their own accelerator.
func (s *Scheduler) coBudget() bool {
	f := s.ifr.front
	if f == nil || s.ifr.pm <= 1000 {
		return false
	}
	for q := range f.accels {
		if e := f.accels[q].e; int32(q) != s.ifr.part && e != nil && e.budgetRunning > 0 {
			return true
		}
	}
	return false
}

// coAdmission adds to an admission decision (blocked, misses, recheck) the
// protected work of the other accelerators that a job on this one, from
// start to end, would slow past its deadline when it would be in time
// without it (see More than one kind of accelerator in doc.go). A job so
// blocked is retried at every event of another accelerator (coDeferred) and
// at recheck.
func (s *Scheduler) coAdmission(now, start, end Time, blocked bool, misses uint64, recheck Time) (bool, uint64, Time) {
	f := s.ifr.front
	for q := range f.accels {
		e := f.accels[q].e
		if int32(q) == s.ifr.part || e == nil || e.ifr.pm <= 1000 || len(e.protected) == 0 {
			continue
		}
		b, m, rc := e.coSlowed(now, start, end, f.othersUntil(int32(q), now))
		if b {
			blocked, misses, recheck = true, misses+m, min(recheck, rc)
			s.coDeferred = true
		}
	}
	return blocked, misses, recheck
}

// coSlowed counts the protected jobs and frames of this accelerator that a
// job of another, running from start to end, would push past their
// deadlines by this accelerator's factor, when each meets it without that
// job; base is the latest predicted end of the jobs already at the backend
// on the other accelerators (work that overlaps them co-runs anyway). A job
// running here is slowed over its overlap with the other job (its rest runs
// at 1/factor of its speed until end); a job committed here, and a
// protected frame predicted to start, before end take × factor. It returns
// when to re-evaluate: the earliest end of a running job it guards, or the
// instant a guarded frame can no longer meet its deadline anyway.
func (s *Scheduler) coSlowed(now, start, end, base Time) (blocked bool, misses uint64, recheck Time) {
	pm := s.ifr.pm
	recheck = Never
	for i := range s.slotRun {
		for k, x := range [2]int32{s.slotRun[i], s.slotNext[i]} {
			if x < 0 {
				continue
			}
			r := &s.reqs[x]
			dl := s.protectedDeadline(x)
			if r.coPriced || dl == Never || r.predEnd > dl {
				continue
			}
			var slowed Time
			if k == 0 {
				os := max(start, now, base)
				rest, span := int64(r.predEnd-os), int64(end-os)
				if rest <= 0 || span <= 0 {
					continue
				}
				if rest*pm/1000 <= span {
					slowed = os + Time(rest*pm/1000)
				} else {
					slowed = end + Time(rest-span*1000/pm)
				}
			} else {
				if r.start >= end || base > r.start {
					continue
				}
				slowed = r.start + Time(int64(r.predEnd-r.start)*pm/1000)
			}
			if slowed > dl {
				blocked, misses = true, misses+1
				recheck = min(recheck, max(s.reqs[s.slotRun[i]].predEnd, now+1))
			}
		}
	}
	for _, pi := range s.protected {
		p := &s.streams[pi]
		if !p.seen || now.Sub(p.lastCapture) > 2*p.interval+p.maxAge {
			continue
		}
		c0 := s.cost(p.model, 0)
		if len(p.q) > 0 {
			h := &s.reqs[p.q[0]]
			if b, rc := s.coFrame(now, h.capture, h.deadline, p, end, base); b {
				blocked, misses, recheck = true, misses+1, min(recheck, rc)
			}
		}
		iv := int64(p.interval)
		k := int64(1)
		if need := int64(now.Add(c0)-p.lastCapture) - int64(p.maxAge); need > 0 {
			k = max(k, (need+iv-1)/iv)
		}
		for n := 0; n < 4; n, k = n+1, k+1 {
			a := p.lastCapture + Time(k*iv)
			if a >= end {
				break
			}
			if b, rc := s.coFrame(now, a, a.Add(p.maxAge), p, end, base); b {
				blocked, misses, recheck = true, misses+1, min(recheck, rc)
			}
		}
	}
	return blocked, misses, recheck
}

// coFrame reports whether a frame of protected stream p arriving at a with
// deadline dl, predicted to start here before end and alone, meets dl alone
// but not × the factor; and when that stops mattering (it cannot meet dl
// alone any more).
func (s *Scheduler) coFrame(now, a, dl Time, p *stream, end, base Time) (bool, Time) {
	fs, occ := s.earliestStart(now, a, p.model, -1, 0, false, false)
	if fs >= end || base > fs {
		return false, 0 // it starts after the job, or co-runs anyway
	}
	c := s.cost(p.model, occ)
	if fs.Add(c) > dl || fs.Add(time.Duration(int64(c)*s.ifr.pm/1000)) <= dl {
		return false, 0
	}
	return true, dl - Time(c) + 1
}

// protectedDeadline is the earliest deadline of the protected requests of
// the job led by ri (a batch's members too), or Never.
func (s *Scheduler) protectedDeadline(ri int32) Time {
	dl := Never
	for x := ri; x >= 0; x = s.reqs[x].bnext {
		r := &s.reqs[x]
		if s.streams[r.stream].class == Protected {
			dl = min(dl, r.deadline)
		}
	}
	return dl
}
