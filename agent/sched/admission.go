package sched

import "time"

// admission decides whether starting a job of cost c at start (now, or when
// the accelerator empties for an exclusive job) would make the next
// reachable frame of some protected stream miss its deadline because every
// slot it could use is then busy — and would not miss without the job. It
// returns how many predicted protected frames the job would cost and when
// the decision must be re-evaluated if nothing else happens.
func (s *Scheduler) admission(now, start Time, self int32, excl bool, c time.Duration) (blocked bool, misses uint64, recheck Time) {
	endJ := start.Add(c)
	recheck = Never
	for _, pi := range s.protected {
		p := &s.streams[pi]
		if pi == self || !p.seen {
			continue
		}
		iv := int64(p.interval)
		if now.Sub(p.lastCapture) > 2*p.interval+p.maxAge {
			continue // the sensor stopped: do not guard phantom frames
		}
		// First frame k ≥ 1 after the last one received that can still
		// make its deadline when started at once on an idle accelerator.
		c0 := s.cost(p.model, 0)
		if c0 > p.maxAge {
			continue // unreachable whatever we do
		}
		k := int64(1)
		if need := int64(now.Add(c0)-p.lastCapture) - int64(p.maxAge); need > 0 {
			k = max(k, (need+iv-1)/iv)
		}
		for n := 0; n < 4; n, k = n+1, k+1 {
			a := p.lastCapture + Time(k*iv)
			if a >= endJ {
				break
			}
			dl := a.Add(p.maxAge)
			fWo, occWo := s.earliestStart(now, a, p.model, 0, false, false)
			cWo := s.cost(p.model, occWo)
			if fWo.Add(cWo) > dl {
				continue // it misses anyway; not this job's doing
			}
			fW, occW := s.earliestStart(now, a, p.model, endJ, excl, true)
			if fW.Add(s.cost(p.model, occW)) > dl {
				blocked = true
				misses++
				recheck = min(recheck, dl-Time(cWo)+1)
			}
		}
	}
	return blocked, misses, recheck
}

// earliestStart predicts when a frame of model pm arriving at a could start,
// given the jobs running now (at their predicted ends) and, if withJ, a
// candidate job ending at endJ; it also returns the occupancy it would start
// under.
func (s *Scheduler) earliestStart(now, a Time, pm int32, endJ Time, jExcl, withJ bool) (Time, int) {
	t := max(a, now)
	if withJ && jExcl {
		return max(t, endJ), 0
	}
	pExcl := s.models[pm].spec.Exclusive
	latest, live := Time(0), 0
	soonest := Never
	each := func(end Time) {
		end = max(end, now)
		latest = max(latest, end)
		if end > t {
			live++
			soonest = min(soonest, end)
		}
	}
	for _, x := range s.running {
		each(s.reqs[x].predEnd)
	}
	if withJ {
		each(endJ)
	}
	switch {
	case pExcl || s.exclRunning:
		return max(t, latest), 0
	case live < s.slots:
		return t, live
	}
	occ := 0
	for _, x := range s.running {
		if max(s.reqs[x].predEnd, now) > soonest {
			occ++
		}
	}
	if withJ && endJ > soonest {
		occ++
	}
	return soonest, occ
}
