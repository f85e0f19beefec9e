package sched

import (
	"math"
	"strings"
	"time"
)

// VariantStats counts the jobs of one stream of a logical model that ran as
// one of its variants.
type VariantStats struct {
	// Stream is the logical model's stream; "default/<model>" for its
	// requests under the default contract.
	Stream     string
	Model      string // the logical model
	Variant    string // the model the jobs ran as
	Dispatched uint64
}

// variants is the front's state of the logical models (see Variants in
// doc.go): each stream of a logical model has a copy in the engine of each of
// its variants; the front sends each frame to one copy and keeps the copies
// one stream (Latest across copies, shared deliveries, one guard).
type variants struct {
	models   map[string]*logicalModel
	order    []*logicalModel // config order
	streams  []logicalStream
	byName   map[string]int32 // logical stream name → index in streams
	stats    []VariantStats
	statOf   [][]int32   // per accelerator: its engine's stream → index in stats, or -1
	free     []Time      // scratch of landing
	lands    []Time      // scratch of choose: each copy's predicted landing
	sq       []sqJob     // scratch of squeeze
	load     []busyShare // per accelerator
	defaults bool        // UnknownStreams == DefaultContract
	unrouted Counters    // requests for a logical model matching none of its streams
}

type logicalModel struct {
	name     string
	defName  string // its default stream's name, "default/<name>"
	variants []string
	parts    []int32 // each variant's accelerator
	stream   int32   // its only stream (routing without vig_stream), or -1
	streams  int
	defaults []streamRef // each variant's default-contract stream (under DefaultContract)
}

type logicalStream struct {
	g      int32 // the front's stream index
	model  *logicalModel
	spec   StreamSpec
	copies []streamRef // one per variant, in Variants order
}

// copyState links a copy of a logical stream to the copies in the other
// variants' engines.
type copyState struct {
	twins []twin
	// away: the front expects the stream's next frame at another variant,
	// so this engine guards no predicted frame of it (admission, look-ahead,
	// batch filling): the copies must not each reserve room for one frame.
	away bool
}

type twin struct {
	e  *Scheduler
	st int32
}

// silent reports whether no next frame of st is predicted here: its sensor
// stopped (no frame for two frame intervals plus max_age), or st is a copy
// whose next frame the front expects at another variant.
func (st *stream) silent(now Time) bool {
	return (st.lc != nil && st.lc.away) || now.Sub(st.lastCapture) > 2*st.interval+st.maxAge
}

// shareDelivery tells the other copies of a logical stream that a result was
// delivered: a window covered by one copy is covered for all (coverage counts
// it once, and it is claimed everywhere), and AoI is the stream's.
func (c *copyState) shareDelivery(now, capture Time, age time.Duration) {
	for _, t := range c.twins {
		o := &t.e.streams[t.st]
		o.lastAge = age
		if !o.delivered || capture > o.newest {
			o.newest, o.delivered = capture, true
		}
		if o.maxAge > 0 && age < o.maxAge && o.gridSet {
			o.cov.deliver(now)
			o.delivWin = max(o.delivWin, o.win(now))
		}
	}
}

// shareArrival hands the other copies what the arrival on st taught: the
// newest capture (from which next frames are predicted), the arrival lag, the
// batch key, the grid and the coverage gauge's start.
func (c *copyState) shareArrival(st *stream) {
	for _, t := range c.twins {
		o := &t.e.streams[t.st]
		if st.seen && (!o.seen || st.lastCapture > o.lastCapture) {
			o.lastCapture, o.seen = st.lastCapture, true
		}
		o.lag, o.lagDev = st.lag, st.lagDev
		if st.lastKey != 0 {
			o.lastKey = st.lastKey // the key its next frame is predicted to carry
		}
		if st.gridSet && !o.gridSet {
			o.origin, o.gridSet = st.origin, true
		}
		if st.cov.started {
			o.cov.start(st.cov.epoch)
		}
	}
}

// validateVariants checks the logical models of c and reports whether there
// is one.
func (c Config) validateVariants() (bool, error) {
	idx := make(map[string]int, len(c.Models))
	for i, m := range c.Models {
		idx[m.Name] = i
	}
	owner := map[string]string{}
	logical := false
	for _, m := range c.Models {
		if len(m.Variants) == 0 {
			continue
		}
		logical = true
		switch {
		case m.Exec != 0:
			return false, cfgErr("model %q: a logical model (variants) has no exec_ms of its own: each variant has its own; remove exec_ms from %q", m.Name, m.Name)
		case m.Accelerator != "":
			return false, cfgErr("model %q: a logical model runs where its variants run; remove on: %q from it (each variant names its accelerator)", m.Name, m.Accelerator)
		case m.MaxBatch > 1 || len(m.BatchExec) > 0:
			return false, cfgErr("model %q: a logical model does not batch itself; set max_batch on its variants", m.Name)
		case m.Instances != 0:
			return false, cfgErr("model %q: a logical model has no instances of its own; set instances on its variants", m.Name)
		case m.Exclusive:
			return false, cfgErr("model %q: corun: false belongs on the variants of a logical model, not on it", m.Name)
		case len(c.Accelerators) == 0:
			return false, cfgErr("model %q: variants run on accelerators: declare accelerators (instead of slots), each variant naming its own", m.Name)
		}
		on := map[string]string{}
		for _, v := range m.Variants {
			i, ok := idx[v]
			switch {
			case !ok:
				return false, cfgErr("model %q: variant %q is not configured under models (add it with its exec_ms and accelerator)", m.Name, v)
			case v == m.Name:
				return false, cfgErr("model %q: is listed as its own variant; list the models it is built as", m.Name)
			case len(c.Models[i].Variants) > 0:
				return false, cfgErr("model %q: variant %q is itself a logical model; list its variants directly", m.Name, v)
			case owner[v] != "":
				return false, cfgErr("model %q: variant %q is already a variant of %q; a model is the variant of one logical model (list it once)", m.Name, v, owner[v])
			}
			owner[v] = m.Name
			a := c.Models[i].Accelerator
			if a == "" && len(c.Accelerators) == 1 {
				a = c.Accelerators[0].Name
			}
			if o, dup := on[a]; dup && a != "" {
				return false, cfgErr("model %q: variants %q and %q both run on accelerator %q: a frame would always take the same one; keep one variant per accelerator", m.Name, o, v, a)
			}
			on[a] = v
		}
	}
	if logical && c.UnknownStreams == DefaultContract {
		for _, s := range c.Streams {
			if n, ok := strings.CutPrefix(s.Name, "default/"); ok {
				if i, ok := idx[n]; ok && len(c.Models[i].Variants) > 0 {
					return false, cfgErr("stream %q: the name is the default contract of logical model %q; rename the stream", s.Name, n)
				}
			}
		}
	}
	return logical, nil
}

// newVariants returns the front's variant state for cfg, or nil when it has
// no logical model.
func newVariants(cfg Config) *variants {
	var v *variants
	for _, m := range cfg.Models {
		if len(m.Variants) == 0 {
			continue
		}
		if v == nil {
			v = &variants{models: map[string]*logicalModel{}, byName: map[string]int32{},
				defaults: cfg.UnknownStreams == DefaultContract}
		}
		lm := &logicalModel{name: m.Name, defName: "default/" + m.Name, variants: m.Variants, stream: -1}
		v.models[m.Name] = lm
		v.order = append(v.order, lm)
	}
	return v
}

// logicalModel reports whether model is logical.
func (v *variants) logicalModel(model string) bool {
	if v == nil {
		return false
	}
	_, ok := v.models[model]
	return ok
}

// addStream places the copies of logical stream st (front index g) in its
// variants' engines' configs and returns the first copy, which stands for it
// in the front's stream table.
func (v *variants) addStream(st StreamSpec, g int32, partOfModel map[string]int32, subs []Config, local []int32) streamRef {
	lm := v.models[st.Model]
	ls := logicalStream{g: g, model: lm, spec: st}
	for _, vn := range lm.variants {
		p := partOfModel[vn]
		c := st
		c.Model = vn
		subs[p].Streams = append(subs[p].Streams, c)
		ls.copies = append(ls.copies, streamRef{p, local[p]})
		local[p]++
	}
	v.byName[st.Name] = int32(len(v.streams))
	lm.streams++
	lm.stream = int32(len(v.streams))
	if lm.streams > 1 {
		lm.stream = -1
	}
	v.streams = append(v.streams, ls)
	return ls.copies[0]
}

// link wires the copies once the engines exist: their front index, their
// twins, the per-variant counters, and the routing of a request that names a
// variant without a stream (its own streams, never a copy).
func (v *variants) link(s *Scheduler) {
	for _, lm := range v.order {
		for _, vn := range lm.variants {
			lm.parts = append(lm.parts, s.partOfModel[vn])
		}
	}
	v.statOf = make([][]int32, len(s.accels))
	v.load = make([]busyShare, len(s.accels))
	for _, lm := range v.order {
		if len(lm.variants) > len(v.lands) {
			v.lands = make([]Time, len(lm.variants))
		}
	}
	for p := range s.accels {
		if e := s.accels[p].e; e != nil {
			v.statOf[p] = make([]int32, len(e.streams))
			for i := range v.statOf[p] {
				v.statOf[p][i] = -1
			}
		}
	}
	for li := range v.streams {
		ls := &v.streams[li]
		for ci, c := range ls.copies {
			a := &s.accels[c.part]
			a.global[c.local] = ls.g
			lc := &copyState{}
			for cj, o := range ls.copies {
				if cj != ci {
					lc.twins = append(lc.twins, twin{s.accels[o.part].e, o.local})
				}
			}
			a.e.streams[c.local].lc = lc
			v.statOf[c.part][c.local] = int32(len(v.stats))
			v.stats = append(v.stats, VariantStats{Stream: ls.spec.Name, Model: ls.model.name, Variant: ls.model.variants[ci]})
		}
	}
	if v.defaults {
		for _, lm := range v.order {
			for i, vn := range lm.variants {
				p := lm.parts[i]
				e := s.accels[p].e
				local := e.adhoc[e.modelByName[vn]]
				lm.defaults = append(lm.defaults, streamRef{p, local})
				v.statOf[p][local] = int32(len(v.stats))
				v.stats = append(v.stats, VariantStats{Stream: lm.defName, Model: lm.name, Variant: vn})
			}
		}
	}
	for p := range s.accels {
		e := s.accels[p].e
		if e == nil {
			continue
		}
		n := make([]int, len(e.models))
		for i := range e.streams {
			if st := &e.streams[i]; !st.adhoc && st.lc == nil {
				n[st.model]++
				e.byModel[st.model] = int32(i)
			}
		}
		for mi := range e.byModel {
			if n[mi] != 1 {
				e.byModel[mi] = -1
			}
		}
	}
}

// dispatched names the variant on a Dispatch of a logical model's frame and
// counts it; act is still in the engine's numbering.
func (v *variants) dispatched(p int32, e *Scheduler, act *Action) {
	ri := e.tokens.get(act.Token)
	if ri < 0 || !e.reqs[ri].variant {
		return
	}
	r := &e.reqs[ri]
	st := &e.streams[r.stream]
	act.Model = e.models[st.model].spec.Name
	if k := v.statOf[p][r.stream]; k >= 0 {
		v.stats[k].Dispatched++
	}
	if st.lc != nil {
		// One min_rate_hz budget for the stream, not one per variant.
		for _, t := range st.lc.twins {
			o := &t.e.streams[t.st]
			o.anchor, o.anchored = st.anchor, st.anchored
		}
	}
}

// arrive routes a request of a logical model: to the copy of its stream at
// the variant whose result lands first (see Variants in doc.go). It reports
// false for a request that is not a logical model's, which the front routes
// as usual.
func (v *variants) arrive(s *Scheduler, now Time, r Request, acts []Action) ([]Action, bool) {
	name := r.Stream
	if name == "" {
		name = r.Model
	}
	li, ok := v.byName[name]
	if !ok {
		if _, direct := s.partOfName[name]; direct {
			return acts, false
		}
		lm, logical := v.models[r.Model]
		switch {
		case !logical:
			return acts, false
		case r.Stream == "" && lm.stream >= 0:
			li = lm.stream
		case v.defaults:
			return v.arriveDefault(s, now, lm, r, acts), true
		default:
			code, reason := NotFound, ReasonUnknownStream
			if s.partOfToken(r.Token) >= 0 {
				code, reason = InvalidArgument, ReasonDuplicateToken
			}
			v.unrouted.Received++
			v.unrouted.Rejected++
			return append(acts, Action{Kind: Answer, Token: r.Token, Stream: -1, Code: code, Outcome: Rejected, Reason: reason}), true
		}
	}
	ls := &v.streams[li]
	if r.Model != ls.model.name {
		// Counted on the first copy, as its engine counts a refusal.
		code, reason := InvalidArgument, ReasonModelMismatch
		if s.partOfToken(r.Token) >= 0 {
			reason = ReasonDuplicateToken
		}
		c := ls.copies[0]
		e := s.accels[c.part].e
		e.streams[c.local].c.Received++
		e.streams[c.local].c.Rejected++
		return append(acts, Action{Kind: Answer, Token: r.Token, Stream: int(ls.g), Code: code, Outcome: Rejected, Reason: reason}), true
	}
	capture := r.Capture
	if capture == 0 || capture > now {
		capture = now
	}
	pinned := r.SequenceID != 0 && (r.SequenceStart || r.SequenceEnd)
	ci := -1
	if ls.spec.Queue == Latest && !pinned {
		// A copy holding a newer waiting frame takes the arrival: its
		// queue supersedes it, as one stream's would.
		for i, c := range ls.copies {
			e := s.accels[c.part].e
			st := &e.streams[c.local]
			if n := len(st.q); n > 0 && !e.reqs[st.q[n-1]].pinned() && e.reqs[st.q[n-1]].capture > capture {
				ci = i
			}
		}
	}
	if ci < 0 && r.SequenceID != 0 {
		// A sequence's state lives in one model's instance: all its
		// frames go to the same variant.
		ci = int(r.SequenceID % uint64(len(ls.copies)))
	}
	if ci < 0 {
		ci = v.choose(s, ls.copies, now, now, ls.spec.Class, ls.deadline(capture))
	}
	c := ls.copies[ci]
	r.Model, r.Stream, r.variant = ls.model.variants[ci], ls.spec.Name, true
	n0 := len(acts)
	acts = v.send(s, now, c, r, acts)
	for _, a := range acts[n0:] {
		if a.Kind == Answer && a.Token == r.Token && a.Outcome == Rejected {
			return acts, true // refused: nothing changes for the stream
		}
	}
	e := s.accels[c.part].e
	st := &e.streams[c.local]
	st.lc.shareArrival(st)
	if ls.spec.Queue == Latest {
		bound := capture
		if pinned {
			bound = Never // a pinned frame supersedes an unpinned waiting one whatever its capture
		}
		for i, o := range ls.copies {
			if i != ci {
				oe := s.accels[o.part].e
				n1 := len(acts)
				acts = s.translate(o.part, n1, oe.supersedeWaiting(now, &oe.streams[o.local], bound, acts))
			}
		}
	}
	return acts, true
}

// arriveDefault routes a request of a logical model under the default
// contract: to the default stream of the variant whose result lands first.
func (v *variants) arriveDefault(s *Scheduler, now Time, lm *logicalModel, r Request, acts []Action) []Action {
	var ci int
	if r.SequenceID != 0 {
		ci = int(r.SequenceID % uint64(len(lm.defaults)))
	} else {
		ci = v.choose(s, lm.defaults, now, now, BestEffort, Never)
	}
	// A stream name that no configured stream has (validateVariants)
	// routes to the variant's default stream.
	r.Model, r.Stream, r.variant = lm.variants[ci], lm.defName, true
	return v.send(s, now, lm.defaults[ci], r, acts)
}

// send hands r to the engine of copy c.
func (v *variants) send(s *Scheduler, now Time, c streamRef, r Request, acts []Action) []Action {
	dup := false
	if q := s.partOfToken(r.Token); q >= 0 && q != c.part {
		dup = true
	}
	n0 := len(acts)
	return s.translate(c.part, n0, s.accels[c.part].e.arrive(now, r, dup, acts))
}

// choose returns the copy to send a frame of class arriving at t to, fresh
// until deadline (Never: no deadline; see Variants in doc.go). Each copy's
// engine predicts when it would complete the frame; the target is the
// deadline and the end of the window the earliest of them lands in. Among the
// copies that would complete it by the target it takes the one where it lands
// first of those that cost nothing: no frame of another protected or high
// stream of its accelerator pushed past its window or deadline (squeeze), an
// accelerator not busy above busyHigh of late, a landing on time even if the
// jobs ahead of it end as late as their spread allows (a VLM's 200–340 ms).
// When each costs something, the one that costs least (one for each), ties
// to the first listed (in Variants order: the operator's preference decides
// which stream pays). When none would complete it by the target, or without a
// deadline, the one where it lands first (ties to the first listed).
func (v *variants) choose(s *Scheduler, copies []streamRef, now, t Time, class Class, deadline Time) int {
	lands := v.lands[:len(copies)]
	best := 0
	for i, c := range copies {
		e := s.accels[c.part].e
		lands[i] = e.landing(now, t, &e.streams[c.local], class, &v.free)
		if lands[i] < lands[best] {
			best = i
		}
	}
	target := deadline
	if st := &s.accels[copies[0].part].e.streams[copies[0].local]; st.gridSet && s.cfg.Order == OrderLaxity {
		target = min(target, st.windowEnd(st.win(lands[best])))
	}
	if deadline == Never || lands[best] > target {
		return best
	}
	inTime := 0
	for i := range copies {
		if lands[i] <= target {
			inTime++
		}
	}
	if inTime == 1 {
		return best // the only one in time: nothing to weigh
	}
	pick, least := best, math.MaxInt
	for i, c := range copies {
		if lands[i] > target {
			continue
		}
		e := s.accels[c.part].e
		cost := e.squeeze(now, t, &e.streams[c.local], target, &v.sq, &v.free)
		if lands[i].Add(e.spread(now)) > target {
			cost++ // the frame itself is at risk: its queue may end that much later
		}
		if v.share(s, c.part, now) > busyHigh {
			cost++
		}
		if cost < least || cost == 0 && least == 0 && lands[i] < lands[pick] {
			pick, least = i, cost
		}
	}
	return pick
}

// shareHorizon is the time constant of an accelerator's recent busy share:
// several frame periods, so that where the last frames of a logical stream
// went counts, and a long job (a VLM's) does not count for long after.
const shareHorizon = 250 * time.Millisecond

// busyHigh is the recent busy share above which an accelerator costs a frame
// placed there as much as a frame it pushes past its window: so busy, its
// queue is one late job away from pushing the next ones.
const busyHigh = 0.9

// busyShare follows an accelerator's recent busy share: the slot time its
// jobs held (dispatch to completion) per slot, averaged with an exponential
// decay of time constant shareHorizon.
type busyShare struct {
	at    Time
	busy  time.Duration // the engine's busy slot time at at
	share float64       // 0 at the start: a frame goes where it lands first until the share is known
}

// share updates and returns accelerator p's recent busy share at now.
func (v *variants) share(s *Scheduler, p int32, now Time) float64 {
	e, l := s.accels[p].e, &v.load[p]
	if now <= l.at {
		return l.share
	}
	b := e.busyTime
	if now > e.busyAt {
		b += time.Duration(e.busy) * now.Sub(e.busyAt)
	}
	dt := now.Sub(l.at)
	inst := float64(b-l.busy) / float64(dt) / float64(e.slots)
	l.share += (1 - math.Exp(-float64(dt)/float64(shareHorizon))) * (inst - l.share)
	l.at, l.busy = now, b
	return l.share
}

// deadline is when a frame of ls captured at capture stops being fresh.
func (ls *logicalStream) deadline(capture Time) Time {
	if ls.spec.MaxAge <= 0 {
		return Never
	}
	return capture.Add(ls.spec.MaxAge)
}

// maxAhead bounds the waiting requests per stream that landing places ahead
// of a frame (a longer queue only makes the variant later still).
const maxAhead = 64

// landing predicts when a frame of stream own arriving at t (≥ now) would
// complete on this engine: after the jobs at the backend (each slot free at
// the predicted end of its last job) and the waiting requests that would go
// before it — those of streams of its class or a stricter one, but not the
// frame its arrival supersedes (own's Latest queue) — placed on the slot that
// frees first, each at the engine's own price (estimate × margin at the
// occupancy it would start under).
func (s *Scheduler) landing(now, t Time, own *stream, class Class, buf *[]Time) Time {
	f := (*buf)[:0]
	for i := range s.slotRun {
		f = append(f, s.slotFree(i, now))
	}
	*buf = f
	if s.exclRunning && s.slots > 1 {
		m := now
		for _, x := range f {
			m = max(m, x)
		}
		for i := range f {
			f[i] = m
		}
	}
	s.syncCo(now) // price with the interference the frame would meet
	var start Time
	var c time.Duration
	place := func(mi int32, at Time) {
		if mi == own.model && s.capped(mi) {
			at = max(at, s.instanceAt(now, mi, 0, false)) // an instance of it must be free
		}
		k := 0
		for i := range f {
			if f[i] < f[k] {
				k = i
			}
		}
		start = max(f[k], at)
		if s.models[mi].spec.Exclusive && s.slots > 1 {
			for _, x := range f {
				start = max(start, x)
			}
			c = s.costAt(mi, 0, start)
			for i := range f {
				f[i] = start.Add(c)
			}
			return
		}
		occ := 0
		for i := range f {
			if i != k && f[i] > start {
				occ++
			}
		}
		c = s.costAt(mi, occ, start)
		f[k] = start.Add(c)
	}
	for i := range s.streams {
		p := &s.streams[i]
		if len(p.q) == 0 || p.class > class || (p == own && p.spec.Queue == Latest) {
			continue
		}
		for range min(len(p.q), maxAhead) {
			place(p.model, now)
		}
	}
	place(own.model, t)
	return start.Add(c)
}

// supersedeWaiting answers Aborted (superseded) the unpinned waiting frames
// of st captured at or before bound: a newer frame of its logical stream went
// to another variant.
func (s *Scheduler) supersedeWaiting(now Time, st *stream, bound Time, acts []Action) []Action {
	n := len(acts)
	for j := 0; j < len(st.q); {
		ri := st.q[j]
		if r := &s.reqs[ri]; !r.pinned() && r.capture <= bound {
			st.q = append(st.q[:j], st.q[j+1:]...)
			acts = s.answer(ri, Aborted, Superseded, ReasonSuperseded, acts)
			continue
		}
		j++
	}
	if len(acts) == n {
		return acts
	}
	return s.pass(now, acts)
}

// steer decides, for each logical stream, at which variant its next frame is
// expected — the one where it would land first if it arrived when predicted —
// and lets only that copy's engine guard it. An engine whose guard is lifted
// re-runs its pass: what the guard deferred may start.
func (v *variants) steer(s *Scheduler, now Time, acts []Action) []Action {
	for li := range v.streams {
		ls := &v.streams[li]
		if len(ls.copies) < 2 {
			continue
		}
		c0 := ls.copies[0]
		st := &s.accels[c0.part].e.streams[c0.local]
		if !st.seen || now.Sub(st.lastCapture) > 2*st.interval+st.maxAge {
			continue
		}
		iv := int64(st.interval)
		k := int64(1)
		if d := int64(now-st.lastCapture) - int64(s.cfg.CommitLead+st.lag); d >= 0 {
			k = d/iv + 1
		}
		a := (st.lastCapture + Time(k*iv)).Add(st.lag)
		best := v.choose(s, ls.copies, now, max(a, now), ls.spec.Class, ls.deadline(st.lastCapture+Time(k*iv)))
		for ci, c := range ls.copies {
			e := s.accels[c.part].e
			lc := e.streams[c.local].lc
			away := ci != best
			if away == lc.away {
				continue
			}
			lc.away = away
			if away {
				n0 := len(acts)
				acts = s.translate(c.part, n0, e.pass(now, acts))
			}
		}
	}
	return acts
}

// snapshot shows each logical stream once: its copies' counters summed, its
// coverage and AoI (shared by the copies) and its logical model; and the
// per-variant dispatch counts.
func (v *variants) snapshot(s *Scheduler, dst *Snapshot) {
	for li := range v.streams {
		ls := &v.streams[li]
		var sum StreamStats
		for ci, c := range ls.copies {
			cs := &s.accels[c.part].snap.Streams[c.local]
			if ci == 0 {
				sum = *cs
				sum.Model = ls.model.name
				continue
			}
			sum.Counters.addAll(cs.Counters)
			sum.BudgetRuns += cs.BudgetRuns
			sum.BudgetCost += cs.BudgetCost
			sum.BudgetBlocked += cs.BudgetBlocked
			sum.Probes += cs.Probes
			sum.Yielded += cs.Yielded
			sum.Held += cs.Held
			sum.BatchWaits += cs.BatchWaits
		}
		dst.Streams[ls.g] = sum
	}
	dst.Variants = append(dst.Variants, v.stats...)
	dst.Unrouted.Received += v.unrouted.Received
	dst.Unrouted.Rejected += v.unrouted.Rejected
}

// addAll adds every counter of o to c.
func (c *Counters) addAll(o Counters) {
	c.Received += o.Received
	c.Forwarded += o.Forwarded
	c.Superseded += o.Superseded
	c.LateDropped += o.LateDropped
	c.Rejected += o.Rejected
	c.BackendError += o.BackendError
	c.Cancelled += o.Cancelled
	c.Deferred += o.Deferred
	c.Waiting += o.Waiting
	c.Running += o.Running
}

// spread is how uncertain the end of the jobs ahead of a frame is: on the
// slot that frees first (where landing places it), the running job's
// predicted end less its earliest plausible one (p90 − p10: its commitAt was
// set from the p10), plus for a job committed behind it its predicted run less
// its p10. The width of the estimate stands for how late the jobs may end: a
// VLM's 200–340 ms leaves a frame behind it no promise.
func (s *Scheduler) spread(now Time) time.Duration {
	k := 0
	for i := range s.slotRun {
		if s.slotFree(i, now) < s.slotFree(k, now) {
			k = i
		}
	}
	var d time.Duration
	if x := s.slotRun[k]; x >= 0 {
		r := &s.reqs[x]
		d += r.predEnd.Sub(r.commitAt.Add(s.cfg.CommitLead))
	}
	if x := s.slotNext[k]; x >= 0 {
		r := &s.reqs[x]
		m := &s.models[s.streams[r.stream].model]
		p10 := s.coScale(m.win(int(r.occ), max(int(r.bsize), 1)).p10, r.start)
		d += max(r.predEnd.Sub(r.start)-p10, 0)
	}
	return d
}
