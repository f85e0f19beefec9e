package doctor

import "sort"

// task is one stream as the response-time analysis sees it. Times are integer
// nanoseconds so that the floors and ceilings of the analysis are exact.
type task struct {
	name  string
	c     int64 // execution time (the model's exec_ms prior)
	t     int64 // minimum inter-arrival: the sensor's frame interval
	d     int64 // freshness bound: max_age
	alone bool  // the model runs alone on the accelerator (corun: false)
}

// rta is the result of one response-time analysis.
type rta struct {
	unbounded bool    // the level-i busy period does not end: the load at this priority is ≥ 100 %
	busy      int64   // length of the level-i busy period
	r         []int64 // response time of job q = 0, 1, … of the busy period
	worst     int     // q with the largest response time
}

// maxR is the worst response time over the busy period.
func (a rta) maxR() int64 { return a.r[a.worst] }

// Bounds that keep the integer arithmetic far from overflow, whatever a config says.
const (
	// horizon bounds the busy-period iteration: a longer busy period is treated as
	// unbounded (no contract of a camera-rate stream is met after a minute of backlog).
	horizon = int64(60e9)
	// maxJobs bounds the jobs checked in one busy period.
	maxJobs = 100_000
	// minInterval is the shortest frame interval the analysis uses (0.1 ms); with
	// horizon it bounds every product below 2^62.
	minInterval = int64(100e3)
	// maxSteps bounds the fixed-point iterations of one analysis; a config that
	// needs more is reported as unbounded rather than hanging doctor.
	maxSteps = 1_000_000
)

// responseTime runs the non-preemptive fixed-priority response-time analysis of
// Davis, Burns, Bril and Lukkien (2007), "Controller Area Network schedulability
// analysis: refuted, revisited and revised", for task i:
//
//	busy period   t    = B + Σ_{j ∈ hep(i)} ⌈t/T_j⌉·C_j
//	jobs in it    Q    = ⌈t/T_i⌉
//	queueing      w(q) = B + q·C_i + Σ_{j ∈ hp(i)} (⌊w(q)/T_j⌋ + 1)·C_j
//	response      R(q) = w(q) − q·T_i + C_i,   q = 0 … Q−1
//
// Every job of the busy period is checked, not only the first: with non-preemptive
// execution a later job can be pushed further than the first one (the error in the
// original CAN analysis that the paper corrects). ⌊w/T_j⌋+1 is the paper's
// ⌈(w+ε)/T_j⌉ with ε = 1 ns.
//
// With slots > 1 the analysis is an approximation, not a proven bound: every amount of
// work queued ahead of job q (its own predecessors and the higher-priority jobs) is
// divided evenly over the slots, and B (computed by blocking) is the time until the
// first slot running lower-priority work frees up. A task whose model runs alone needs
// the whole accelerator and is analysed as if on one slot.
func responseTime(i task, hp []task, b int64, slots int) rta {
	m := int64(slots)
	if m < 1 || i.alone {
		m = 1
	}
	// The busy period ends only if the load at level i is below the slots' capacity:
	// U ≥ m is rejected up front, and the iteration bounds catch the rest.
	u := float64(i.c) / float64(i.t)
	for _, j := range hp {
		u += float64(j.c) / float64(j.t)
	}
	if u >= float64(m) {
		return rta{unbounded: true}
	}
	// The last job of i in the busy period runs undivided (it is one job on one slot);
	// with one slot this is exactly t = B + Σ_hep ⌈t/T_j⌉·C_j.
	t := b + ceilDiv(sumC(hp), m) + i.c
	steps := 0
	for {
		if steps++; steps > maxSteps {
			return rta{unbounded: true}
		}
		next := b + ceilDiv((ceilDiv(t, i.t)-1)*i.c+interference(hp, t, true), m) + i.c
		if next == t {
			break
		}
		t = next
		if t > horizon {
			return rta{unbounded: true}
		}
	}
	a := rta{busy: t}
	jobs := ceilDiv(t, i.t)
	if jobs > maxJobs {
		return rta{unbounded: true}
	}
	for q := int64(0); q < jobs; q++ {
		w := b + ceilDiv(q*i.c, m)
		for {
			if steps++; steps > maxSteps {
				return rta{unbounded: true}
			}
			next := b + ceilDiv(q*i.c+interference(hp, w, false), m)
			if next == w {
				break
			}
			w = next
			if w > horizon {
				return rta{unbounded: true}
			}
		}
		a.r = append(a.r, w-q*i.t+i.c)
		if a.r[q] > a.r[a.worst] {
			a.worst = int(q)
		}
	}
	return a
}

// interference is the work of the tasks in hp released in a window of length w:
// Σ ⌈w/T_j⌉·C_j for the busy period (ceil), Σ (⌊w/T_j⌋+1)·C_j for the queueing
// delay of a job that has not started yet.
func interference(hp []task, w int64, ceil bool) int64 {
	var s int64
	for _, j := range hp {
		n := w/j.t + 1
		if ceil {
			n = ceilDiv(w, j.t)
		}
		s += n * j.c
	}
	return s
}

// blocking returns B_i, the longest time a job can wait for lower-priority work that
// started just before it arrived and cannot be preempted. On one slot that is the
// longest lower-priority job. On m slots a job waits until the first of the (at most m)
// running lower-priority jobs ends, so B is the m-th longest of them; a lower-priority
// model that runs alone occupies every slot and blocks for its whole length.
func blocking(i task, lower []task, slots int) int64 {
	var alone int64
	var cs []int64
	for _, j := range lower {
		if j.alone || slots <= 1 || i.alone {
			alone = max(alone, j.c)
			continue
		}
		cs = append(cs, j.c)
	}
	var mth int64
	if len(cs) >= slots {
		sort.Slice(cs, func(a, b int) bool { return cs[a] > cs[b] })
		mth = cs[slots-1]
	}
	return max(alone, mth)
}

// tolerableBlocking returns the largest B ≤ limit for which task i still meets its
// deadline, or -1 when it misses even without blocking. R is monotone in B, so a
// binary search over nanoseconds finds it.
func tolerableBlocking(i task, hp []task, limit int64, slots int) int64 {
	fits := func(b int64) bool {
		a := responseTime(i, hp, b, slots)
		return !a.unbounded && a.maxR() <= i.d
	}
	if !fits(0) {
		return -1
	}
	lo, hi := int64(0), limit // fits(lo) holds
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func sumC(ts []task) int64 {
	var s int64
	for _, t := range ts {
		s += t.c
	}
	return s
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}
