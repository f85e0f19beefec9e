package sched

import (
	"math/bits"
	"slices"
	"time"
)

// Delivery is one result handed to a client: when it was delivered and when
// the frame it was computed on was captured.
type Delivery struct {
	At      Time
	Capture Time
}

// Age returns the result's age at delivery.
func (d Delivery) Age() time.Duration { return d.At.Sub(d.Capture) }

// CoverageResult counts the complete period windows of a measurement, how
// many of them were covered, and how many got two or more fresh results
// (doubled: the spare result usually belonged to a neighbouring window that
// was left empty). Windows − Covered are the empty windows.
type CoverageResult struct {
	Windows int
	Covered int
	Doubled int
}

// Empty returns the number of windows without a fresh result.
func (c CoverageResult) Empty() int { return c.Windows - c.Covered }

// Ratio returns Covered/Windows, or 0 when there is no complete window.
func (c CoverageResult) Ratio() float64 {
	if c.Windows == 0 {
		return 0
	}
	return float64(c.Covered) / float64(c.Windows)
}

// Coverage measures vig's success metric for one stream. Time from start is
// cut into consecutive windows [start+k·period, start+(k+1)·period); only
// windows that end at or before end count. A window is covered when some
// delivery with At inside it has age At−Capture strictly below maxAge.
// Deliveries may be given in any order; those outside the windows are
// ignored.
func Coverage(start, end Time, period, maxAge time.Duration, ds []Delivery) CoverageResult {
	if period <= 0 || end <= start {
		return CoverageResult{}
	}
	n := int64(end.Sub(start) / period)
	if n == 0 {
		return CoverageResult{}
	}
	covered := make([]uint64, (n+63)/64)
	doubled := make([]uint64, (n+63)/64)
	for _, d := range ds {
		if d.At < start || d.Age() >= maxAge {
			continue
		}
		k := int64(d.At.Sub(start) / period)
		if k >= n {
			continue
		}
		if covered[k/64]&(1<<(k%64)) != 0 {
			doubled[k/64] |= 1 << (k % 64)
		}
		covered[k/64] |= 1 << (k % 64)
	}
	c, dd := 0, 0
	for i, w := range covered {
		c += bits.OnesCount64(w)
		dd += bits.OnesCount64(doubled[i])
	}
	return CoverageResult{Windows: int(n), Covered: c, Doubled: dd}
}

// AoIStats summarises the age of information of one stream over a
// measurement interval.
type AoIStats struct {
	P50, P95, P99 time.Duration
	Mean, Max     time.Duration
	// Span is the time over which AoI was defined: from the later of start
	// and the first delivery, to end. Before the first delivery there is
	// no information and so no age; a stream that never delivers has
	// Span 0 (report it as uncovered, not as fresh).
	Span time.Duration
}

// AoI computes the age of information of a stream exactly. At time t the AoI
// is t minus the capture time of the newest frame (largest Capture) whose
// result was delivered at or before t; it grows with slope 1 between
// deliveries and drops at each delivery of a newer frame — a sawtooth. The
// percentiles are those of AoI(t) with t uniformly distributed over
// [max(start, first delivery), end), obtained by integrating the sawtooth
// piece by piece (no sampling): Pq is the smallest whole nanosecond x such
// that AoI ≤ x for at least a fraction q of the time. Deliveries may be given
// in any order; ds is not modified.
func AoI(start, end Time, ds []Delivery) AoIStats {
	if end <= start || len(ds) == 0 {
		return AoIStats{}
	}
	sorted := slices.Clone(ds)
	slices.SortFunc(sorted, func(a, b Delivery) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	// Each segment is [t, t+l) during which AoI rises from a to a+l.
	type segment struct{ a, l int64 }
	var segs []segment
	newest, have := Time(0), false
	t := start
	for i := 0; i <= len(sorted); i++ {
		next := end
		if i < len(sorted) && sorted[i].At < end {
			next = sorted[i].At
		}
		if have && next > t {
			segs = append(segs, segment{a: int64(t - newest), l: int64(next - t)})
		}
		if next > t {
			t = next
		}
		if i == len(sorted) || sorted[i].At >= end {
			break
		}
		if c := sorted[i].Capture; !have || c > newest {
			newest, have = c, true
		}
	}
	if len(segs) == 0 {
		return AoIStats{}
	}
	var st AoIStats
	var total int64
	var sum float64
	lo, hi := segs[0].a, segs[0].a+segs[0].l
	for _, s := range segs {
		total += s.l
		sum += float64(s.a)*float64(s.l) + float64(s.l)*float64(s.l)/2
		lo = min(lo, s.a)
		hi = max(hi, s.a+s.l)
	}
	st.Span = time.Duration(total)
	st.Mean = time.Duration(sum / float64(total))
	st.Max = time.Duration(hi)
	// measure(x) is the time during which AoI ≤ x: within a segment AoI
	// rises with slope 1 from a, so that time is clamp(x−a, 0, l).
	measure := func(x int64) int64 {
		var m int64
		for _, s := range segs {
			if d := x - s.a; d > 0 {
				m += min(d, s.l)
			}
		}
		return m
	}
	pct := func(q float64) time.Duration {
		need := int64(q*float64(total) + 0.5)
		if need < 1 {
			need = 1
		}
		a, b := lo, hi // measure(b) == total ≥ need
		for a < b {
			mid := a + (b-a)/2
			if measure(mid) >= need {
				b = mid
			} else {
				a = mid + 1
			}
		}
		return time.Duration(a)
	}
	st.P50, st.P95, st.P99 = pct(0.50), pct(0.95), pct(0.99)
	return st
}

// coverageGauge is the sliding-window coverage of one stream for Snapshot:
// one bit per period window, for the last n windows, in a ring. Windows are
// counted from epoch, the capture time of the stream's first request.
type coverageGauge struct {
	epoch   Time
	started bool
	period  int64
	n       int64
	cur     int64 // newest window index with state in the ring; -1 before any
	bits    []uint64
}

func (g *coverageGauge) init(buf []uint64, n int64, period time.Duration) {
	g.bits, g.n, g.period, g.cur = buf, n, int64(period), -1
}

func (g *coverageGauge) start(t Time) {
	if !g.started {
		g.epoch, g.started = t, true
	}
}

func (g *coverageGauge) bit(k int64) (word int, mask uint64) {
	i := k % g.n
	return int(i / 64), 1 << (i % 64)
}

// deliver records a fresh result delivered at t.
func (g *coverageGauge) deliver(t Time) {
	if !g.started || t < g.epoch || g.n == 0 {
		return
	}
	k := int64(t-g.epoch) / g.period
	if k > g.cur {
		if k-g.cur >= g.n {
			clear(g.bits)
		} else {
			for j := g.cur + 1; j <= k; j++ {
				w, m := g.bit(j)
				g.bits[w] &^= m
			}
		}
		g.cur = k
	} else if k <= g.cur-g.n {
		return // older than the ring
	}
	w, m := g.bit(k)
	g.bits[w] |= m
}

// ratio returns the covered and total complete windows among the last n
// windows that ended at or before now.
func (g *coverageGauge) ratio(now Time) (covered, windows int) {
	if !g.started || now <= g.epoch || g.n == 0 {
		return 0, 0
	}
	kNow := int64(now-g.epoch) / g.period // current, incomplete window
	first := max(kNow-g.n, 0)
	for j := first; j < kNow; j++ {
		windows++
		if j <= g.cur && j > g.cur-g.n {
			if w, m := g.bit(j); g.bits[w]&m != 0 {
				covered++
			}
		}
	}
	return covered, windows
}
