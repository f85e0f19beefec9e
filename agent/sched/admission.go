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
//
// A best_effort job (not an extra of a higher class) is guarded against
// high streams' frames the same way: the classes' order holds across
// non-preemptive blocking, so on an accelerator whose only contracts are
// high (a GPU beside the DLA that runs the protected detector) the VLM
// runs on its min_rate_hz budget, not whenever its window nears its end.
func (s *Scheduler) admission(now, start Time, slot int, self int32, excl, guardHigh bool, c time.Duration) (blocked bool, misses uint64, recheck Time) {
	endJ := start.Add(c)
	recheck = Never
	guarded := s.protected
	if guardHigh {
		guarded = s.guarded
	}
	for _, pi := range guarded {
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
		if len(p.q) > 0 && !(s.forming >= 0 && p.bmark == s.bid) { // a head in the batch is served by it
			h := &s.reqs[p.q[0]]
			if b, rc := s.guard(now, p, cl, h.capture, h.deadline, slot, endJ, excl); b {
				blocked = true
				misses++
				recheck = min(recheck, rc)
			}
		}
		iv := int64(p.interval)
		if p.silent(now) {
			continue // the sensor stopped (or its next frame goes elsewhere): do not guard phantom frames
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
		if p == j || p.adhoc || !p.seen || len(p.q) > 0 || (p.class == BestEffort && j.class != BestEffort) || s.batchPeer(p) {
			continue
		}
		if p.silent(now) {
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

// next is when the next frame of p is predicted to reach vig, and its
// capture; ok is false when p's sensor stopped or p is not a candidate for
// the look-ahead of a job of stream j ranked as class jc.
func (s *Scheduler) next(now Time, p, j *stream, jc Class) (a, capture Time, ok bool) {
	if p == j || p.adhoc || !p.seen || (p.class == BestEffort && jc != BestEffort) || p.silent(now) {
		return 0, 0, false
	}
	iv := int64(p.interval)
	k := int64(1)
	if d := int64(now-p.lastCapture) - int64(s.cfg.CommitLead+p.lag); d >= 0 {
		k = d/iv + 1
	}
	capture = p.lastCapture + Time(k*iv)
	return capture.Add(p.lag), capture, true
}

// dueBefore reports whether some stream without a waiting request has a
// frame predicted to reach vig before t.
func (s *Scheduler) dueBefore(now, t Time, j *stream) bool {
	for i := range s.streams {
		p := &s.streams[i]
		if len(p.q) > 0 || s.batchPeer(p) {
			continue
		}
		if a, _, ok := s.next(now, p, j, j.class); ok && a < t {
			return true
		}
	}
	return false
}

// laFrame is one job of the one-slot look-ahead: another stream's waiting
// head (arrival now) or its predicted next frame.
type laFrame struct {
	a, target Time
	c         time.Duration
	predicted bool
}

// maxLookahead bounds the jobs the one-slot look-ahead schedules.
const maxLookahead = 8

// lookaheadOne is the look-ahead on one slot, where the order of a few jobs
// decides: it schedules the other streams' waiting heads and next predicted
// frames earliest target first, after the candidate — and before it: those
// due before it would end first, then the candidate, then the rest. The
// candidate yields when the first schedule makes a predicted frame miss its
// target while in the second every job, the candidate included, meets its
// own. Frames predicted individually would each fit; it is two
// frames sharing a window end (pose and depth in scenario B) that a
// candidate with a loose window (the detector) must not go before.
func (s *Scheduler) lookaheadOne(now, start Time, j *stream, c time.Duration, jTarget Time) (bool, Time) {
	endJ := start.Add(c)
	grace := s.cfg.CommitLead
	if !s.dueBefore(now, endJ, j) {
		return false, 0 // only a frame due before the candidate ends can make waiting pay
	}
	var fr [maxLookahead]laFrame
	n := 0
	recheck := Never
	for i := range s.streams {
		p := &s.streams[i]
		if n == len(fr) {
			break
		}
		if p == j || p.adhoc || !p.seen || (p.class == BestEffort && j.class != BestEffort) || s.batchPeer(p) {
			continue
		}
		cp := s.cost(p.model, 0)
		if len(p.q) > 0 {
			h := &s.reqs[p.q[0]]
			if h.deadline == Never {
				continue
			}
			k := s.key(p, h, endJ, cp)
			if k.extra {
				continue
			}
			fr[n] = laFrame{a: now, c: cp, target: endJ.Add(cp) + Time(k.lax)}
			n++
			continue
		}
		a, capture, ok := s.next(now, p, j, j.class)
		if !ok {
			continue
		}
		// Even a frame due after the candidate ends can be pushed past
		// its window by the jobs the candidate delays: the schedule
		// below sees that.
		w := p.win(max(a, start).Add(cp))
		if w <= s.claimed(p) {
			continue // its window is covered already
		}
		fr[n] = laFrame{a: a, c: cp, target: min(capture.Add(p.maxAge), p.windowEnd(w)), predicted: true}
		recheck = min(recheck, a.Add(grace)+1)
		n++
	}
	if recheck == Never {
		return false, 0 // nothing predicted: the rank decides
	}
	for x := 1; x < n; x++ { // earliest target first
		for y := x; y > 0 && fr[y].target < fr[y-1].target; y-- {
			fr[y], fr[y-1] = fr[y-1], fr[y]
		}
	}
	// With the candidate: it first, then the others.
	t, miss := endJ, false
	for _, f := range fr[:n] {
		t = max(t, f.a).Add(f.c)
		miss = miss || (f.predicted && t > f.target)
	}
	if !miss {
		return false, 0
	}
	// Without it: the jobs due before it would end, then it, then the rest.
	t = start
	for pass := 0; pass < 3; pass++ {
		if pass == 1 {
			if t = t.Add(c); t > jTarget {
				return false, 0 // the candidate would miss instead
			}
			continue
		}
		for _, f := range fr[:n] {
			if (f.a < endJ) != (pass == 0) {
				continue
			}
			if t = max(t, f.a).Add(f.c); t > f.target {
				return false, 0 // yielding would not save them all
			}
		}
	}
	return true, recheck
}

// extraYields reports whether an extra of stream j (a head whose result
// would land in a window of j already claimed; cost c, placed on slot at
// start) should wait for the next predicted frame of another contract
// stream, of any class, whose window is not claimed: a frame expected
// before the extra would end, that would start later because of it and
// could meet its target without it. An extra has no guarantee of its own,
// so unlike the look-ahead of a contracted frame it yields whether or not
// the other frame would then miss, and whatever waiting costs itself. It
// returns when to re-evaluate: once that frame is overdue.
func (s *Scheduler) extraYields(now, start Time, slot int, j *stream, excl bool, c time.Duration) (bool, Time) {
	endJ := start.Add(c)
	for i := range s.streams {
		p := &s.streams[i]
		if len(p.q) > 0 || s.batchPeer(p) {
			// Its head outranks the extra already, unless admission or
			// the look-ahead holds it back, or it is an extra itself.
			continue
		}
		a, capture, ok := s.next(now, p, j, BestEffort)
		if !ok || a >= endJ {
			continue
		}
		fWo, occWo := s.earliestStart(now, a, p.model, slot, endJ, excl, false)
		doneWo := fWo.Add(s.cost(p.model, occWo))
		w := p.win(doneWo)
		if w <= s.claimed(p) {
			continue // its window is claimed: an extra too
		}
		if doneWo > min(capture.Add(p.maxAge), p.windowEnd(w)) {
			continue // it misses anyway
		}
		if fW, _ := s.earliestStart(now, a, p.model, slot, endJ, excl, true); fW > fWo {
			return true, a.Add(s.cfg.CommitLead) + 1
		}
	}
	return false, 0
}

// batchPeer reports whether p runs the batching model of the candidate being
// decided: its frames join that model's batches rather than run as jobs of
// their own, so the look-ahead, which prices every frame as a job alone, leaves
// them to the batch's own rules (batch.go).
func (s *Scheduler) batchPeer(p *stream) bool { return s.forming >= 0 && p.model == s.forming }
