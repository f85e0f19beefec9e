package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// loadTargets judges the overload and soak runs: the invariants of
// TestOverloadTenTimes over the whole run, memory, the protected stream's
// coverage, and the soak's flatness.
func loadTargets(r *Results) []Target {
	var ts []Target
	if o := r.Overload; o != nil {
		inv := Target{Name: fmt.Sprintf("overload %d×: every queue within its bound and every scrape balanced (received = Σ outcomes + in flight)", o.Factor)}
		cnt := Target{Name: fmt.Sprintf("overload %d×: every frame sent answered once, vig's counts = the clients'", o.Factor)}
		mem := Target{Name: fmt.Sprintf("overload %d×: RSS of the last 10 s ≤ the first 10 s × %.2f + %.0f MiB", o.Factor, 1+DefaultFlatRule.RSSPct/100, mib(DefaultFlatRule.RSSSlackBytes))}
		cov := Target{Name: fmt.Sprintf("overload %d×: protected coverage ≥ 99 %% in every case", o.Factor)}
		okInv, okCnt, okMem, okCov := true, true, true, true
		var pInv, pCnt, pMem, pCov []string
		for _, c := range o.Cases {
			k := c.Checks
			okInv = okInv && k.ScrapeErrors == 0 && k.UnbalancedScrapes == 0 && k.OverBoundScrapes == 0
			pInv = append(pInv, fmt.Sprintf("%s: %d scrapes, %d failed, %d unbalanced, %d over a bound", c.Name, k.Scrapes, k.ScrapeErrors, k.UnbalancedScrapes, k.OverBoundScrapes))
			okCnt = okCnt && k.CountsMatch && k.InFlightAfter == 0
			var sent, answered uint64
			for _, s := range c.Streams {
				sent, answered = sent+s.Sent, answered+s.Answered
			}
			p := fmt.Sprintf("%s: %d sent, %d answered", c.Name, sent, answered)
			if len(k.Mismatches) > 0 {
				p += " (" + strings.Join(k.Mismatches, "; ") + ")"
			}
			pCnt = append(pCnt, p)
			m := c.Memory
			ok := float64(m.Last10) <= float64(m.First10)*(1+DefaultFlatRule.RSSPct/100)+float64(DefaultFlatRule.RSSSlackBytes)
			okMem = okMem && ok && m.Samples > 0
			pMem = append(pMem, fmt.Sprintf("%s: %.1f → %.1f MiB (%+.1f %%)", c.Name, mib(m.First10), mib(m.Last10), m.GrowthPct))
			for _, s := range c.Streams {
				if s.Class == "protected" {
					okCov = okCov && s.Coverage >= 0.99
					pCov = append(pCov, fmt.Sprintf("%s: %s %s", c.Name, s.Stream, pct(s.Coverage)))
				}
			}
		}
		inv.Status, inv.Detail = verdict(okInv), strings.Join(pInv, "; ")
		cnt.Status, cnt.Detail = verdict(okCnt), strings.Join(pCnt, "; ")
		mem.Status, mem.Detail = verdict(okMem), strings.Join(pMem, "; ")
		cov.Status, cov.Detail = verdict(okCov && len(pCov) > 0), strings.Join(pCov, "; ")
		ts = append(ts, inv, cnt, mem, cov)
	}
	if s := r.Soak; s != nil {
		t := Target{Name: "soak: vig's RSS, goroutines and open fds flat (rule in the soak section)", Status: NotMeasured, Detail: strings.Join(s.Flat.Checks, "; ")}
		if s.Flat.Judged {
			t.Status = verdict(s.Flat.Flat)
		}
		k := s.Checks
		inv := Target{Name: "soak: every queue within its bound, every scrape balanced, every frame answered once and counted by vig",
			Status: verdict(k.OK()), Detail: fmt.Sprintf("%d scrapes, %d failed, %d unbalanced, %d over a bound, %.0f still in flight after the run", k.Scrapes, k.ScrapeErrors, k.UnbalancedScrapes, k.OverBoundScrapes, k.InFlightAfter)}
		if len(k.Mismatches) > 0 {
			inv.Detail += "; " + strings.Join(k.Mismatches, "; ")
		}
		ts = append(ts, t, inv)
	}
	return ts
}

// outcomesCell lists the non-zero outcomes in name order.
func outcomesCell(o map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if o[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", strings.ReplaceAll(k, "_", "-"), o[k]))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

func streamTable(w func(string, ...any), streams []LoadStream) {
	w("| stream | class | frame ms (× contracted rate) | queue bound | max waiting at a scrape | scheduled | sent | client-dropped | answered (client) | vig received | vig answered | vig outcomes | delivered | coverage (windows) | latency p50 / p99 / p99.9 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range streams {
		w("| %s | %s | %g (%d×) | %d | %.0f | %d | %d | %d | %d | %.0f | %.0f | %s | %d | %s (%d/%d) | %.1f / %.1f / %.1f |\n",
			s.Stream, s.Class, s.FrameMs, s.Factor, s.Bound, s.MaxWaiting, s.Scheduled, s.Sent, s.Dropped, s.Answered,
			s.VigReceived, s.VigAnswered, outcomesCell(s.Outcomes), s.Delivered, pct(s.Coverage), s.Covered, s.Windows,
			s.Latency.P50, s.Latency.P99, s.Latency.P999)
	}
}

func memLine(w func(string, ...any), m MemStats) {
	w("vig's RSS over %d samples: min %.1f MiB, median %.1f MiB, max %.1f MiB; median of the first 10 s %.1f MiB, of the last 10 s %.1f MiB (growth %+.1f MiB, %+.1f %%). Goroutines %d–%d, open fds %d–%d. The machine's 1-minute load average during the run: %.1f–%.1f (2 CPUs).\n\n",
		m.Samples, mib(m.MinRSS), mib(m.MedianRSS), mib(m.MaxRSS), mib(m.First10), mib(m.Last10), float64(m.Growth)/(1<<20), m.GrowthPct,
		m.Goroutines[0], m.Goroutines[1], m.FDs[0], m.FDs[1], m.Load1[0], m.Load1[1])
}

func checksLine(w func(string, ...any), k LoadChecks) {
	yes := map[bool]string{true: "yes", false: "**no**"}
	w("Checks: %d scrapes (one per second and one after every call returned), %d failed; balanced (received = Σ outcomes + waiting + running, every stream) in every scrape: %s",
		k.Scrapes, k.ScrapeErrors, yes[k.UnbalancedScrapes == 0])
	if k.UnbalancedScrapes > 0 {
		w(" (%d unbalanced: %s)", k.UnbalancedScrapes, strings.Join(k.Unbalanced, "; "))
	}
	w("; no queue above its bound: %s", yes[k.OverBoundScrapes == 0])
	if k.OverBoundScrapes > 0 {
		w(" (%d scrapes: %s)", k.OverBoundScrapes, strings.Join(k.OverBound, "; "))
	}
	w("; every frame sent answered once and vig's received and answered counts equal the clients': %s", yes[k.CountsMatch])
	if len(k.Mismatches) > 0 {
		w(" (%s)", strings.Join(k.Mismatches, "; "))
	}
	w("; in flight in vig after every call returned: %.0f.\n\n", k.InFlightAfter)
}

const loadMethod = "vig runs as its own process (`vig serve -c vig.yaml --log-format json`, unpinned) with the configuration below: scenario B's contracts and its embedded mock backend (1 slot, exec × [0.9, 1.3] per frame), listeners on ephemeral loopback ports. The bench process runs one open-loop sensor per stream over one gRPC connection: frame k of a stream is sent at start + offset + k × interval whatever happened before, with %d KiB of payload, unless %d calls of its stream are outstanding (then it is dropped at the client and counted). Every second the bench reads vig's VmRSS from /proc/PID/status and scrapes its /metrics: `go_goroutines`, `process_open_fds`, and per stream `vig_stream_in_flight` (waiting, running) and `vig_stream_requests_total` (received and every outcome). A scrape sees the queue at that instant: max waiting is the most any scrape saw, not a high-water mark kept by vig. Coverage is computed as the wire benchmark does (agent/sched.Coverage over the run's complete period windows, from the results the sensors received); latency is send → answer of the delivered results (a frame is sent at its capture time, so it is also the result's age on arrival). The bench process (sensors, sampling) shares the machine's CPUs with vig."

// loadReport renders the overload and soak sections.
func loadReport(w func(string, ...any), r *Results) {
	if o := r.Overload; o != nil {
		w("## Overload: scenario B at %d× the contracted frame rates\n\n", o.Factor)
		w(loadMethod+" Two cases of %v each, each on a fresh vig: every sensor at %d× its contracted frame rate, then only the detector at %d× and the others at theirs.\n\n",
			wirePayload>>10, o.Depth, o.Duration, o.Factor, o.Factor)
		for _, c := range o.Cases {
			w("### %s at %d×\n\n", strings.ToUpper(c.Name[:1])+c.Name[1:], o.Factor)
			memLine(w, c.Memory)
			checksLine(w, c.Checks)
			streamTable(w, c.Streams)
			w("\n")
		}
		w("![RSS under overload](overload_rss.svg)\n\n![goroutines and fds under overload](overload_goroutines_fds.svg)\n\n")
		w("Results vig forwarded per second (the difference of `vig_stream_requests_total{outcome=\"forwarded\"}` between samples), and vig's execution-time estimate for each model (`vig_estimate_seconds{busy=\"0\"}`, what admission uses) per sample:\n\n")
		for i, c := range o.Cases {
			w("![forwarded per second, %s](overload_%d_forwarded.svg) ![estimates, %s](overload_%d_estimates.svg)\n\n", c.Name, i+1, c.Name, i+1)
		}
		w("vig ran with:\n\n```yaml\n%s```\n\n", o.Config)
	}
	if s := r.Soak; s != nil {
		w("## Soak: scenario B at the contracted rates for %v\n\n", s.Duration)
		w(loadMethod+" Every sensor at its contracted frame rate; one row per %v.\n\n", wirePayload>>10, s.Depth, s.RowEvery)
		switch {
		case !s.Flat.Judged:
			w("Flatness: **not judged**. ")
		case s.Flat.Flat:
			w("Flatness: **flat**. ")
		default:
			w("Flatness: **not flat**. ")
		}
		w("Rule: %s.\n\n", s.Flat.Rule)
		for _, c := range s.Flat.Checks {
			w("- %s\n", c)
		}
		w("\n")
		memLine(w, s.Memory)
		checksLine(w, s.Checks)
		w("| row | s | samples | RSS median MiB | RSS max MiB | Go heap in use median MiB | heap objects median | goroutines max | open fds max | load average (1 min) max |")
		for _, n := range s.StreamNames {
			w(" %s p50 / p99 / p99.9 ms (n) |", n)
		}
		w("\n|---|---|---|---|---|---|---|---|---|---|%s\n", strings.Repeat("---|", len(s.StreamNames)))
		for _, row := range s.Rows {
			w("| %d | %.0f–%.0f | %d | %.1f | %.1f | %s | %s | %d | %d | %.1f |", row.Row, row.FromS, row.ToS, row.Samples, mib(row.RSS), mib(row.RSSMax),
				orDash(row.Heap > 0, fmt.Sprintf("%.1f", mib(row.Heap))), orDash(row.HeapObjects > 0, fmt.Sprint(row.HeapObjects)), row.Goroutines, row.FDs, row.Load1)
			for _, n := range s.StreamNames {
				if l := s.rowLatency(row, n); l.N > 0 {
					w(" %.1f / %.1f / %.1f (%d) |", l.P50, l.P99, l.P999, l.N)
				} else {
					w(" – (0) |")
				}
			}
			w("\n")
		}
		w("\nWhole run:\n\n")
		streamTable(w, s.Streams)
		w("\n![soak RSS](soak_rss.svg)\n\n![soak goroutines and fds](soak_goroutines_fds.svg)\n\n![soak p99](soak_p99.svg)\n\n")
		w("vig ran with:\n\n```yaml\n%s```\n\n", s.Config)
	}
}

func orDash(ok bool, s string) string {
	if ok {
		return s
	}
	return "–"
}

func sampleSeries(name string, samples []Sample, get func(Sample) float64) Series {
	s := Series{Name: name}
	for _, smp := range samples {
		s.X = append(s.X, smp.T)
		if smp.Err != "" {
			s.Y = append(s.Y, math.NaN())
			continue
		}
		s.Y = append(s.Y, get(smp))
	}
	return s
}

func rssMiB(s Sample) float64 { return mib(s.RSS) }

// loadPlots adds the overload and soak plots to out.
func loadPlots(r *Results, out map[string]string) {
	if o := r.Overload; o != nil {
		var rss, gf []Series
		for _, c := range o.Cases {
			rss = append(rss, sampleSeries(c.Name, c.Samples, rssMiB))
			gf = append(gf, sampleSeries(c.Name+": goroutines", c.Samples, func(s Sample) float64 { return float64(s.Goroutines) }),
				sampleSeries(c.Name+": open fds", c.Samples, func(s Sample) float64 { return float64(s.FDs) }))
		}
		out["overload_rss.svg"] = Lines(Plot{Title: fmt.Sprintf("vig RSS under %d× overload (scenario B)", o.Factor), XLabel: "seconds", YLabel: "VmRSS, MiB", Series: rss, YMin: 0, YMax: yTop(rss)})
		for i, c := range o.Cases {
			var fw, est []Series
			var models []string
			for _, smp := range c.Samples {
				for m := range smp.Estimates {
					if !slices.Contains(models, m) {
						models = append(models, m)
					}
				}
			}
			slices.Sort(models)
			for _, st := range c.Streams {
				ser := Series{Name: st.Stream}
				prev, prevT := 0.0, 0.0
				for _, smp := range c.Samples {
					v, ok := smp.Streams[st.Stream].Outcomes["forwarded"]
					if smp.Err != "" || !ok || smp.T <= prevT {
						continue
					}
					ser.X, ser.Y = append(ser.X, smp.T), append(ser.Y, (v-prev)/(smp.T-prevT))
					prev, prevT = v, smp.T
				}
				fw = append(fw, ser)
			}
			for _, m := range models {
				est = append(est, sampleSeries(m, c.Samples, func(s Sample) float64 {
					if v, ok := s.Estimates[m]; ok {
						return v
					}
					return math.NaN()
				}))
			}
			out[fmt.Sprintf("overload_%d_forwarded.svg", i+1)] = Lines(Plot{Title: fmt.Sprintf("%s at %d×: results forwarded per second", c.Name, o.Factor), XLabel: "seconds", YLabel: "forwarded / s", Series: fw, YMin: 0, YMax: yTop(fw)})
			out[fmt.Sprintf("overload_%d_estimates.svg", i+1)] = Lines(Plot{Title: fmt.Sprintf("%s at %d×: vig's execution estimates", c.Name, o.Factor), XLabel: "seconds", YLabel: "estimate, ms", Series: est, YMin: 0, YMax: yTop(est)})
		}
		out["overload_goroutines_fds.svg"] = Lines(Plot{Title: fmt.Sprintf("vig goroutines and open fds under %d× overload", o.Factor), XLabel: "seconds", YLabel: "count", Series: gf, YMin: 0, YMax: yTop(gf)})
	}
	if s := r.Soak; s != nil {
		rss := []Series{sampleSeries("VmRSS", s.Samples, rssMiB)}
		if len(s.Samples) > 0 && s.Samples[0].HeapInuse > 0 {
			rss = append(rss, sampleSeries("Go heap in use", s.Samples, func(s Sample) float64 { return mib(s.HeapInuse) }))
		}
		gf := []Series{sampleSeries("goroutines", s.Samples, func(s Sample) float64 { return float64(s.Goroutines) }),
			sampleSeries("open fds", s.Samples, func(s Sample) float64 { return float64(s.FDs) })}
		var p99 []Series
		for i, n := range s.StreamNames {
			ser := Series{Name: n + " p99"}
			for _, row := range s.Rows {
				ser.X = append(ser.X, (row.FromS+row.ToS)/2/60)
				if i < len(row.Latency) && row.Latency[i].N > 0 {
					ser.Y = append(ser.Y, row.Latency[i].P99)
				} else {
					ser.Y = append(ser.Y, math.NaN())
				}
			}
			p99 = append(p99, ser)
		}
		out["soak_rss.svg"] = Lines(Plot{Title: "vig RSS during the soak (scenario B, contracted rates)", XLabel: "seconds", YLabel: "VmRSS, MiB", Series: rss, YMin: 0, YMax: yTop(rss)})
		out["soak_goroutines_fds.svg"] = Lines(Plot{Title: "vig goroutines and open fds during the soak", XLabel: "seconds", YLabel: "count", Series: gf, YMin: 0, YMax: yTop(gf)})
		out["soak_p99.svg"] = Lines(Plot{Title: "Latency p99 per row during the soak", XLabel: "minutes (row middle)", YLabel: "send → answer p99, ms", Series: p99})
	}
}

// yTop is a y range top that starts the axis at 0 and leaves a little room.
func yTop(series []Series) float64 {
	top := 0.0
	for _, s := range series {
		for _, y := range s.Y {
			if !math.IsNaN(y) {
				top = max(top, y)
			}
		}
	}
	if top <= 0 {
		return 1
	}
	return top * 1.15
}
