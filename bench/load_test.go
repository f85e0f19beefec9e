package bench

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/internal/fuzztest"
)

// A scrape of vig's /metrics, cut down, as the Prometheus client writes it.
const metricsFixture = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 21
process_open_fds 16
vig_stream_in_flight{class="protected",state="running",stream="detector"} 1
vig_stream_in_flight{class="protected",state="waiting",stream="detector"} 1
vig_stream_requests_total{class="protected",outcome="forwarded",stream="detector"} 89
vig_stream_requests_total{class="protected",outcome="late_dropped",stream="detector"} 12
vig_stream_requests_total{class="protected",outcome="received",stream="detector"} 527
vig_stream_requests_total{class="protected",outcome="superseded",stream="detector"} 424
vig_stream_requests_total{class="high",outcome="forwarded",stream="pose"} 10
vig_stream_requests_total{class="high",outcome="received",stream="pose"} 12
vig_grpc_requests_total{code="OK",method="/inference.GRPCInferenceService/ModelInfer"} 99
vig_stream_probes_total{class="protected",stream="detector"} 3
vig_estimate_seconds{busy="0",model="detector_small"} 0.0094
vig_estimate_seconds{busy="1",model="detector_small"} 0.02
odd_label{v="a \"quoted\" } value"} 1.5e3
`

func TestParseMetrics(t *testing.T) {
	ms, err := ParseMetrics([]byte(metricsFixture))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 15 {
		t.Fatalf("%d series, want 15", len(ms))
	}
	if g, ok := gauge(ms, "go_goroutines"); !ok || g != 21 {
		t.Errorf("go_goroutines = %v, %v", g, ok)
	}
	last := ms[len(ms)-1]
	if last.Name != "odd_label" || last.Labels["v"] != `a "quoted" } value` || last.Value != 1500 {
		t.Errorf("escaped label: %+v", last)
	}
	st := Streams(ms)
	d := st["detector"]
	if d.Class != "protected" || d.Received != 527 || d.Finished() != 525 || d.Waiting != 1 || d.Running != 1 || d.Probes != 3 {
		t.Errorf("detector = %+v", d)
	}
	if !d.Balanced() { // 527 = 89 + 12 + 424 + 1 + 1
		t.Errorf("detector does not balance: %+v", d)
	}
	if p := st["pose"]; p.Balanced() { // 12 ≠ 10: two requests unaccounted for
		t.Errorf("pose balances: %+v", p)
	}
	var smp Sample
	fromMetrics(&smp, ms)
	if smp.Goroutines != 21 || smp.FDs != 16 || smp.FDSource != "metrics" || len(smp.Estimates) != 1 || math.Abs(smp.Estimates["detector_small"]-9.4) > 1e-9 || len(smp.Streams) != 2 {
		t.Errorf("sample from metrics: %+v", smp)
	}
	for _, bad := range []string{"novalue", "m{a=\"b\"} x", "m{a=\"b} 1", "m{a} 1", "m{a=\"b\"}"} {
		if _, err := ParseMetrics([]byte(bad + "\n")); err == nil {
			t.Errorf("ParseMetrics(%q): no error", bad)
		}
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte(metricsFixture))
	f.Add([]byte("a{b=\"\\\\\"} 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		ms, err := ParseMetrics(b)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.Name == "" || strings.ContainsAny(m.Name, "{ ") {
				t.Fatalf("series with name %q from %q", m.Name, b)
			}
		}
		Streams(ms) // must not panic
	})
}

func TestParseVmRSS(t *testing.T) {
	b, err := os.ReadFile("testdata/status-vig.txt") // /proc/PID/status of vig under load
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseVmRSS(b); err != nil || got != 22016<<10 {
		t.Errorf("ParseVmRSS = %d, %v; want %d", got, err, 22016<<10)
	}
	for _, bad := range []string{"Name:\tkthreadd\nVmPeak:\t0 kB\n", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n", "VmRSS:\n"} {
		if got, err := ParseVmRSS([]byte(bad)); err == nil {
			t.Errorf("ParseVmRSS(%q) = %d, no error", bad, got)
		}
	}
}

func FuzzParseVmRSS(f *testing.F) {
	f.Add([]byte("VmRSS:\t   22016 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		if v, err := ParseVmRSS(b); err == nil && v%1024 != 0 {
			t.Fatalf("VmRSS %d is not whole kB", v)
		}
	})
}

func TestParseLoad1(t *testing.T) {
	if got, err := ParseLoad1([]byte("10.64 7.04 3.32 13/174 30301\n")); err != nil || got != 10.64 {
		t.Errorf("ParseLoad1 = %v, %v; want 10.64", got, err)
	}
	for _, bad := range []string{"", "1.0 2.0", "x 1 2 3/4 5"} {
		if _, err := ParseLoad1([]byte(bad)); err == nil {
			t.Errorf("ParseLoad1(%q): no error", bad)
		}
	}
}

func TestServeConfig(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"no listen", "backend: {address: \"127.0.0.1:8001\", slots: 1, embedded: true, seed: 1}\nmodels: {m: {exec_ms: 8}}\nstreams: [{name: s, model: m, class: protected, period_ms: 50, max_age_ms: 50}]\n"},
		{"listen given", "listen:\n  grpc: \"0.0.0.0:8000\"\n  metrics: \"0.0.0.0:9090\"\nbackend:\n  address: \"127.0.0.1:8001\"\n  embedded: true\nmodels: {m: {exec_ms: 8}}\nstreams: [{name: s, model: m, class: protected, period_ms: 50, max_age_ms: 50}]\n"},
	} {
		out, err := ServeConfig([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		cfg, err := config.Parse("out", out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, out)
		}
		if cfg.Listen.GRPC != "127.0.0.1:0" || cfg.Listen.Metrics != "127.0.0.1:0" || cfg.Backend.Address != "127.0.0.1:0" || !cfg.Backend.Embedded {
			t.Errorf("%s: listen %+v, backend %+v\n%s", tc.name, cfg.Listen, cfg.Backend, out)
		}
		if len(cfg.Streams) != 1 || cfg.Streams[0].PeriodMs != 50 || cfg.Models["m"].ExecMs != 8 {
			t.Errorf("%s: contracts changed\n%s", tc.name, out)
		}
	}
	if _, err := ServeConfig([]byte("- a list\n")); err == nil {
		t.Error("ServeConfig of a YAML list: no error")
	}
}

// rows builds n soak rows with the given RSS (MiB), goroutines and fds.
func rows(rss []float64, gor, fds []int) []SoakRow {
	out := make([]SoakRow, len(rss))
	for i := range rss {
		out[i] = SoakRow{Row: i + 1, Samples: 60, RSS: uint64(rss[i] * (1 << 20)), Goroutines: gor[i], FDs: fds[i]}
	}
	return out
}

func TestJudgeFlat(t *testing.T) {
	const n = 10
	flatRSS, grow, same := make([]float64, n), make([]float64, n), make([]int, n)
	leak := make([]int, n)
	for i := range n {
		flatRSS[i] = 24 + float64(i%3)*0.4 // noise, no trend
		grow[i] = 20 + float64(i)          // 1 MiB a minute
		same[i], leak[i] = 20, 20+i        // one goroutine (or fd) more a minute
	}
	for _, tc := range []struct {
		name         string
		rows         []SoakRow
		judged, flat bool
	}{
		{"flat", rows(flatRSS, same, same), true, true},
		{"RSS grows 1 MiB a row", rows(grow, same, same), true, false},
		{"goroutines leak", rows(flatRSS, leak, same), true, false},
		{"fds leak", rows(flatRSS, same, leak), true, false},
		// The first row is warm-up: a high first row does not make it flat
		// or not; only row 2 and the last count.
		{"warm-up row ignored", rows([]float64{5, 24, 24, 24.5}, []int{3, 20, 20, 20}, []int{3, 16, 16, 16}), true, true},
		// At the limit is flat: 20 × 1.1 + 2 = 24 MiB, 20 + 5 goroutines, 16 + 2 fds.
		{"at the limit", rows([]float64{20, 20, 20, 24}, []int{20, 20, 20, 25}, []int{16, 16, 16, 18}), true, true},
		{"just past it", rows([]float64{20, 20, 20, 24.01}, []int{20, 20, 20, 25}, []int{16, 16, 16, 18}), true, false},
		{"two rows", rows([]float64{20, 20}, []int{1, 1}, []int{1, 1}), false, false},
	} {
		v := JudgeFlat(tc.rows, DefaultFlatRule)
		if v.Judged != tc.judged || v.Flat != tc.flat {
			t.Errorf("%s: judged %v flat %v, want %v %v (%v)", tc.name, v.Judged, v.Flat, tc.judged, tc.flat, v.Checks)
		}
		if !strings.Contains(v.Rule, "row 2") || len(v.Checks) == 0 {
			t.Errorf("%s: verdict does not say its rule and checks: %+v", tc.name, v)
		}
	}
	// A row without samples is not judged rather than judged flat.
	r := rows(flatRSS, same, same)
	r[n-1].Samples = 0
	if v := JudgeFlat(r, DefaultFlatRule); v.Judged {
		t.Errorf("judged with an empty last row: %+v", v)
	}
}

func TestSoakRows(t *testing.T) {
	const start = int64(1e12)
	sec := func(s float64) sched.Time { return sched.Time(start + int64(s*1e9)) }
	var samples []Sample
	for k := 1; k <= 6; k++ { // one a second at the end of each second
		samples = append(samples, Sample{T: float64(k), RSS: uint64(k) << 20, HeapInuse: uint64(k) << 19, Goroutines: 10 + k, FDs: 5})
	}
	samples = append(samples, Sample{T: 6.5, Err: "metrics: refused"}) // skipped
	ds := [][]sched.Delivery{
		{{Capture: sec(0.1), At: sec(0.11)}, {Capture: sec(1.9), At: sec(2.1)}, {Capture: sec(2.5), At: sec(2.53)}, {Capture: sec(5.9), At: sec(6.2)}},
		nil,
	}
	got := SoakRows(samples, ds, start, 6*time.Second, 2*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d rows, want 3", len(got))
	}
	for i, want := range []struct {
		samples, goroutines int
		rssMedian, rssMax   uint64
		n                   int
		p50                 float64
	}{
		{2, 12, 3 << 19, 2 << 20, 1, 10},   // samples at 1 s and 2 s; a delivery at 0.11 s, 10 ms old
		{2, 14, 7 << 19, 4 << 20, 2, 30},   // 2.1 s (200 ms) and 2.53 s (30 ms): p50 by nearest rank is the lower
		{2, 16, 11 << 19, 6 << 20, 1, 300}, // the answer after the end lands in the last row
	} {
		r := got[i]
		if r.Row != i+1 || r.Samples != want.samples || r.Goroutines != want.goroutines || r.RSS != want.rssMedian || r.RSSMax != want.rssMax || r.FDs != 5 {
			t.Errorf("row %d = %+v, want %+v", i+1, r, want)
		}
		if r.Heap != r.RSS/2 {
			t.Errorf("row %d: heap median %d, want %d", i+1, r.Heap, r.RSS/2)
		}
		if len(r.Latency) != 2 || r.Latency[1].N != 0 {
			t.Fatalf("row %d latency %+v: want two streams, the second empty", i+1, r.Latency)
		}
		if l := r.Latency[0]; l.N != want.n || math.Abs(l.P50-want.p50) > 1e-6 {
			t.Errorf("row %d: %d deliveries, p50 %v ms; want %d, %v ms", i+1, l.N, l.P50, want.n, want.p50)
		}
	}
	if l := got[1].Latency[0]; math.Abs(l.Max-200) > 1e-6 {
		t.Errorf("row 2 latency %+v, want max 200 ms", l)
	}
}

func TestMemory(t *testing.T) {
	var s []Sample
	for k := 1; k <= 60; k++ {
		rss := uint64(20 << 20)
		if k > 50 {
			rss = 30 << 20
		}
		s = append(s, Sample{T: float64(k), RSS: rss, Goroutines: 20 + k%3, FDs: 16})
	}
	s = append(s, Sample{T: 61, Err: "rss: gone"})
	m := Memory(s, 60)
	if m.Samples != 60 || m.MinRSS != 20<<20 || m.MaxRSS != 30<<20 || m.MedianRSS != 20<<20 {
		t.Errorf("memory %+v", m)
	}
	if m.First10 != 20<<20 || m.Last10 != 30<<20 || m.Growth != 10<<20 || m.GrowthPct != 50 {
		t.Errorf("growth %+v, want 20 → 30 MiB, +50 %%", m)
	}
	if m.Goroutines != [2]int{20, 22} || m.FDs != [2]int{16, 16} {
		t.Errorf("goroutines %v fds %v", m.Goroutines, m.FDs)
	}
}

func TestCheckRun(t *testing.T) {
	counts := func(recv, fwd, waiting float64) map[string]StreamCounts {
		return map[string]StreamCounts{"det": {Class: "protected", Received: recv, Outcomes: map[string]float64{"forwarded": fwd}, Waiting: waiting}}
	}
	good := func() (*loadRun, []LoadStream) {
		run := &loadRun{
			Samples: []Sample{{T: 1, Streams: counts(10, 9, 1)}, {T: 2, Streams: counts(20, 19, 1)}},
			Final:   Sample{T: 2.1, Streams: counts(20, 20, 0)},
		}
		return run, []LoadStream{{Stream: "det", Bound: 1, SensorStats: SensorStats{Sent: 20}, Answered: 20, VigReceived: 20, VigAnswered: 20}}
	}
	run, st := good()
	if c := checkRun(run, st); !c.OK() || c.Scrapes != 3 {
		t.Errorf("clean run: %+v", c)
	}
	run, st = good()
	run.Samples[1].Streams = counts(20, 18, 1) // one request unaccounted for
	if c := checkRun(run, st); c.OK() || c.UnbalancedScrapes != 1 || len(c.Unbalanced) != 1 {
		t.Errorf("unbalanced scrape not caught: %+v", c)
	}
	run, st = good()
	run.Samples[0].Streams = counts(10, 8, 2) // balanced, but two waiting behind a bound of 1
	if c := checkRun(run, st); c.OK() || c.OverBoundScrapes != 1 || c.UnbalancedScrapes != 0 {
		t.Errorf("queue over its bound not caught: %+v", c)
	}
	run, st = good()
	st[0].Answered = 19 // a frame never answered
	if c := checkRun(run, st); c.OK() || c.CountsMatch || len(c.Mismatches) != 2 {
		t.Errorf("lost answer not caught: %+v", c)
	}
	run, st = good()
	run.Samples[0] = Sample{T: 1, Err: "metrics: timeout"}
	if c := checkRun(run, st); c.OK() || c.ScrapeErrors != 1 {
		t.Errorf("failed scrape not counted: %+v", c)
	}
	run, st = good()
	run.Final.Streams = counts(20, 19, 1)
	if c := checkRun(run, st); c.OK() || c.InFlightAfter != 1 {
		t.Errorf("request left in flight not caught: %+v", c)
	}
}

func TestLoadReport(t *testing.T) {
	stream := func(name, class string, cov float64) LoadStream {
		return LoadStream{Stream: name, Class: class, Factor: 10, Bound: 1, Coverage: cov, SensorStats: SensorStats{Sent: 5}, Answered: 5, VigReceived: 5, VigAnswered: 5}
	}
	growing := make([]float64, 10)
	same := make([]int, 10)
	for i := range growing {
		growing[i], same[i] = 20+float64(i), 20
	}
	soakRows := rows(growing, same, same)
	r := &Results{Command: "vig bench soak --duration 10m", Started: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
		Overload: &OverloadResult{Duration: time.Minute, Factor: 10, Depth: loadDepth, Config: "listen: {}\n", Cases: []OverloadCase{
			{Name: "every sensor", Streams: []LoadStream{stream("detector", "protected", 0.995), stream("pose", "high", 0.9)},
				Checks: LoadChecks{Scrapes: 61, CountsMatch: true}, Memory: MemStats{Samples: 60, First10: 20 << 20, Last10: 21 << 20},
				Samples: []Sample{{T: 1, RSS: 20 << 20}, {T: 2, RSS: 21 << 20}}},
			{Name: "detector alone", Flooder: "detector", Streams: []LoadStream{stream("detector", "protected", 0.97)},
				Checks: LoadChecks{Scrapes: 61, CountsMatch: true}, Memory: MemStats{Samples: 60, First10: 20 << 20, Last10: 40 << 20}},
		}},
		Soak: &SoakResult{Duration: 10 * time.Minute, RowEvery: time.Minute, Depth: loadDepth, Rows: soakRows, Flat: JudgeFlat(soakRows, DefaultFlatRule),
			Checks: LoadChecks{Scrapes: 601, CountsMatch: true}, Config: "listen: {}\n"},
	}
	ts := Evaluate(r)
	status := map[string]string{}
	for _, t := range ts {
		status[t.Name] = t.Status
	}
	if len(ts) != 6 {
		t.Fatalf("%d targets, want the 4 of overload and the 2 of soak only: %+v", len(ts), ts)
	}
	for name, want := range map[string]string{
		"overload 10×: every queue within its bound and every scrape balanced (received = Σ outcomes + in flight)": Holds,
		"overload 10×: RSS of the last 10 s ≤ the first 10 s × 1.10 + 2 MiB":                                       Fails, // 20 → 40 MiB alone
		"overload 10×: protected coverage ≥ 99 % in every case":                                                    Fails, // 97 % alone
		"soak: vig's RSS, goroutines and open fds flat (rule in the soak section)":                                 Fails,
	} {
		if status[name] != want {
			t.Errorf("target %q = %q, want %q", name, status[name], want)
		}
	}
	rep := Report(r, Plots(r))
	for _, want := range []string{"Flatness: **not flat**", "NOT FLAT: RSS", "## Overload: scenario B at 10×", "### Detector alone at 10×", "```yaml\nlisten: {}\n```", "soak_p99.svg"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(rep, "## Wire") || strings.Contains(rep, "idle CPU below") {
		t.Error("an overload/soak report shows the other benchmarks' sections or targets")
	}
	for _, f := range []string{"overload_rss.svg", "overload_goroutines_fds.svg", "soak_rss.svg", "soak_goroutines_fds.svg", "soak_p99.svg"} {
		if !strings.HasPrefix(Plots(r)[f], "<svg") {
			t.Errorf("no plot %s", f)
		}
	}
}
