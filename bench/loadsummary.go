package bench

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
)

// Lat is a latency distribution in milliseconds with the tail the soak reports.
type Lat struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

// SummarizeLat computes the distribution of xs (milliseconds).
func SummarizeLat(xs []float64) Lat {
	if len(xs) == 0 {
		return Lat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Lat{N: len(s), P50: percentileSorted(s, 0.50), P99: percentileSorted(s, 0.99), P999: percentileSorted(s, 0.999), Max: s[len(s)-1]}
}

// LoadStream is one stream's figures in an overload or soak run.
type LoadStream struct {
	Stream   string  `json:"stream"`
	Class    string  `json:"class"`
	Factor   int     `json:"factor"`   // × the contracted frame rate
	FrameMs  float64 `json:"frame_ms"` // the sensor's frame interval
	PeriodMs float64 `json:"period_ms"`
	MaxAgeMs float64 `json:"max_age_ms"`
	// Bound is what vig's queue for the stream may hold (capacity; LATEST: 1);
	// MaxWaiting the most that any sample saw waiting.
	Bound      int     `json:"queue_bound"`
	MaxWaiting float64 `json:"max_waiting"`
	SensorStats
	// Client side: results received and calls that failed (superseded,
	// late-dropped, …); Answered is their sum.
	Delivered uint64 `json:"delivered"`
	Errors    uint64 `json:"errors"`
	Answered  uint64 `json:"answered"`
	// vig's side, in the scrape after every call returned: what it received,
	// what it answered (Σ outcomes), by outcome.
	VigReceived float64            `json:"vig_received"`
	VigAnswered float64            `json:"vig_answered"`
	Outcomes    map[string]float64 `json:"outcomes"`
	Coverage    float64            `json:"coverage"` // as the wire benchmark computes it
	Windows     int                `json:"windows"`
	Covered     int                `json:"covered"`
	// Latency is send → answer of the delivered results (a frame is sent at its
	// capture time, so this is also the result's age on arrival).
	Latency Lat `json:"latency"`
}

// classRank orders streams protected first.
func classRank(c string) int {
	switch c {
	case config.ClassProtected:
		return 0
	case config.ClassHigh:
		return 1
	}
	return 2
}

func latencies(ds []sched.Delivery) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d.At-d.Capture) / 1e6
	}
	return out
}

// summarizeStreams computes each stream's figures, protected streams first.
func summarizeStreams(run *loadRun) []LoadStream {
	var out []LoadStream
	for _, st := range run.Streams {
		s := st.Stream
		ls := LoadStream{Stream: s.Name, Class: s.Class, Factor: st.Factor, FrameMs: ms(st.Interval), PeriodMs: ms(s.Period()), MaxAgeMs: ms(s.MaxAge()),
			Bound: s.Capacity, SensorStats: st.Stats, Delivered: uint64(len(st.Deliveries)), Errors: st.Errors,
			Answered: uint64(len(st.Deliveries)) + st.Errors, Latency: SummarizeLat(latencies(st.Deliveries))}
		for _, smp := range run.Samples {
			ls.MaxWaiting = max(ls.MaxWaiting, smp.Streams[s.Name].Waiting)
		}
		if c, ok := run.Final.Streams[s.Name]; ok {
			ls.VigReceived, ls.VigAnswered, ls.Outcomes = c.Received, c.Finished(), c.Outcomes
		}
		cov := sched.Coverage(sched.Time(run.Start), sched.Time(run.End), s.Period(), s.MaxAge(), st.Deliveries)
		ls.Coverage, ls.Windows, ls.Covered = cov.Ratio(), cov.Windows, cov.Covered
		out = append(out, ls)
	}
	slices.SortStableFunc(out, func(a, b LoadStream) int { return cmp.Compare(classRank(a.Class), classRank(b.Class)) })
	return out
}

// LoadChecks are the invariants of TestOverloadTenTimes, over a whole run.
type LoadChecks struct {
	Scrapes      int `json:"scrapes"`
	ScrapeErrors int `json:"scrape_errors"`
	// UnbalancedScrapes counted scrapes in which some stream's received ≠ Σ
	// outcomes + in flight; Unbalanced shows the first few.
	UnbalancedScrapes int      `json:"unbalanced_scrapes"`
	Unbalanced        []string `json:"unbalanced,omitempty"`
	// OverBound counted scrapes in which some stream had more waiting than its
	// queue's bound.
	OverBoundScrapes int      `json:"over_bound_scrapes"`
	OverBound        []string `json:"over_bound,omitempty"`
	// Every frame sent was answered once (client side), and vig's count of
	// what it received and answered equals the clients'; Mismatches says where
	// not.
	CountsMatch bool     `json:"counts_match"`
	Mismatches  []string `json:"mismatches,omitempty"`
	// InFlightAfter is what vig still held after every call returned (want 0).
	InFlightAfter float64 `json:"in_flight_after"`
}

// OK says whether every check held.
func (c LoadChecks) OK() bool {
	return c.ScrapeErrors == 0 && c.UnbalancedScrapes == 0 && c.OverBoundScrapes == 0 && c.CountsMatch && c.InFlightAfter == 0
}

const maxListed = 5

// checkRun evaluates the invariants over the samples, the final scrape and the
// client-side counts.
func checkRun(run *loadRun, streams []LoadStream) LoadChecks {
	c := LoadChecks{CountsMatch: true}
	bounds := map[string]int{}
	for _, s := range streams {
		bounds[s.Stream] = s.Bound
	}
	for _, smp := range append(slices.Clone(run.Samples), run.Final) {
		c.Scrapes++
		if smp.Err != "" {
			c.ScrapeErrors++
			continue
		}
		if u := smp.Unbalanced(); len(u) > 0 {
			c.UnbalancedScrapes++
			if len(c.Unbalanced) < maxListed {
				c.Unbalanced = append(c.Unbalanced, fmt.Sprintf("t=%.0f s %s", smp.T, u[0]))
			}
		}
		over := false
		for name, b := range bounds {
			if w := smp.Streams[name].Waiting; w > float64(b) {
				over = true
				if len(c.OverBound) < maxListed {
					c.OverBound = append(c.OverBound, fmt.Sprintf("t=%.0f s %s: %v waiting, bound %d", smp.T, name, w, b))
				}
			}
		}
		if over {
			c.OverBoundScrapes++
		}
	}
	mismatch := func(format string, args ...any) {
		c.CountsMatch = false
		c.Mismatches = append(c.Mismatches, fmt.Sprintf(format, args...))
	}
	for _, s := range streams {
		if s.Answered != s.Sent {
			mismatch("%s: %d frames sent, %d answered", s.Stream, s.Sent, s.Answered)
		}
		if uint64(s.VigReceived) != s.Sent {
			mismatch("%s: vig received %v, the sensor sent %d", s.Stream, s.VigReceived, s.Sent)
		}
		if uint64(s.VigAnswered) != s.Answered {
			mismatch("%s: vig answered %v, the sensor got %d answers", s.Stream, s.VigAnswered, s.Answered)
		}
		if fc, ok := run.Final.Streams[s.Stream]; ok {
			c.InFlightAfter += fc.Waiting + fc.Running
		} else {
			mismatch("%s: not in vig's metrics", s.Stream)
		}
	}
	return c
}

// MemStats summarises vig's resources over a run's samples.
type MemStats struct {
	Samples   int    `json:"samples"`
	MinRSS    uint64 `json:"rss_min_bytes"`
	MedianRSS uint64 `json:"rss_median_bytes"`
	MaxRSS    uint64 `json:"rss_max_bytes"`
	// First10 and Last10 are the median RSS of the samples in the first and
	// the last 10 s; Growth is Last10 − First10.
	First10    uint64     `json:"rss_first_10s_bytes"`
	Last10     uint64     `json:"rss_last_10s_bytes"`
	Growth     int64      `json:"rss_growth_bytes"`
	GrowthPct  float64    `json:"rss_growth_pct"`
	Goroutines [2]int     `json:"goroutines_min_max"`
	FDs        [2]int     `json:"open_fds_min_max"`
	Load1      [2]float64 `json:"load1_min_max"` // the machine's 1-minute load average
}

// Memory computes MemStats over samples (those with an error are skipped) of a
// run that lasted dur seconds.
func Memory(samples []Sample, dur float64) MemStats {
	var rss, first, last []float64
	m := MemStats{}
	for _, s := range samples {
		if s.Err != "" {
			continue
		}
		m.Samples++
		rss = append(rss, float64(s.RSS))
		if s.T <= 10 {
			first = append(first, float64(s.RSS))
		}
		if s.T > dur-10 {
			last = append(last, float64(s.RSS))
		}
		if m.Samples == 1 {
			m.Goroutines, m.FDs = [2]int{s.Goroutines, s.Goroutines}, [2]int{s.FDs, s.FDs}
			m.Load1 = [2]float64{s.Load1, s.Load1}
		}
		m.Goroutines = [2]int{min(m.Goroutines[0], s.Goroutines), max(m.Goroutines[1], s.Goroutines)}
		m.FDs = [2]int{min(m.FDs[0], s.FDs), max(m.FDs[1], s.FDs)}
		m.Load1 = [2]float64{min(m.Load1[0], s.Load1), max(m.Load1[1], s.Load1)}
	}
	if len(rss) == 0 {
		return m
	}
	m.MinRSS, m.MaxRSS = uint64(slices.Min(rss)), uint64(slices.Max(rss))
	m.MedianRSS = uint64(Median(rss))
	m.First10, m.Last10 = uint64(Median(first)), uint64(Median(last))
	m.Growth = int64(m.Last10) - int64(m.First10)
	if m.First10 > 0 {
		m.GrowthPct = 100 * float64(m.Growth) / float64(m.First10)
	}
	return m
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
