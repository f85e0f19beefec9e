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
	seed  int64  // the configured factor, per mille
	n     uint64 // jobs measured that started while another accelerator ran one
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
func (s *Scheduler) coAt(start Time) bool { return s.ifr.front != nil && s.ifr.until > start }

// coScale is c, a solo duration, for a job starting at start: × the
// accelerator's factor when it would co-run.
func (s *Scheduler) coScale(c time.Duration, start Time) time.Duration {
	if s.coAt(start) && s.ifr.pm != 1000 {
		return time.Duration(int64(c) * s.ifr.pm / 1000)
	}
	return c
}

// measured reports whether w holds at least half a window of measurements.
func measured(w *window) bool { return 2*w.real >= len(w.ring) }

// coEstimate is the estimate of model m's job started beside another
// accelerator's at occupancy occ, without margin: the p90 of its co-run
// window (seeded with its prior × the configured factor), unless it ran
// alone often enough to be measured so and not co-running: then its solo
// estimate × the factor.
func (m *model) coEstimate(occ int) time.Duration {
	if measured(&m.est[occ]) && !measured(&m.co[occ]) {
		return max(time.Duration(int64(m.est[occ].p90)*m.pm/1000), m.backendMean)
	}
	return max(m.co[occ].p90, m.backendMean)
}

// quantile is q (e.g. the fastest) of the execution times of a job of
// model m started at start under occupancy occ: from the window its price
// comes from (co-running or alone), scaled by the factor when that window
// is the other one (see estimate and coEstimate).
func (s *Scheduler) quantile(m *model, occ int, start Time, q func(*window) time.Duration) time.Duration {
	if m.co == nil {
		return q(&m.est[occ])
	}
	so, co := &m.est[occ], &m.co[occ]
	if s.coAt(start) {
		if measured(so) && !measured(co) {
			return time.Duration(int64(q(so)) * m.pm / 1000)
		}
		return q(co)
	}
	if !measured(so) && measured(co) {
		return time.Duration(int64(q(co)) * 1000 / m.pm)
	}
	return q(so)
}

// coCost is the margin-scaled estimate of a job of model mi started beside
// another accelerator's at occupancy occ.
func (s *Scheduler) coCost(mi int32, occ int) time.Duration {
	m := &s.models[mi]
	if m.spec.Exclusive || occ < 0 {
		occ = 0
	}
	if occ >= s.slots {
		occ = s.slots - 1
	}
	return m.cocosts[occ]
}

// costAt is the margin-scaled estimate of a job of model mi started at
// start under occupancy occ, with the interference it would meet.
func (s *Scheduler) costAt(mi int32, occ int, start Time) time.Duration {
	if s.coAt(start) {
		return s.coCost(mi, occ)
	}
	return s.cost(mi, occ)
}

// costNAt is costAt for a job of n frames (a batch: its cost × the factor).
func (s *Scheduler) costNAt(mi int32, occ, n int, start Time) time.Duration {
	if n <= 1 {
		return s.costAt(mi, occ, start)
	}
	return s.coScale(s.costN(mi, occ, n), start)
}

// estimateAt is the expected execution time (no margin) of a job of n
// frames of model m started at start under occupancy occ.
func (s *Scheduler) estimateAt(m *model, occ, n int, start Time) time.Duration {
	if n <= 1 && s.coAt(start) {
		return m.coEstimate(occ)
	}
	return s.coScale(m.estimateN(occ, n), start)
}

// learn takes the execution time d of request r, its job of n frames of
// model m. A job that started while another accelerator ran one goes to
// its model's co-run window, never to the solo one (a batch: to its size's
// window less the factor); any other to the solo window. Neither window is
// fed from the other, so the factor, derived from them, cannot drift on
// its own measurements.
func (s *Scheduler) learn(m *model, r *request, n int, d time.Duration) {
	if r.coStart && m.co != nil {
		s.ifr.n++
		if n > 1 {
			m.learnBatch(int(r.occ), n, time.Duration(int64(d)*1000/s.ifr.pm), s.margin)
			return
		}
		m.co[r.occ].add(d)
	} else if m.maxBatch > 1 {
		m.learnBatch(int(r.occ), n, d, s.margin)
	} else {
		m.est[r.occ].add(d)
	}
	if m.co == nil || !measured(&m.est[r.occ]) || !measured(&m.co[r.occ]) {
		// The factor depends only on pairs of measured windows.
		m.refresh(s.margin)
		return
	}
	s.refit(m)
}

// minLearntPM is the smallest factor learnt (per mille) taken as one: the
// ratio of two medians of jittery windows strays by a few percent, and a
// factor above 1 makes admission look across accelerators.
const minLearntPM = 1050

// refit recomputes the accelerator's factor after a measurement of model
// m: the median co-run time over the median solo time, averaged over the
// (model, occupancy) windows where both hold half a window of
// measurements, weighted by the fewer (below 1.05: none); the config's
// factor until one does.
// A model that always co-runs cannot tell its own time from the slowdown:
// it is priced by what it measures co-running, and alone at that less the
// factor.
func (s *Scheduler) refit(m *model) {
	var sum, w int64
	for i := range s.models {
		mi := &s.models[i]
		for o := range mi.co {
			so, co := &mi.est[o], &mi.co[o]
			if !measured(so) || !measured(co) || so.p50 <= 0 {
				continue
			}
			k := int64(min(so.real, co.real))
			sum += k * min(max(int64(co.p50)*1000/int64(so.p50), 1000), 1000*maxInterference)
			w += k
		}
	}
	pm := s.ifr.seed
	if w > 0 {
		if pm = sum / w; pm < minLearntPM {
			pm = 1000 // within the noise of two medians: none
		}
	}
	if pm == s.ifr.pm {
		m.refresh(s.margin)
		return
	}
	s.ifr.pm = pm
	for i := range s.models {
		s.models[i].pm = pm
		s.models[i].refresh(s.margin)
	}
}

// initCo sets up interference on an engine of the front: the configured
// factor, and every model's co-run windows seeded with its prior × it.
func (s *Scheduler) initCo(front *Scheduler, part int32, seed float64) {
	pm := factorPM(seed)
	s.ifr = interference{front: front, part: part, pm: pm, seed: pm}
	w := s.cfg.EstimatorWindow
	buf := make([]int64, len(s.models)*s.slots*2*w)
	for i := range s.models {
		m := &s.models[i]
		m.pm = pm
		m.co = make([]window, s.slots)
		m.cocosts = make([]time.Duration, s.slots)
		for o := range m.co {
			m.co[o].init(buf[:2*w:2*w], time.Duration(int64(m.spec.Exec)*pm/1000))
			buf = buf[2*w:]
		}
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

// coProtects reports whether jobs elsewhere are admitted against this
// accelerator's protected work: it has some, and a factor above 1 that the
// config declared (learnt since, perhaps) — a factor learnt on a device
// configured without interference only prices jobs, so the noise of its
// measurements never defers one.
func (s *Scheduler) coProtects() bool {
	return s.ifr.seed > 1000 && s.ifr.pm > 1000 && len(s.protected) > 0
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
		if e := f.accels[q].e; int32(q) != s.ifr.part && e != nil && e.coProtects() {
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
	if f == nil || !s.coProtects() {
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
		if int32(q) == s.ifr.part || e == nil || !e.coProtects() {
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
	if fs.Add(c) > dl || fs.Add(s.coCost(p.model, occ)) <= dl {
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
