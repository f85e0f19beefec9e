package sched

import "time"

// admission decides whether placing a job of cost c on slot at start (now
// for a free slot, the running job's predicted end for a commit, or when the
// accelerator empties for an exclusive job) would make a protected frame
// miss its target — its deadline, or under OrderLaxity the end of the window
// it would cover if that is earlier — because every slot it could use is
// then busy, when it would not miss without the job. The frames guarded are
// each protected stream's waiting request and its next predicted frames. It
// returns how many protected frames the job would cost and when the decision
// must be re-evaluated if nothing else happens.
func (s *Scheduler) admission(now, start Time, slot int, self int32, excl bool, c time.Duration) (blocked bool, misses uint64, recheck Time) {
	endJ := start.Add(c)
	recheck = Never
	for _, pi := range s.protected {
		p := &s.streams[pi]
		if pi == self || !p.seen {
			continue
		}
		c0 := s.cost(p.model, 0)
		if c0 > p.maxAge {
			continue // unreachable whatever we do
		}
		cl := int64(0)
		if s.cfg.Order == OrderLaxity {
			cl = s.claimed(p)
		}
		if len(p.q) > 0 {
			h := &s.reqs[p.q[0]]
			if b, rc := s.guard(now, p, cl, h.capture, h.deadline, slot, endJ, excl); b {
				blocked = true
				misses++
				recheck = min(recheck, rc)
			}
		}
		iv := int64(p.interval)
		if now.Sub(p.lastCapture) > 2*p.interval+p.maxAge {
			continue // the sensor stopped: do not guard phantom frames
		}
		// First frame k ≥ 1 after the last one received that can still
		// make its deadline when started at once on an idle accelerator.
		k := int64(1)
		if need := int64(now.Add(c0)-p.lastCapture) - int64(p.maxAge); need > 0 {
			k = max(k, (need+iv-1)/iv)
		}
		for n := 0; n < 4; n, k = n+1, k+1 {
			a := p.lastCapture + Time(k*iv)
			if a >= endJ {
				break
			}
			if b, rc := s.guard(now, p, cl, a, a.Add(p.maxAge), slot, endJ, excl); b {
				blocked = true
				misses++
				recheck = min(recheck, rc)
			}
		}
	}
	return blocked, misses, recheck
}

// guard reports whether a frame of protected stream p (whose newest claimed
// window is cl) captured at a (or waiting since then) with deadline dl would
// meet its target without the candidate job but not with it, and when that
// stops being true.
func (s *Scheduler) guard(now Time, p *stream, cl int64, a, dl Time, slot int, endJ Time, excl bool) (bool, Time) {
	fWo, occWo := s.earliestStart(now, a, p.model, slot, endJ, excl, false)
	cWo := s.cost(p.model, occWo)
	target := dl
	if s.cfg.Order == OrderLaxity {
		// Its window: the one it lands in at the earliest, unless that
		// one is already covered (then it serves the next).
		w := p.win(fWo.Add(cWo))
		if w <= cl {
			w = cl + 1
		}
		target = min(dl, p.windowEnd(w))
	}
	if fWo.Add(cWo) > target {
		if target == dl || fWo.Add(cWo) > dl {
			return false, 0 // it misses anyway; not this job's doing
		}
		target = dl // its window is lost anyway: guard the deadline
	}
	fW, occW := s.earliestStart(now, a, p.model, slot, endJ, excl, true)
	if fW.Add(s.cost(p.model, occW)) > target {
		return true, target - Time(cWo) + 1
	}
	return false, 0
}

// earliestStart predicts when a frame of model pm arriving at a could start,
// given the jobs at the backend (each slot free at the predicted end of its
// last job) and, if withJ, a candidate job that keeps slot busy until endJ
// (every slot, if jExcl); it also returns the occupancy it would start
// under.
func (s *Scheduler) earliestStart(now, a Time, pm int32, slot int, endJ Time, jExcl, withJ bool) (Time, int) {
	t := max(a, now)
	latest, soonest, soonestSlot := now, Never, -1
	for i := range s.slotRun {
		f := s.slotFree(i, now)
		if withJ && (i == slot || jExcl) {
			f = max(f, endJ)
		}
		latest = max(latest, f)
		if f < soonest {
			soonest, soonestSlot = f, i
		}
	}
	if s.models[pm].spec.Exclusive || (s.exclRunning && s.slots > 1) {
		return max(t, latest), 0
	}
	start := max(t, soonest)
	occ := 0
	for i := range s.slotRun {
		if i == soonestSlot {
			continue
		}
		f := s.slotFree(i, now)
		if withJ && (i == slot || jExcl) {
			f = max(f, endJ)
		}
		if f > start {
			occ++
		}
	}
	return start, occ
}

// lookahead reports whether the candidate of stream j (cost c, placed on
// slot at start, with target jTarget: its window end or deadline) should
// yield to the next predicted frame of another contract stream: a frame
// expected before the candidate would end, that would meet its own target
// if the candidate waited and miss it if not, while the candidate would
// still meet jTarget after it. Frames are predicted from each stream's
// newest capture plus its frame interval, and one is still expected until
// CommitLead after it is predicted to reach vig (its capture plus the
// stream's smoothed arrival lag). It returns when to re-evaluate: once that
// frame is overdue.
func (s *Scheduler) lookahead(now, start Time, slot int, j *stream, excl bool, c time.Duration, jTarget Time) (bool, Time) {
	endJ := start.Add(c)
	grace := s.cfg.CommitLead
	for i := range s.streams {
		p := &s.streams[i]
		if p == j || p.adhoc || !p.seen || len(p.q) > 0 || (p.class == BestEffort && j.class != BestEffort) {
			continue
		}
		if now.Sub(p.lastCapture) > 2*p.interval+p.maxAge {
			continue // the sensor stopped
		}
		iv := int64(p.interval)
		k := int64(1)
		if d := int64(now-p.lastCapture) - int64(grace+p.lag); d >= 0 {
			k = d/iv + 1
		}
		capture := p.lastCapture + Time(k*iv)
		a := capture.Add(p.lag) // when it reaches vig
		if a >= endJ {
			continue
		}
		fWo, occWo := s.earliestStart(now, a, p.model, slot, endJ, excl, false)
		doneWo := fWo.Add(s.cost(p.model, occWo))
		w := p.win(doneWo)
		if w <= s.claimed(p) {
			continue // its window is covered already
		}
		target := min(capture.Add(p.maxAge), p.windowEnd(w))
		if doneWo > target || doneWo.Add(c) > jTarget {
			continue // it misses anyway, or the candidate would miss instead
		}
		fW, occW := s.earliestStart(now, a, p.model, slot, endJ, excl, true)
		if fW.Add(s.cost(p.model, occW)) > target {
			return true, a.Add(grace) + 1
		}
	}
	return false, 0
}
