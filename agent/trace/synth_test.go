package trace

import "math"

// The synthetic window the tests draw: four streams on two accelerators, with
// a frame from before the window, a batch, a queued dispatch, a superseded
// frame, a late drop, a deferral, a variant and a job running at the end.

const ms = int64(1e6)

// t0 is the window's start on the monotonic clock.
const t0 = 5_000 * ms

type synth struct{ w Window }

func (s *synth) add(e Event) {
	if e.Variant == 0 {
		e.Variant = -1
	}
	s.w.Events = append(s.w.Events, e)
}

func at(m float64) int64 { return t0 + int64(m*float64(ms)) }

func (s *synth) arrive(m float64, tok uint64, stream int32, waiting int32) {
	s.add(Event{Kind: Arrive, Time: at(m), Token: tok, Stream: stream, Capture: at(m) - 2*ms,
		Deadline: at(m) + 30*ms, ID: "req-" + itoa(int(tok)), Waiting: waiting, For: -1, Accel: -1})
}

func (s *synth) dispatch(m float64, tok uint64, stream int32, accel, slot, busy int16, waiting int32) {
	s.add(Event{Kind: Dispatch, Time: at(m), Token: tok, Stream: stream, Accel: accel, Slot: slot, Busy: busy, Waiting: waiting, For: -1})
}

func (s *synth) complete(m float64, tok uint64, stream int32, accel, slot, busy int16, waiting int32) {
	s.add(Event{Kind: Complete, Time: at(m), Token: tok, Stream: stream, Accel: accel, Slot: slot, Busy: busy, Waiting: waiting, For: -1})
}

func (s *synth) answer(m float64, tok uint64, stream int32, code, outcome, reason uint8, waiting int32) {
	s.add(Event{Kind: Answer, Time: at(m), Token: tok, Stream: stream, Code: code, Outcome: outcome, Reason: reason, Waiting: waiting, For: -1, Accel: -1})
}

const (
	codeOK       = 0
	codeDeadline = 4
	codeAborted  = 10
	fwd          = 1
	superseded   = 2
	late         = 3
	reasonSup    = 1
	reasonLate   = 2
)

func synthWindow() *Window {
	s := &synth{}
	s.w.Meta = Meta{
		Streams: []Stream{{"cam0", "yolo", "protected"}, {"pose", "pose", "high"}, {"vlm", "vlm", "best_effort"}, {"depth", "yolo", "high"}},
		Accels:  []Accel{{"gpu0", 2}, {"dla0", 1}},
		Models:  []string{"yolo", "vlm-int8"},
	}
	s.w.Start, s.w.End, s.w.WallStart = t0, at(20), 1_780_000_000*1e9
	// From before the window: pose f100 completes and is answered.
	s.complete(0.5, 100, 1, 0, 1, 0, 0)
	s.answer(0.6, 100, 1, codeOK, fwd, 0, 0)
	s.arrive(1, 1, 0, 1)
	s.dispatch(1.1, 1, 0, 0, 0, 1, 0)
	s.arrive(1.5, 2, 2, 1)
	s.add(Event{Kind: Defer, Time: at(1.6), Token: 2, Stream: 2, For: 0, Waiting: 1, Accel: -1})
	s.arrive(2, 3, 1, 2)
	s.dispatch(2.2, 3, 1, 0, 1, 2, 1)
	s.complete(5, 1, 0, 0, 0, 1, 1)
	s.answer(5.01, 1, 0, codeOK, fwd, 0, 1)
	s.arrive(6, 4, 0, 2)
	s.arrive(6.1, 5, 3, 3)
	s.arrive(6.2, 6, 1, 4)
	// A batch of two: cam0 f4 (its lead) and depth f5.
	s.add(Event{Kind: Dispatch, Time: at(6.5), Token: 4, Stream: 0, Accel: 0, Slot: 0, Busy: 2, Batch: 4, BatchSize: 2, Waiting: 3, For: -1, Variant: -1})
	s.add(Event{Kind: Dispatch, Time: at(6.5), Token: 5, Stream: 3, Accel: 0, Slot: 0, Busy: 2, Batch: 4, BatchSize: 2, Waiting: 2, For: -1, Variant: -1})
	// pose f7 supersedes f6, which waited.
	s.arrive(7, 7, 1, 3)
	s.answer(7, 6, 1, codeAborted, superseded, reasonSup, 2)
	s.complete(9, 3, 1, 0, 1, 1, 2)
	s.answer(9, 3, 1, codeOK, fwd, 0, 2)
	s.dispatch(9.1, 7, 1, 0, 1, 2, 1)
	s.complete(10, 4, 0, 0, 0, 1, 1)
	s.answer(10, 4, 0, codeOK, fwd, 0, 1)
	s.answer(10, 5, 3, codeOK, fwd, 0, 1)
	// vlm f2 runs on dla0 as its variant, until after the window.
	s.add(Event{Kind: Dispatch, Time: at(10.5), Token: 2, Stream: 2, Accel: 1, Slot: 0, Busy: 1, Waiting: 0, For: -1, Variant: 1})
	// cam0 f8 would be stale: dropped at once.
	s.arrive(11, 8, 0, 1)
	s.answer(11, 8, 0, codeDeadline, late, reasonLate, 0)
	s.complete(12, 7, 1, 0, 1, 0, 0)
	s.answer(12, 7, 1, codeOK, fwd, 0, 0)
	s.arrive(14, 9, 0, 1)
	s.dispatch(14, 9, 0, 0, 0, 1, 0)
	s.arrive(14.5, 10, 1, 1)
	// pose f10 is committed behind f9 on slot 0: it starts when f9 ends.
	s.add(Event{Kind: Dispatch, Time: at(14.6), Token: 10, Stream: 1, Accel: 0, Slot: 0, Busy: 1, Queued: true, Waiting: 0, For: -1, Variant: -1})
	s.complete(16, 9, 0, 0, 0, 1, 0)
	s.answer(16, 9, 0, codeOK, fwd, 0, 0)
	s.complete(18, 10, 1, 0, 0, 0, 0)
	s.answer(18, 10, 1, codeOK, fwd, 0, 0)
	// cam0 f11 arrives and is not answered before the window ends.
	s.arrive(19, 11, 0, 1)
	for i := range s.w.Events {
		if s.w.Events[i].Kind == Arrive && s.w.Events[i].Token == 2 {
			s.w.Events[i].Deadline = math.MaxInt64
		}
	}
	return &s.w
}

// busyWindow is n frames of three streams on one slot, each superseding,
// running or answered late in turn: for the allocation bound.
func busyWindow(n int) *Window {
	s := &synth{}
	s.w.Meta = Meta{Streams: []Stream{{"a", "m", "protected"}, {"b", "m", "high"}, {"c", "m", "best_effort"}}, Accels: []Accel{{"gpu", 1}}}
	s.w.Start = t0
	m := 0.0
	for i := 1; i <= n; i++ {
		tok, st := uint64(i), int32(i%3)
		s.arrive(m, tok, st, 1)
		switch i % 3 {
		case 0:
			s.answer(m+0.1, tok, st, codeDeadline, late, reasonLate, 0)
		case 1:
			s.dispatch(m+0.1, tok, st, 0, 0, 1, 0)
			s.complete(m+0.5, tok, st, 0, 0, 0, 0)
			s.answer(m+0.5, tok, st, codeOK, fwd, 0, 0)
		case 2:
			s.add(Event{Kind: Defer, Time: at(m + 0.2), Token: tok, Stream: st, For: 0, Accel: -1})
			s.answer(m+0.3, tok, st, codeAborted, superseded, reasonSup, 0)
		}
		m++
	}
	s.w.End = at(m)
	return &s.w
}
