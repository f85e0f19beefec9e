package sched

import "time"

// sqJob is one job of squeeze's schedule.
type sqJob struct {
	a, target Time
	c         time.Duration
	class     Class
	own       bool
	done      [2]Time // predicted completion without and with the own frame
}

// squeezeMargin is how close to its target a frame may be predicted to
// complete and still count as on time: the prices are p90s, and a frame
// predicted within it of a window's end lands past it often enough to cost
// the window.
const squeezeMargin = 2 * time.Millisecond

// maxSqueeze bounds the jobs squeeze schedules (its masks are 32 bits): on an
// engine with more streams, the first 15 in stream order are priced.
const maxSqueeze = 16

// squeeze counts the frames of other contract streams that a frame of stream
// own arriving at t (≥ now), due by target, would push past their own target
// on this engine. It schedules twice, without and with that frame: the jobs at
// the backend (each slot free at the predicted end of its last job), each
// other protected or high stream's waiting head and, for a stream
// with none, its next predicted frame, each at the engine's price; a slot that
// frees takes the arrived job with the earliest target (the laxity order, for
// jobs of one period) — a protected own frame before a laxer class's, as
// admission holds those back for it — else the next to arrive; each job is
// priced as alone on its slot (occupancy 0). A frame's target is its
// deadline and the end of the window its stream next needs — the one after
// its newest claimed window, or its capture's if later: a stream whose results
// land a window late keeps that pace (Landing in a window, doc.go) and loses
// nothing to a frame that leaves it there. It counts the frames that meet
// their target (less squeezeMargin) without the own frame and miss it with it.
func (s *Scheduler) squeeze(now, t Time, own *stream, target Time, buf *[]sqJob, free *[]Time) int {
	jobs := (*buf)[:0]
	s.syncCo(now)
	for i := range s.streams {
		p := &s.streams[i]
		if p == own || p.adhoc || p.class == BestEffort || len(jobs) == maxSqueeze-1 {
			continue
		}
		if len(p.q) > 0 {
			r := &s.reqs[p.q[0]]
			if r.deadline == Never {
				continue
			}
			c := s.costAt(p.model, 0, now)
			k := s.key(p, r, now, c)
			if k.extra {
				continue // its window is covered: an extra loses nothing
			}
			jobs = append(jobs, sqJob{a: now, c: c, target: now.Add(c) + Time(k.lax), class: p.class})
			continue
		}
		a, capture, ok := s.next(now, p, own, own.class)
		if !ok {
			continue
		}
		w := max(p.win(capture), s.claimed(p)+1)
		jobs = append(jobs, sqJob{a: a, c: s.costAt(p.model, 0, a), target: min(capture.Add(p.maxAge), p.windowEnd(w)), class: p.class})
	}
	jobs = append(jobs, sqJob{a: t, c: s.costAt(own.model, 0, t), target: target, class: own.class, own: true})
	*buf = jobs
	for with := range 2 {
		f := (*free)[:0]
		for i := range s.slotRun {
			f = append(f, s.slotFree(i, now))
		}
		*free = f
		var done uint32
		for {
			k := 0
			for i := range f {
				if f[i] < f[k] {
					k = i
				}
			}
			pick := -1
			for j := range jobs {
				jb := &jobs[j]
				if done&(1<<j) != 0 || (jb.own && with == 0) {
					continue
				}
				if pick < 0 {
					pick = j
					continue
				}
				if sqBefore(jb, &jobs[pick], f[k]) {
					pick = j
				}
			}
			if pick < 0 {
				break
			}
			jb := &jobs[pick]
			done |= 1 << pick
			jb.done[with] = max(f[k], jb.a).Add(jb.c)
			f[k] = jb.done[with]
		}
	}
	n := 0
	for j := range jobs {
		if jb := &jobs[j]; !jb.own && jb.done[0] <= jb.target-Time(squeezeMargin) && jb.done[1] > jb.target-Time(squeezeMargin) {
			n++
		}
	}
	return n
}

// sqBefore reports whether job x goes before y on a slot free at free: the
// one that can start first; of two that can start together, a protected own
// frame before a laxer class's (admission holds those back for it), else the
// earlier target.
func sqBefore(x, y *sqJob, free Time) bool {
	sx, sy := max(x.a, free), max(y.a, free)
	if sx != sy {
		return sx < sy
	}
	if x.own && x.class == Protected && y.class > Protected {
		return true
	}
	if y.own && y.class == Protected && x.class > Protected {
		return false
	}
	return x.target < y.target
}
