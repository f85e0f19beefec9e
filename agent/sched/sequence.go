package sched

// Sequences: the frames of a stateful model behind Triton's sequence batcher
// (see Sequences in doc.go).

// pinSlots is how many frames carrying START or END a Latest queue holds
// besides its one latest frame: the END of one sequence and the START of the
// next, waiting together while the slot is busy.
const pinSlots = 2

// pinned reports whether a request carries a sequence's START or END: it is
// never superseded nor late-dropped (it runs, even stale).
func (r *request) pinned() bool { return r.seqStart || r.seqEnd }

// seqBusy reports whether a request of sequence id of model mi is at the
// backend (running or committed): the next frame of the sequence waits for
// its answer, so that the backend sees the frames one at a time, in order.
// Sequence ids are per model, as in Triton.
func (s *Scheduler) seqBusy(mi int32, id uint64) bool {
	if id == 0 {
		return false
	}
	for i := range s.slotRun {
		for _, x := range [2]int32{s.slotRun[i], s.slotNext[i]} {
			if x >= 0 && s.reqs[x].seqID == id && s.streams[s.reqs[x].stream].model == mi {
				return true
			}
		}
	}
	return false
}

// latestArrive applies a Latest queue's rule to an arrival (already counted
// and allocated as ri): the newest waiting frame is superseded unless it is
// pinned; an unpinned arrival older than that frame is itself superseded. A
// pinned arrival is never superseded; it supersedes an unpinned waiting frame
// whatever its capture. It reports whether the arrival was answered.
func (s *Scheduler) latestArrive(st *stream, ri int32, acts []Action) ([]Action, bool) {
	if len(st.q) == 0 {
		return acts, false
	}
	q := &s.reqs[ri]
	tail := st.q[len(st.q)-1]
	if s.reqs[tail].pinned() {
		return acts, false // it runs; the arrival waits behind it
	}
	if !q.pinned() && s.reqs[tail].capture > q.capture {
		// The arrival is older than the waiting frame: it is the one
		// superseded.
		return s.answer(ri, Aborted, Superseded, ReasonSuperseded, acts), true
	}
	st.q = st.q[:len(st.q)-1]
	return s.answer(tail, Aborted, Superseded, ReasonSuperseded, acts), false
}

// latestFull reports whether a Latest queue cannot take an arrival: its
// newest waiting frame is pinned and every place for pinned frames is taken.
func (s *Scheduler) latestFull(st *stream) bool {
	n := len(st.q)
	return n == st.capacity && s.reqs[st.q[n-1]].pinned()
}
