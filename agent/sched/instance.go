package sched

// Model instances (ModelSpec.Instances; see Model instances in doc.go).
// Triton runs one request per model instance: a model whose instance group
// has count n on an accelerator runs at most n jobs there at once, whatever
// the accelerator's slots. A job of a model at its cap can start only when
// one of its own jobs ends: it may be committed behind one of them (the
// backend queues it for that instance), never behind another model's job.

// capped reports whether model mi has fewer instances than the slots, so
// its instances, not the slots, bound how many of its jobs run at once.
func (s *Scheduler) capped(mi int32) bool { return s.models[mi].capped }

// modelOf returns the model of request ri, or -1 for no request.
func (s *Scheduler) modelOf(ri int32) int32 {
	if ri < 0 {
		return -1
	}
	return s.streams[s.reqs[ri].stream].model
}

// claims counts the instances of model mi held at the backend: its running
// jobs, and its committed jobs not queued behind a job of its own (those
// take over the instance that job frees).
func (s *Scheduler) claims(mi int32) int {
	n := 0
	for i, x := range s.slotRun {
		own := s.modelOf(x) == mi
		if own {
			n++
		}
		if !own && s.modelOf(s.slotNext[i]) == mi {
			n++
		}
	}
	return n
}

// instanceFree reports whether a job of model mi placed on slot (queued:
// committed behind the job running there) has an instance: always for a
// model that is not capped; behind a job of its own model; else only when
// fewer than its instances are claimed.
func (s *Scheduler) instanceFree(mi int32, slot int, queued bool) bool {
	if !s.capped(mi) {
		return true
	}
	if queued && s.modelOf(s.slotRun[slot]) == mi {
		return true
	}
	return s.claims(mi) < s.models[mi].spec.Instances
}

// ownSlot returns a slot where a job of model mi runs with nothing committed
// behind it and may have its successor committed now (pipelining allowed,
// the job near its end), or -1.
func (s *Scheduler) ownSlot(now Time, mi int32, avoid int) int {
	if s.cfg.NoPipeline {
		return -1
	}
	best, end := -1, Never
	for i, x := range s.slotRun {
		if x < 0 || i == avoid || s.slotNext[i] >= 0 || s.modelOf(x) != mi || s.reqs[x].commitAt > now {
			continue
		}
		if e := max(s.reqs[x].predEnd, now); e < end {
			best, end = i, e
		}
	}
	return best
}

// startable reports whether committed request ri may start on a slot that
// just freed: its model has an instance free once the jobs still running
// are counted.
func (s *Scheduler) startable(ri int32) bool {
	mi := s.modelOf(ri)
	if !s.capped(mi) {
		return true
	}
	n := 0
	for _, x := range s.slotRun {
		if s.modelOf(x) == mi {
			n++
		}
	}
	return n < s.models[mi].spec.Instances
}

// instanceAt is the earliest time an instance of capped model pm is
// predicted free, given the jobs at the backend and, if withJ, the
// candidate job (of model s.candModel) until endJ; 0 when one is free now.
func (s *Scheduler) instanceAt(now Time, pm int32, endJ Time, withJ bool) Time {
	n, first := 0, Never
	for i, x := range s.slotRun {
		y := s.slotNext[i]
		switch {
		case s.modelOf(x) == pm:
			n++
			first = min(first, s.slotFree(i, now)) // its successor, if its own, holds the instance on
			if s.modelOf(y) != pm {
				first = min(first, max(s.reqs[x].predEnd, now))
			}
		case s.modelOf(y) == pm:
			n++
			first = min(first, max(s.reqs[y].predEnd, now))
		}
	}
	if withJ && s.candModel == pm {
		n++
		first = min(first, endJ)
	}
	if n < s.models[pm].spec.Instances {
		return 0
	}
	return first
}
