package sched

import (
	"slices"
	"time"
)

// window is the estimator for one (model, occupancy) pair: the p90 of the
// last n execution times. It starts full of copies of the prior, so a single
// outlier (a cold first inference, a GC pause) cannot move the estimate:
// the p90 moves only once more than a tenth of the window agrees. Upward
// changes therefore show after ~n/10 samples, downward ones after ~9n/10.
//
// ring holds samples in arrival order; sorted holds the same multiset in
// order, maintained by one removal and one insertion per sample, so adding a
// sample costs O(n) moves and no allocation.
type window struct {
	ring   []int64
	sorted []int64
	pos    int
	real   int // samples measured since the seeds (≤ len(ring))
	p90    time.Duration
	p10    time.Duration // the early end pipelined dispatch commits against
	p50    time.Duration // what batching weighs a frame's added cost by
	seedv  time.Duration // the value of its seeds
}

func (w *window) init(buf []int64, prior time.Duration) {
	n := len(buf) / 2
	w.ring, w.sorted = buf[:n:n], buf[n:]
	w.seed(prior)
}

// seed fills the window with the prior and forgets measured samples.
func (w *window) seed(prior time.Duration) {
	for i := range w.ring {
		w.ring[i] = int64(prior)
		w.sorted[i] = int64(prior)
	}
	w.pos, w.real, w.seedv = 0, 0, prior
	w.p90, w.p10, w.p50 = prior, prior, prior
}

func (w *window) add(d time.Duration) {
	if d < 1 {
		d = 1
	}
	old := w.ring[w.pos]
	w.ring[w.pos] = int64(d)
	if w.pos++; w.pos == len(w.ring) {
		w.pos = 0
	}
	if w.real < len(w.ring) {
		w.real++
	}
	s := w.sorted
	i, _ := slices.BinarySearch(s, old)
	j, _ := slices.BinarySearch(s, int64(d))
	// Remove s[i] and insert d at its place, shifting the elements between.
	switch {
	case j > i:
		copy(s[i:j-1], s[i+1:j])
		s[j-1] = int64(d)
	case j < i:
		copy(s[j+1:i+1], s[j:i])
		s[j] = int64(d)
	default:
		s[i] = int64(d)
	}
	w.p90 = time.Duration(s[p90Index(len(s))])
	w.p10 = time.Duration(s[p10Index(len(s))])
	w.p50 = time.Duration(s[len(s)/2])
}

// fastest is the shortest execution time in the window.
func (w *window) fastest() time.Duration { return time.Duration(w.sorted[0]) }

// p90Index is the index of the 90th percentile (nearest rank) in a sorted
// slice of n elements.
func p90Index(n int) int { return (9*n+9)/10 - 1 }

// p10Index is the index of the 10th percentile (nearest rank).
func p10Index(n int) int { return max((n+9)/10-1, 0) }
