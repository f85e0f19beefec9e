package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the q-quantile (0 ≤ q ≤ 1) of xs by the nearest-rank method:
// the smallest value such that at least a fraction q of the values are ≤ it. xs need
// not be sorted and is not modified. It returns 0 for an empty slice.
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return percentileSorted(s, q)
}

func percentileSorted(s []float64, q float64) float64 {
	switch {
	case q <= 0:
		return s[0]
	case q >= 1:
		return s[len(s)-1]
	}
	rank := int(math.Ceil(q * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

// Median returns the median of xs: the middle value, or the mean of the two middle
// values for an even count. It returns 0 for an empty slice.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Dist summarises a sample of latencies in milliseconds.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Summarize computes the distribution of xs (milliseconds).
func Summarize(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Dist{N: len(s), P50: percentileSorted(s, 0.50), P95: percentileSorted(s, 0.95),
		P99: percentileSorted(s, 0.99), Max: s[len(s)-1]}
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sortFloats(xs []float64) { slices.Sort(xs) }

// Slope returns the least-squares slope of ys against xs (0 when xs has no
// spread).
func Slope(xs, ys []float64) float64 {
	n := min(len(xs), len(ys))
	if n < 2 {
		return 0
	}
	var mx, my float64
	for i := range n {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/float64(n), my/float64(n)
	var sxy, sxx float64
	for i := range n {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}
