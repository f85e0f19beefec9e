package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vig-edge/vig/agent/sched"
)

// Sched exports the freshness scheduler: per-stream outcome counters, in-flight
// gauges, coverage and AoI gauges and estimator values, read from one scheduler
// snapshot per scrape (so received = Σ outcomes + in flight holds in every scrape),
// and per-stream latency histograms observed as requests finish.
type Sched struct {
	snapshot func(*sched.Snapshot)

	mu   sync.Mutex // guards snap between scrapes
	snap sched.Snapshot

	names      []string // stream index → name, for the histograms
	wait       []prometheus.Observer
	total      []prometheus.Observer
	age        []prometheus.Observer
	ungoverned *prometheus.CounterVec
	alone      *prometheus.CounterVec
	variants   *prometheus.CounterVec
	batchSize  *prometheus.Desc

	descs map[string]*prometheus.Desc
}

// latencyBuckets span 0.5 ms to ~4 s: frame periods are tens of ms, a VLM seconds.
var latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 14)

// NewSched registers the scheduler's metrics. snapshot fills a snapshot under the
// scheduler's lock (Governor.Snapshot).
func (r *Registry) NewSched(snapshot func(*sched.Snapshot)) *Sched {
	s := &Sched{snapshot: snapshot, descs: map[string]*prometheus.Desc{}}
	snapshot(&s.snap)
	hist := func(name, help string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, []string{"stream"})
		r.reg.MustRegister(h)
		return h
	}
	wait := hist("vig_stream_queue_wait_seconds", "Time a request waited in vig before it was sent to the backend.")
	total := hist("vig_stream_latency_seconds", "Time from a request's arrival at vig to its answer, for requests the backend answered.")
	age := hist("vig_stream_result_age_seconds", "Age of each delivered result (answer time minus frame capture time).")
	for _, st := range s.snap.Streams {
		s.names = append(s.names, st.Name)
		s.wait = append(s.wait, wait.WithLabelValues(st.Name))
		s.total = append(s.total, total.WithLabelValues(st.Name))
		s.age = append(s.age, age.WithLabelValues(st.Name))
	}
	s.ungoverned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vig_ungoverned_requests_total",
		Help: "Inference requests for models without an exec_ms prior, forwarded without freshness scheduling.",
	}, []string{"model"})
	s.alone = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vig_batch_alone_total",
		Help: "Frames of a batching model (max_batch > 1) that could not join a batch and ran alone, by reason (docs/batching.md).",
	}, []string{"model", "reason"})
	s.variants = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vig_variant_dispatches_total",
		Help: "Frames of a logical model (variants) dispatched, by the variant they ran as (docs/config.md, models.NAME.variants).",
	}, []string{"model", "variant"})
	s.batchSize = prometheus.NewDesc("vig_batch_size_rows",
		"Jobs dispatched to the backend per batching model, by the rows (frames of one row each) they carried: 1 is a frame alone.",
		[]string{"model"}, nil)
	for name, help := range map[string]string{
		"vig_stream_requests_total":          "Requests received per stream, by outcome (received counts every request; the others partition the finished ones).",
		"vig_stream_deferred_total":          "Requests held back at least once because starting them would make a protected frame miss its deadline.",
		"vig_stream_in_flight":               "Requests accepted and not yet answered, by state (waiting in vig, running on the backend).",
		"vig_stream_coverage_ratio":          "Share of the recent complete period windows that received a fresh result (age < max_age).",
		"vig_stream_aoi_seconds":             "Age of information: now minus the capture time of the newest delivered result.",
		"vig_stream_budget_runs_total":       "Dispatches made on a min_rate_hz budget although admission deferred them (they block protected frames, or high frames for a best_effort stream).",
		"vig_stream_budget_cost_total":       "Frames the budget dispatches were predicted to make miss: protected, and high for a best_effort stream.",
		"vig_stream_budget_blocked_total":    "On a protected stream, requests late-dropped or superseded while a budget job ran; on a high stream, while a best_effort stream's budget job ran.",
		"vig_stream_probes_total":            "Dispatches made despite a predicted miss, to re-measure the model.",
		"vig_estimate_seconds":               "Execution-time estimate (p90 of recent samples) per model and number of jobs already running at dispatch.",
		"vig_backend_slots_busy":             "Backend slots running a job.",
		"vig_accelerator_slots":              "Slots of each accelerator (accelerator=\"default\" for backend.slots).",
		"vig_accelerator_slots_busy":         "Slots of each accelerator running a job.",
		"vig_accelerator_busy_seconds_total": "Slot time each accelerator's jobs have run (from their observed start to their answer): rate() ÷ vig_accelerator_slots is its busy share.",
		"vig_scheduler_safety_margin_pct":    "Safety margin applied to execution estimates, in percent (100 = none).",
		"vig_scheduler_backend_down":         "1 while the scheduler considers the backend unreachable.",
		"vig_scheduler_draining":             "1 once vig is draining.",
		"vig_unrouted_requests_total":        "Requests that matched no stream (all rejected).",
	} {
		labels := []string{"stream", "class"}
		switch name {
		case "vig_stream_requests_total":
			labels = []string{"stream", "class", "outcome"}
		case "vig_stream_in_flight":
			labels = []string{"stream", "class", "state"}
		case "vig_estimate_seconds":
			labels = []string{"model", "busy"}
		case "vig_accelerator_slots", "vig_accelerator_slots_busy", "vig_accelerator_busy_seconds_total":
			labels = []string{"accelerator"}
		case "vig_backend_slots_busy", "vig_scheduler_safety_margin_pct", "vig_scheduler_backend_down", "vig_scheduler_draining", "vig_unrouted_requests_total":
			labels = nil
		}
		s.descs[name] = prometheus.NewDesc(name, help, labels, nil)
	}
	r.reg.MustRegister(s, s.ungoverned, s.alone, s.variants)
	return s
}

// Describe implements prometheus.Collector.
func (s *Sched) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
	ch <- s.batchSize
}

// Collect implements prometheus.Collector.
func (s *Sched) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshot(&s.snap)
	counter := func(name string, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(s.descs[name], prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(s.descs[name], prometheus.GaugeValue, v, labels...)
	}
	for _, st := range s.snap.Streams {
		n, c := st.Name, st.Class.String()
		for _, o := range []struct {
			outcome string
			v       uint64
		}{
			{"received", st.Received}, {sched.Forwarded.String(), st.Forwarded}, {sched.Superseded.String(), st.Superseded},
			{sched.LateDropped.String(), st.LateDropped}, {sched.Rejected.String(), st.Rejected},
			{sched.BackendError.String(), st.BackendError}, {sched.Cancelled.String(), st.Cancelled},
		} {
			counter("vig_stream_requests_total", o.v, n, c, o.outcome)
		}
		counter("vig_stream_deferred_total", st.Deferred, n, c)
		gauge("vig_stream_in_flight", float64(st.Waiting), n, c, "waiting")
		gauge("vig_stream_in_flight", float64(st.Running), n, c, "running")
		if st.CoverageWindows > 0 {
			// Only once a window has ended: a default-contract stream has
			// none, and 0 would read as a contract missed.
			gauge("vig_stream_coverage_ratio", st.Coverage, n, c)
		}
		if st.HasAoI {
			gauge("vig_stream_aoi_seconds", st.AoI.Seconds(), n, c)
		}
		counter("vig_stream_budget_runs_total", st.BudgetRuns, n, c)
		counter("vig_stream_budget_cost_total", st.BudgetCost, n, c)
		counter("vig_stream_budget_blocked_total", st.BudgetBlocked, n, c)
		counter("vig_stream_probes_total", st.Probes, n, c)
	}
	for _, e := range s.snap.Estimates {
		gauge("vig_estimate_seconds", e.Estimate.Seconds(), e.Model, itoa(e.Busy))
	}
	gauge("vig_backend_slots_busy", float64(s.snap.Busy))
	for _, a := range s.snap.Accelerators {
		name := a.Name
		if name == "" {
			name = "default"
		}
		gauge("vig_accelerator_slots", float64(a.Slots), name)
		gauge("vig_accelerator_slots_busy", float64(a.Busy), name)
		ch <- prometheus.MustNewConstMetric(s.descs["vig_accelerator_busy_seconds_total"], prometheus.CounterValue, a.BusyTime.Seconds(), name)
	}
	gauge("vig_scheduler_safety_margin_pct", float64(s.snap.SafetyMargin.Percent()))
	gauge("vig_scheduler_backend_down", b2f(s.snap.BackendDown))
	gauge("vig_scheduler_draining", b2f(s.snap.Draining))
	counter("vig_unrouted_requests_total", s.snap.Unrouted.Received)
	for _, b := range s.snap.Batches {
		ch <- batchHistogram(s.batchSize, b)
	}
}

// batchHistogram is a model's jobs by size, one bucket per size up to its
// max_batch.
func batchHistogram(d *prometheus.Desc, b sched.BatchStats) prometheus.Metric {
	buckets := make(map[float64]uint64, len(b.Sizes))
	var count uint64
	var sum float64
	for n := 1; n < len(b.Sizes); n++ {
		count += b.Sizes[n]
		sum += float64(n) * float64(b.Sizes[n])
		buckets[float64(n)] = count
	}
	return prometheus.MustNewConstHistogram(d, count, sum, buckets, b.Model)
}

// Finished observes a request the backend answered (gateway.Observer).
func (s *Sched) Finished(stream int, wait, total, age time.Duration) {
	if stream < 0 || stream >= len(s.names) {
		return
	}
	s.wait[stream].Observe(wait.Seconds())
	s.total[stream].Observe(total.Seconds())
	s.age[stream].Observe(age.Seconds())
}

// Ungoverned counts a request forwarded without scheduling (gateway.Observer).
func (s *Sched) Ungoverned(model string) { s.ungoverned.WithLabelValues(model).Inc() }

// Variant counts a frame of logical model dispatched as variant (gateway.Observer).
func (s *Sched) Variant(model, variant string) { s.variants.WithLabelValues(model, variant).Inc() }

// Alone counts a frame of a batching model that ran alone (gateway.Observer).
func (s *Sched) Alone(model, why string) { s.alone.WithLabelValues(model, why).Inc() }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func itoa(i int) string { return strconv.Itoa(i) }
