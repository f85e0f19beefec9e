package trace

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// The layout turns a Window into tracks and what is drawn on them, once, for
// both the Chrome trace file and the timeline page, so the two show the same
// thing:
//
//   - one process per accelerator, a track per slot: each job from the time
//     it could start (its dispatch, or the end of the job before it on the
//     slot when it was queued behind it) to its completion; a batch is one
//     job listing its frames;
//   - one process "streams", a track per stream: each frame's life from
//     capture to answer, with its phases (transit: capture→arrive, wait:
//     arrive→dispatch, run: dispatch→complete) nested inside, and an instant
//     for each deferral naming the stream it was held back for. Frames of a
//     stream overlap (one runs while the next waits), and a track must hold
//     slices that nest, so a stream spreads over as many lanes as it has
//     frames alive at once: its first lane carries its name, the others
//     "name ·2", "name ·3". A frame takes a lane when it appears (the first
//     whose frame ended before this one's capture) and is drawn when
//     answered, so each lane's lives come out in time order;
//   - counters: frames waiting in vig (on "streams") and busy slots (on each
//     accelerator).
//
// Slices of a track come out in time order and never overlap on a slot.
// Everything the layout holds is a frame or job in flight (bounded by vig's
// request table), a few values per track, and the frames and jobs it drew,
// kept for reuse: never the whole window.

// pidAccel0 is accelerator 0's process; accelerator i is pidAccel0+i, the
// one after the last holds jobs of no known accelerator, and "streams" comes
// next. They sort in that order: what ran, then what waited for it.
const pidAccel0 = 1

// spanKind says what a span draws.
type spanKind uint8

const (
	spanFrame   spanKind = iota // a frame's life on its stream's lane
	spanTransit                 // capture → arrive
	spanWait                    // arrive → dispatch (or answer)
	spanRun                     // dispatch → complete (or answer)
	spanJob                     // a job on a slot
)

// span is one slice to draw. frame or job is set according to kind; both are
// valid only during the drawer's call.
type span struct {
	kind       spanKind
	pid, tid   int32
	start, end int64
	frame      *frame
	job        *job
}

// drawer receives the layout, in an order where each track's spans and
// instants come in time order and a track's metadata before its first span.
type drawer interface {
	process(pid int32, name string, sort int)
	// thread names a track; stream is the stream whose lane it is (-1 for a
	// slot track, len(Streams) for frames that matched no stream).
	thread(pid, tid int32, name string, lane int, stream int32, sort int)
	span(s *span)
	// deferral: frame f was held back at t for stream forStream (-1 unknown).
	deferral(pid, tid int32, t int64, f *frame, forStream int32)
	counter(pid int32, c counterKind, t int64, v int32)
}

type counterKind uint8

const (
	counterWaiting counterKind = iota // frames waiting in vig
	counterBusy                       // busy slots of an accelerator
)

var counterNames = [...]string{"waiting frames", "busy slots"}

// frame is what the layout knows of one frame.
type frame struct {
	token    uint64
	id       string
	stream   int32 // index in Meta.Streams, or len(Streams): no stream
	arrived  bool  // its Arrive is in the window
	capture  int64
	arrive   int64
	deadline int64
	// dispatch, complete, answer: 0 until seen.
	dispatch, complete, answer int64
	queued                     bool
	batch                      uint64
	batchSize                  int16
	variant                    int16
	code, outcome, reason      uint8
	completed, answered        bool
	lost                       bool // its Answer is missing from the window
	defers                     []deferral
	job                        *job  // its job while that is open
	start                      int64 // where its life is drawn from
	lane                       int   // in its stream's lanes
}

type deferral struct {
	t  int64
	on int32 // the stream it was held back for, -1 unknown
}

// member is a frame of a job, copied: the frame may be answered and gone
// while its job still runs.
type member struct {
	token  uint64
	stream int32
	id     string
}

// job is one backend job: a frame, or a batch of them.
type job struct {
	lead        uint64
	accel, slot int16
	dispatch    int64
	complete    int64
	queued      bool
	completed   bool
	before      bool // dispatched before the window
	variant     int16
	code        uint8
	members     []member
}

type streamLane struct {
	tid  int32
	end  int64 // of the last life drawn on it
	busy bool  // a frame alive holds it
}

type streamState struct {
	lanes []streamLane
}

type slotState struct {
	named bool
	end   int64
}

type layout struct {
	win     *Window
	d       drawer
	frames  map[uint64]*frame
	jobs    map[uint64]*job // open jobs by lead token
	streams []streamState   // len(Streams)+1: the last for frames of no stream
	slots   [][]slotState   // per accelerator (+1: none)
	busy    []int32         // last busy count drawn per accelerator
	waiting int32
	nextTid int32
	freeF   []*frame
	freeJ   []*job
	open    []*job   // scratch for the end of the window
	alive   []*frame // scratch for the end of the window
	sp      span     // the span being drawn: one, not one allocation per span
}

func (l *layout) streamsPid() int32 { return pidAccel0 + int32(len(l.win.Accels)) + 1 }
func (l *layout) noAccelPid() int32 { return pidAccel0 + int32(len(l.win.Accels)) }

// checkWindow says what is wrong with a window before anything is written.
func checkWindow(win *Window) error {
	if win == nil {
		return fmt.Errorf("trace: no window")
	}
	if win.End < win.Start {
		return fmt.Errorf("trace: window ends (%d) before it starts (%d)", win.End, win.Start)
	}
	prev := int64(-1 << 63)
	for i := range win.Events {
		e := &win.Events[i]
		if e.Time < prev {
			return fmt.Errorf("trace: event %d (%s at %d) is before the one ahead of it (%d): a window's events must be in time order", i, e.Kind, e.Time, prev)
		}
		prev = e.Time
		if e.Kind == 0 || e.Kind >= numKinds {
			return fmt.Errorf("trace: event %d has unknown kind %d", i, e.Kind)
		}
	}
	return nil
}

// lay draws win on d. win must have passed checkWindow.
func lay(win *Window, d drawer) {
	l := &layout{
		win:     win,
		d:       d,
		frames:  make(map[uint64]*frame),
		jobs:    make(map[uint64]*job),
		streams: make([]streamState, len(win.Streams)+1),
		slots:   make([][]slotState, len(win.Accels)+1),
		busy:    make([]int32, len(win.Accels)),
		waiting: -1,
	}
	for i := range l.busy {
		l.busy[i] = -1
	}
	for i, a := range win.Accels {
		d.process(pidAccel0+int32(i), a.Name, i)
		l.slots[i] = make([]slotState, a.Slots)
		for s := range a.Slots {
			l.nameSlot(int16(i), int16(s))
		}
	}
	d.process(l.streamsPid(), "streams", len(win.Accels)+1)
	for i := range win.Events {
		l.event(&win.Events[i])
	}
	l.finish()
}

func (l *layout) streamOf(s int32) int32 {
	if s < 0 || int(s) >= len(l.win.Streams) {
		return int32(len(l.win.Streams))
	}
	return s
}

func (l *layout) accelOf(a int16) int16 {
	if a < 0 || int(a) >= len(l.win.Accels) {
		return int16(len(l.win.Accels))
	}
	return a
}

// slotTid is a slot's track: unique in the whole trace, not only in its
// process, as Perfetto keys threads by tid.
func slotTid(a, s int16) int32 { return (pidAccel0+int32(a))<<16 | int32(s) + 1 }

func (l *layout) nameSlot(a, s int16) {
	if a == int16(len(l.win.Accels)) && len(l.slots[a]) == 0 && s >= 0 {
		l.d.process(l.noAccelPid(), "backend", len(l.win.Accels))
	}
	for int(s) >= len(l.slots[a]) {
		l.slots[a] = append(l.slots[a], slotState{})
	}
	if l.slots[a][s].named {
		return
	}
	l.slots[a][s].named = true
	l.slots[a][s].end = -1 << 63
	l.d.thread(pidAccel0+int32(a), slotTid(a, s), "slot "+itoa(int(s)), 0, -1, int(s))
}

func itoa(n int) string { return strconv.Itoa(n) }

func (l *layout) newFrame(e *Event) *frame {
	var f *frame
	if n := len(l.freeF); n > 0 {
		f = l.freeF[n-1]
		l.freeF = l.freeF[:n-1]
		defers := f.defers[:0]
		*f = frame{defers: defers}
	} else {
		f = &frame{}
	}
	f.token = e.Token
	f.stream = l.streamOf(e.Stream)
	f.variant = -1
	f.start = l.win.Start
	l.frames[e.Token] = f
	return f
}

// frameOf returns the frame e is about, one from before the window if its
// Arrive is not in it.
func (l *layout) frameOf(e *Event) *frame {
	if f := l.frames[e.Token]; f != nil {
		return f
	}
	f := l.newFrame(e)
	l.takeLane(f)
	return f
}

// takeLane gives f the first lane of its stream that no frame holds and
// whose last life ended by f's start, or a new one.
func (l *layout) takeLane(f *frame) {
	st := &l.streams[f.stream]
	for i := range st.lanes {
		if ln := &st.lanes[i]; !ln.busy && ln.end <= f.start {
			ln.busy, f.lane = true, i
			return
		}
	}
	f.lane = len(st.lanes)
	l.nextTid++
	if l.nextTid == 1 {
		l.nextTid = l.streamsPid() << 16
	}
	st.lanes = append(st.lanes, streamLane{tid: l.nextTid, busy: true, end: f.start})
	name := "(no stream)"
	if int(f.stream) < len(l.win.Streams) {
		name = l.win.Streams[f.stream].Name
	}
	if f.lane > 0 {
		name += " ·" + itoa(f.lane+1)
	}
	l.d.thread(l.streamsPid(), l.nextTid, name, f.lane, f.stream, int(f.stream)*1000+f.lane)
}

func (l *layout) event(e *Event) {
	switch e.Kind {
	case Arrive:
		if old := l.frames[e.Token]; old != nil {
			// A token is reused only once its frame was answered: this
			// one's Answer is missing, so its life ends here, unnamed.
			old.answer, old.answered, old.lost = e.Time, true, true
			l.retire(old)
		}
		f := l.newFrame(e)
		f.arrived = true
		f.arrive = e.Time
		f.id = e.ID
		f.deadline = e.Deadline
		f.capture = e.Capture
		f.start = e.Time
		if e.Capture > 0 && e.Capture < e.Time {
			f.start = e.Capture
		}
		l.takeLane(f)
	case Defer:
		f := l.frameOf(e)
		f.defers = append(f.defers, deferral{e.Time, l.forStream(e.For)})
	case Dispatch:
		f := l.frameOf(e)
		f.dispatch = e.Time
		f.queued = e.Queued
		f.batch, f.batchSize = e.Batch, e.BatchSize
		f.variant = e.Variant
		m := member{f.token, f.stream, f.id}
		if e.Batch != 0 && e.Batch != e.Token {
			if j := l.jobs[e.Batch]; j != nil {
				j.members = append(j.members, m)
				f.job = j
				break
			}
		}
		j := l.newJob()
		j.lead = e.Token
		j.accel, j.slot = l.accelOf(e.Accel), max(e.Slot, 0)
		j.dispatch = e.Time
		j.queued = e.Queued
		j.variant = e.Variant
		j.members = append(j.members, m)
		l.jobs[e.Token] = j
		f.job = j
		l.busyCounter(e)
	case Complete:
		f := l.frames[e.Token]
		if f != nil && f.dispatch != 0 && f.job == nil {
			// A frame of a batch that completed already: drawn.
			f.complete, f.completed, f.code = e.Time, true, e.Code
			l.busyCounter(e)
			break
		}
		var j *job
		if f != nil {
			f.complete, f.completed, f.code = e.Time, true, e.Code
			j = f.job
			if j != nil {
				// Every frame of a batch is finished when it completes.
				for _, m := range j.members {
					if g := l.frames[m.token]; g != nil && g.job == j {
						g.complete, g.completed, g.code, g.job = e.Time, true, e.Code, nil
					}
				}
			}
		}
		if j == nil {
			j = l.jobs[e.Token]
		}
		if j == nil {
			// Dispatched before the window.
			if f == nil {
				f = l.frameOf(e)
				f.complete, f.completed, f.code = e.Time, true, e.Code
			}
			if f.dispatch == 0 {
				f.dispatch = f.start // it ran from before the window (or its Dispatch is missing)
			}
			j = l.newJob()
			j.lead, j.before, j.variant = e.Token, true, -1
			j.dispatch = l.win.Start
			j.members = append(j.members, member{f.token, f.stream, f.id})
		}
		if e.Accel >= 0 {
			j.accel, j.slot = l.accelOf(e.Accel), max(e.Slot, 0)
		}
		j.complete, j.completed, j.code = e.Time, true, e.Code
		l.drawJob(j)
		l.busyCounter(e)
	case Answer:
		f := l.frameOf(e)
		f.answer, f.answered = e.Time, true
		f.code, f.outcome, f.reason = e.Code, e.Outcome, e.Reason
		l.retire(f)
	}
	if e.Waiting != l.waiting && e.Waiting >= 0 {
		l.waiting = e.Waiting
		l.d.counter(l.streamsPid(), counterWaiting, e.Time, e.Waiting)
	}
}

func (l *layout) forStream(s int32) int32 {
	if s < 0 || int(s) >= len(l.win.Streams) {
		return -1
	}
	return s
}

func (l *layout) busyCounter(e *Event) {
	if e.Accel < 0 || int(e.Accel) >= len(l.busy) || e.Busy == int16(l.busy[e.Accel]) {
		return
	}
	l.busy[e.Accel] = int32(e.Busy)
	l.d.counter(pidAccel0+int32(e.Accel), counterBusy, e.Time, int32(e.Busy))
}

func (l *layout) newJob() *job {
	if n := len(l.freeJ); n > 0 {
		j := l.freeJ[n-1]
		l.freeJ = l.freeJ[:n-1]
		ms := j.members[:0]
		*j = job{members: ms}
		return j
	}
	return &job{}
}

// drawJob draws a finished (or, at the end, still running) job on its slot
// and forgets it.
func (l *layout) drawJob(j *job) {
	l.nameSlot(j.accel, j.slot)
	st := &l.slots[j.accel][j.slot]
	start := max(j.dispatch, st.end)
	end := j.complete
	if !j.completed {
		end = l.win.End
	}
	end = max(end, start)
	st.end = end
	l.sp = span{kind: spanJob, pid: pidAccel0 + int32(j.accel), tid: slotTid(j.accel, j.slot), start: start, end: end, job: j}
	l.d.span(&l.sp)
	if l.jobs[j.lead] == j {
		delete(l.jobs, j.lead)
	}
	for _, m := range j.members {
		if f := l.frames[m.token]; f != nil && f.job == j {
			f.job = nil
		}
	}
	l.freeJ = append(l.freeJ, j)
}

// retire draws f's life, frees its lane and keeps f for reuse.
func (l *layout) retire(f *frame) {
	l.drawFrame(f)
	if l.frames[f.token] == f {
		delete(l.frames, f.token)
	}
	// A job still running lists the frame by copy.
	f.job = nil
	l.freeF = append(l.freeF, f)
}

func (l *layout) drawFrame(f *frame) {
	start := f.start
	end := l.win.End
	if f.answered {
		end = f.answer
	}
	end = max(end, start)
	ln := &l.streams[f.stream].lanes[f.lane]
	ln.busy, ln.end = false, end
	pid, tid := l.streamsPid(), ln.tid
	l.sp = span{kind: spanFrame, pid: pid, tid: tid, start: start, end: end, frame: f}
	s := &l.sp
	l.d.span(s)
	clip := func(t int64) int64 { return min(max(t, start), end) }
	// The phases follow each other, whatever order the window's events
	// gave them (a frame from before the window has lost some).
	a := start
	if f.arrived {
		a = clip(f.arrive)
	}
	if a > start {
		s.kind, s.start, s.end = spanTransit, start, a
		l.d.span(s)
	}
	d := end
	if f.dispatch != 0 {
		d = max(clip(f.dispatch), a)
	}
	if d > a {
		s.kind, s.start, s.end = spanWait, a, d
		l.d.span(s)
	}
	di := 0
	for ; di < len(f.defers) && f.defers[di].t <= d; di++ {
		l.d.deferral(pid, tid, max(clip(f.defers[di].t), a), f, f.defers[di].on)
	}
	if f.dispatch != 0 {
		c := end
		if f.completed {
			c = max(clip(f.complete), d)
		}
		if c > d {
			s.kind, s.start, s.end = spanRun, d, c
			l.d.span(s)
		}
	}
	for ; di < len(f.defers); di++ {
		l.d.deferral(pid, tid, max(clip(f.defers[di].t), d), f, f.defers[di].on)
	}
}

// finish draws what the window ended in the middle of: running jobs (to the
// end of the window) and frames not yet answered.
func (l *layout) finish() {
	l.open = l.open[:0]
	for _, j := range l.jobs {
		l.open = append(l.open, j)
	}
	slices.SortFunc(l.open, func(a, b *job) int {
		if a.dispatch != b.dispatch {
			if a.dispatch < b.dispatch {
				return -1
			}
			return 1
		}
		if a.lead < b.lead {
			return -1
		}
		return 1
	})
	for _, j := range l.open {
		l.drawJob(j)
	}
	l.alive = l.alive[:0]
	for _, f := range l.frames {
		l.alive = append(l.alive, f)
	}
	slices.SortFunc(l.alive, func(a, b *frame) int { return cmp.Compare(a.token, b.token) })
	for _, f := range l.alive {
		l.retire(f)
	}
}
