package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vig-edge/vig/agent/sched"
)

// SoakOptions configures the soak benchmark.
type SoakOptions struct {
	VigBinary string
	Scenario  []byte        // scenario B's YAML
	Duration  time.Duration // default 10 min
	RowEvery  time.Duration // one report row per interval, default 1 min
	Rule      FlatRule      // default DefaultFlatRule
	TempDir   string
	Progress  func(format string, args ...any)
}

// FlatRule is what "flat" means for a soak: the last row compared with the
// second (the first includes the warm-up: connections, the estimator's first
// samples, the Go heap reaching its working size).
type FlatRule struct {
	RSSPct        float64 `json:"rss_pct"`         // the last row's median RSS may exceed row 2's by this share …
	RSSSlackBytes uint64  `json:"rss_slack_bytes"` // … plus this much
	Goroutines    int     `json:"goroutines"`      // the last row's most goroutines ≤ row 2's most + this
	FDs           int     `json:"open_fds"`        // the last row's most open fds ≤ row 2's most + this
}

// DefaultFlatRule: RSS within 10 % + 2 MiB, goroutines within 5, fds within 2.
var DefaultFlatRule = FlatRule{RSSPct: 10, RSSSlackBytes: 2 << 20, Goroutines: 5, FDs: 2}

func (r FlatRule) String() string {
	return fmt.Sprintf("flat when the last row's median RSS ≤ row 2's × %.2f + %.0f MiB, the last row's most goroutines ≤ row 2's + %d and its most open fds ≤ row 2's + %d (row 1 is warm-up; rows with no sample are not judged)",
		1+r.RSSPct/100, mib(r.RSSSlackBytes), r.Goroutines, r.FDs)
}

// SoakRow is one interval of a soak.
type SoakRow struct {
	Row        int     `json:"row"` // 1-based
	FromS      float64 `json:"from_s"`
	ToS        float64 `json:"to_s"`
	Samples    int     `json:"samples"`
	RSS        uint64  `json:"rss_median_bytes"`
	RSSMax     uint64  `json:"rss_max_bytes"`
	Goroutines int     `json:"goroutines_max"`
	FDs        int     `json:"open_fds_max"`
	// Heap is the median of the samples' Go heap in use, HeapObjects of their
	// live objects (0 when vig's metrics do not say).
	Heap        uint64 `json:"heap_inuse_median_bytes"`
	HeapObjects uint64 `json:"heap_objects_median"`
	// Load1 is the machine's 1-minute load average, the most any sample saw.
	Load1 float64 `json:"load1_max"`
	// Latency per stream (in the soak's stream order) of the results delivered
	// in the interval.
	Latency []Lat `json:"latency"`
}

// FlatVerdict is the soak's judgement under its rule.
type FlatVerdict struct {
	Judged bool     `json:"judged"`
	Flat   bool     `json:"flat"`
	Rule   string   `json:"rule"`
	Checks []string `json:"checks"` // each comparison, with its numbers
}

// JudgeFlat applies rule to rows (at least 3 with samples).
func JudgeFlat(rows []SoakRow, rule FlatRule) FlatVerdict {
	v := FlatVerdict{Rule: rule.String()}
	if len(rows) < 3 {
		v.Checks = []string{fmt.Sprintf("not judged: %d rows, the rule needs 3 or more", len(rows))}
		return v
	}
	ref, last := rows[1], rows[len(rows)-1]
	if ref.Samples == 0 || last.Samples == 0 {
		v.Checks = []string{"not judged: row 2 or the last row has no sample"}
		return v
	}
	v.Judged, v.Flat = true, true
	check := func(ok bool, format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if !ok {
			v.Flat = false
			s = "NOT FLAT: " + s
		}
		v.Checks = append(v.Checks, s)
	}
	limit := float64(ref.RSS)*(1+rule.RSSPct/100) + float64(rule.RSSSlackBytes)
	check(float64(last.RSS) <= limit, "RSS: row %d %.1f MiB, row 2 %.1f MiB, limit %.1f MiB", last.Row, mib(last.RSS), mib(ref.RSS), limit/(1<<20))
	check(last.Goroutines <= ref.Goroutines+rule.Goroutines, "goroutines: row %d %d, row 2 %d, limit %d", last.Row, last.Goroutines, ref.Goroutines, ref.Goroutines+rule.Goroutines)
	check(last.FDs <= ref.FDs+rule.FDs, "open fds: row %d %d, row 2 %d, limit %d", last.Row, last.FDs, ref.FDs, ref.FDs+rule.FDs)
	return v
}

// SoakRows cuts a run of dur into rows of every: samples by their time, each
// stream's deliveries by their arrival (an answer after the end of the run lands
// in the last row). deliveries[i] are stream i's, times relative to start.
func SoakRows(samples []Sample, deliveries [][]sched.Delivery, start int64, dur, every time.Duration) []SoakRow {
	n := int(dur / every)
	if dur%every != 0 {
		n++
	}
	n = max(n, 1)
	rows := make([]SoakRow, n)
	rowOf := func(t float64) int { // t in seconds since start; a reading at the row's end belongs to it
		i := int((t*1e9 - 1) / float64(every))
		return min(max(i, 0), n-1)
	}
	rss, heap, objs := make([][]float64, n), make([][]float64, n), make([][]float64, n)
	for i := range rows {
		rows[i].Row, rows[i].FromS = i+1, float64(i)*every.Seconds()
		rows[i].ToS = min(float64(i+1)*every.Seconds(), dur.Seconds())
	}
	for _, s := range samples {
		if s.Err != "" {
			continue
		}
		r := &rows[rowOf(s.T)]
		r.Samples++
		rss[r.Row-1] = append(rss[r.Row-1], float64(s.RSS))
		heap[r.Row-1] = append(heap[r.Row-1], float64(s.HeapInuse))
		objs[r.Row-1] = append(objs[r.Row-1], float64(s.HeapObjects))
		r.RSSMax = max(r.RSSMax, s.RSS)
		r.Goroutines, r.FDs = max(r.Goroutines, s.Goroutines), max(r.FDs, s.FDs)
		r.Load1 = max(r.Load1, s.Load1)
	}
	for i := range rows {
		rows[i].RSS = uint64(Median(rss[i]))
		rows[i].Heap, rows[i].HeapObjects = uint64(Median(heap[i])), uint64(Median(objs[i]))
		for _, ds := range deliveries {
			var xs []float64
			for _, d := range ds {
				if rowOf(float64(int64(d.At)-start)/1e9) == i {
					xs = append(xs, float64(d.At-d.Capture)/1e6)
				}
			}
			rows[i].Latency = append(rows[i].Latency, SummarizeLat(xs))
		}
	}
	return rows
}

// SoakResult is the soak benchmark's output.
type SoakResult struct {
	Duration time.Duration `json:"duration_ns"`
	RowEvery time.Duration `json:"row_every_ns"`
	Depth    int           `json:"client_depth"`
	Config   string        `json:"vig_config"`
	// StreamNames is the order of each row's Latency.
	StreamNames []string     `json:"row_streams"`
	Rows        []SoakRow    `json:"rows"`
	Flat        FlatVerdict  `json:"flat"`
	Memory      MemStats     `json:"memory"`
	Checks      LoadChecks   `json:"checks"`
	Streams     []LoadStream `json:"streams"` // protected first
	Samples     []Sample     `json:"samples"`
}

// RunSoak runs scenario B's sensors at their contracted rates against a vig
// child process for o.Duration and reports vig's resources and the latency of
// every stream per o.RowEvery.
func RunSoak(ctx context.Context, o SoakOptions) (*SoakResult, error) {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Minute
	}
	if o.RowEvery <= 0 {
		o.RowEvery = time.Minute
	}
	if o.Rule == (FlatRule{}) {
		o.Rule = DefaultFlatRule
	}
	if o.Progress != nil {
		o.Progress("soak: scenario B at contracted rates (%v)", o.Duration)
	}
	report := max(o.RowEvery/6, time.Second)
	run, err := runLoad(ctx, loadOptions{VigBinary: o.VigBinary, Scenario: o.Scenario, Duration: o.Duration, TempDir: o.TempDir,
		OnSample: func(s Sample) {
			if o.Progress != nil && (time.Duration(s.T*1e9)%report == 0 || s.Err != "") {
				o.Progress("soak: %.0f/%.0f s, RSS %.1f MiB, %d goroutines, %d fds %s", s.T, o.Duration.Seconds(), mib(s.RSS), s.Goroutines, s.FDs, s.Err)
			}
		}})
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	res := &SoakResult{Duration: o.Duration, RowEvery: o.RowEvery, Depth: loadDepth, Config: run.ConfigYAML, Samples: run.Samples}
	var ds [][]sched.Delivery
	for _, st := range run.Streams {
		res.StreamNames = append(res.StreamNames, st.Stream.Name)
		ds = append(ds, st.Deliveries)
	}
	res.Rows = SoakRows(run.Samples, ds, run.Start, o.Duration, o.RowEvery)
	res.Flat = JudgeFlat(res.Rows, o.Rule)
	res.Streams = summarizeStreams(run)
	res.Memory = Memory(run.Samples, o.Duration.Seconds())
	res.Checks = checkRun(run, res.Streams)
	return res, nil
}

// rowLatency returns stream's latency in row r.
func (s *SoakResult) rowLatency(r SoakRow, stream string) Lat {
	if i := slices.Index(s.StreamNames, stream); i >= 0 && i < len(r.Latency) {
		return r.Latency[i]
	}
	return Lat{}
}
