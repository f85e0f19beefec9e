package sched

// What the trace recorder (agent/trace) asks of the scheduler: who a frame
// was deferred for, and the load after an event. None of it runs unless a
// recording is open, except the nil check of the deferral hook.

// SetOnDefer sets f to be called when admission holds a waiting request back
// for another stream's frame (forStream; -1 unknown): once per request and
// stream it waits for, with the front's stream numbers; f reports whether
// it recorded the deferral (a request not recorded is told again the next
// time it is held back). Set it before the first event; nil turns it off.
func (s *Scheduler) SetOnDefer(f func(now Time, token uint64, stream, forStream int) bool) {
	if !s.multi() {
		s.onDefer = f
		return
	}
	for p := range s.accels {
		a := &s.accels[p]
		if a.e == nil {
			continue
		}
		if f == nil {
			a.e.onDefer = nil
			continue
		}
		global := a.global
		a.e.onDefer = func(now Time, token uint64, st, forSt int) bool {
			g := -1
			if forSt >= 0 {
				g = int(global[forSt])
			}
			return f(now, token, int(global[st]), g)
		}
	}
}

// deferred tells the hook that r (of stream st) is held back for the frame
// of stream s.blockedBy, unless it already said so.
func (s *Scheduler) deferred(now Time, r *request, st int32) {
	if r.deferFor == s.blockedBy+1 {
		return
	}
	if s.onDefer(now, r.token, int(st), int(s.blockedBy)) {
		r.deferFor = s.blockedBy + 1
	}
}

// Route returns the stream a request of that stream and model name would be
// counted on (as Action.Stream), or -1 when it matches none.
func (s *Scheduler) Route(stream, model string) int {
	r := Request{Stream: stream, Model: model}
	if !s.multi() {
		si, _, _ := s.route(&r)
		return int(si)
	}
	a := &s.accels[s.part(&r)]
	if a.e == nil {
		return -1
	}
	si, _, _ := a.e.route(&r)
	if si < 0 {
		return -1
	}
	return int(a.global[si])
}

// Load returns the requests waiting in vig, and the jobs at the backend
// (running or committed) on accelerator accel (an index into Accelerators).
func (s *Scheduler) Load(accel int) (waiting, jobs int) {
	if !s.multi() {
		return s.waiting(), s.busy + s.committed
	}
	for p := range s.accels {
		if e := s.accels[p].e; e != nil {
			waiting += e.waiting()
			if p == accel {
				jobs = e.busy + e.committed
			}
		}
	}
	return waiting, jobs
}
