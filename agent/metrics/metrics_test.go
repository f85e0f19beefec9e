package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/netopt"
)

func TestMethodCounters(t *testing.T) {
	r := New()
	m := r.Method("ModelInfer")
	if r.Method("ModelInfer") != m {
		t.Fatal("Method must return the same pre-resolved counters")
	}
	m.Start()
	m.Received(100)
	m.Sent(40)
	m.Done(codes.Aborted)
	m.Start()
	m.Done(codes.Code(99)) // out of range: counted as Unknown, not a panic
	if got := testutil.ToFloat64(r.grpc.requests.WithLabelValues("ModelInfer", "Aborted")); got != 1 {
		t.Errorf("Aborted = %v", got)
	}
	if got := testutil.ToFloat64(r.grpc.requests.WithLabelValues("ModelInfer", "Unknown")); got != 1 {
		t.Errorf("Unknown = %v", got)
	}
	if got := testutil.ToFloat64(r.grpc.inFlight.WithLabelValues("ModelInfer")); got != 0 {
		t.Errorf("in flight = %v after both finished", got)
	}
	if got := testutil.ToFloat64(r.grpc.bytesIn.WithLabelValues("ModelInfer")); got != 100 {
		t.Errorf("bytes in = %v", got)
	}
}

// The HTTP/REST frontend's counters are their own family (vig_http_*), with the
// same labels as the gRPC one's: a request counted on one is not on the other.
func TestHTTPMethodCounters(t *testing.T) {
	r := New()
	m := r.HTTPMethod("ModelInfer")
	if r.HTTPMethod("ModelInfer") != m || r.Method("ModelInfer") == m {
		t.Fatal("HTTPMethod must return its own pre-resolved counters, not the gRPC ones")
	}
	m.Start()
	m.Received(300)
	m.Sent(50)
	m.Done(codes.OK)
	if got := testutil.ToFloat64(r.http.requests.WithLabelValues("ModelInfer", "OK")); got != 1 {
		t.Errorf("vig_http_requests_total OK = %v", got)
	}
	if got := testutil.ToFloat64(r.grpc.requests.WithLabelValues("ModelInfer", "OK")); got != 0 {
		t.Errorf("vig_grpc_requests_total OK = %v, want 0 (an HTTP request)", got)
	}
	var b strings.Builder
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b.WriteString(rec.Body.String())
	for _, s := range []string{`vig_http_requests_total{code="OK",method="ModelInfer"} 1`, `vig_http_received_bytes_total{method="ModelInfer"} 300`,
		`vig_http_sent_bytes_total{method="ModelInfer"} 50`, `vig_http_in_flight{method="ModelInfer"} 0`} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("scrape lacks %s", s)
		}
	}
}

func TestSocketsAndSched(t *testing.T) {
	r := New()
	var st netopt.Stats
	st.TCPAccepted.Add(3)
	st.NoDelayVerified.Add(3)
	r.Sockets(&st)
	snap := sched.Snapshot{SafetyMargin: sched.DefaultMargin, Streams: []sched.StreamStats{{
		Name: "cam", Class: sched.Protected,
		Counters: sched.Counters{Received: 10, Forwarded: 6, Superseded: 2, LateDropped: 1, Waiting: 1},
		Coverage: 0.9, AoI: 20 * time.Millisecond, HasAoI: true,
	}}}
	s := r.NewSched(func(dst *sched.Snapshot) { *dst = snap })
	s.Finished(0, time.Millisecond, 9*time.Millisecond, 30*time.Millisecond)
	s.Finished(7, 0, 0, 0) // unknown stream index: ignored
	s.Ungoverned("m")
	want := `
# HELP vig_stream_requests_total Requests received per stream, by outcome (received counts every request; the others partition the finished ones).
# TYPE vig_stream_requests_total counter
vig_stream_requests_total{class="protected",outcome="backend_error",stream="cam"} 0
vig_stream_requests_total{class="protected",outcome="cancelled",stream="cam"} 0
vig_stream_requests_total{class="protected",outcome="forwarded",stream="cam"} 6
vig_stream_requests_total{class="protected",outcome="late_dropped",stream="cam"} 1
vig_stream_requests_total{class="protected",outcome="received",stream="cam"} 10
vig_stream_requests_total{class="protected",outcome="rejected",stream="cam"} 0
vig_stream_requests_total{class="protected",outcome="superseded",stream="cam"} 2
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "vig_stream_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(r.reg, "vig_stream_latency_seconds", "vig_sockets_opened_total", "vig_ungoverned_requests_total"); n != 1+4+1 {
		t.Errorf("%d series, want 6", n)
	}
}

func TestAcceleratorMetrics(t *testing.T) {
	r := New()
	snap := sched.Snapshot{SafetyMargin: sched.DefaultMargin, Slots: 3, Busy: 2, Accelerators: []sched.AcceleratorStats{
		{Name: "gpu", Slots: 1, Busy: 1, BusyTime: 1500 * time.Millisecond},
		{Name: "dla", Slots: 2, Busy: 1, BusyTime: 250 * time.Millisecond},
	}}
	r.NewSched(func(dst *sched.Snapshot) { *dst = snap })
	want := `
# HELP vig_accelerator_busy_seconds_total Slot time each accelerator's jobs have run (from their observed start to their answer): rate() ÷ vig_accelerator_slots is its busy share.
# TYPE vig_accelerator_busy_seconds_total counter
vig_accelerator_busy_seconds_total{accelerator="dla"} 0.25
vig_accelerator_busy_seconds_total{accelerator="gpu"} 1.5
# HELP vig_accelerator_slots Slots of each accelerator (accelerator="default" for backend.slots).
# TYPE vig_accelerator_slots gauge
vig_accelerator_slots{accelerator="dla"} 2
vig_accelerator_slots{accelerator="gpu"} 1
# HELP vig_accelerator_slots_busy Slots of each accelerator running a job.
# TYPE vig_accelerator_slots_busy gauge
vig_accelerator_slots_busy{accelerator="dla"} 1
vig_accelerator_slots_busy{accelerator="gpu"} 1
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "vig_accelerator_busy_seconds_total", "vig_accelerator_slots", "vig_accelerator_slots_busy"); err != nil {
		t.Error(err)
	}
	// The backend.slots shorthand is accelerator "default".
	r = New()
	snap.Accelerators = []sched.AcceleratorStats{{Slots: 1}}
	r.NewSched(func(dst *sched.Snapshot) { *dst = snap })
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(`
# HELP vig_accelerator_slots Slots of each accelerator (accelerator="default" for backend.slots).
# TYPE vig_accelerator_slots gauge
vig_accelerator_slots{accelerator="default"} 1
`), "vig_accelerator_slots"); err != nil {
		t.Error(err)
	}
}

func TestBatchMetrics(t *testing.T) {
	r := New()
	snap := sched.Snapshot{SafetyMargin: sched.DefaultMargin, Batches: []sched.BatchStats{
		{Model: "detector", MaxBatch: 4, Sizes: []uint64{0, 3, 0, 2, 5}},
	}}
	s := r.NewSched(func(dst *sched.Snapshot) { *dst = snap })
	s.Alone("detector", "shared_memory")
	s.Alone("detector", "shared_memory")
	s.Alone("detector", "streamed")
	want := `
# HELP vig_batch_alone_total Frames of a batching model (max_batch > 1) that could not join a batch and ran alone, by reason (docs/batching.md).
# TYPE vig_batch_alone_total counter
vig_batch_alone_total{model="detector",reason="shared_memory"} 2
vig_batch_alone_total{model="detector",reason="streamed"} 1
# HELP vig_batch_size_rows Jobs dispatched to the backend per batching model, by the rows (frames of one row each) they carried: 1 is a frame alone.
# TYPE vig_batch_size_rows histogram
vig_batch_size_rows_bucket{model="detector",le="1"} 3
vig_batch_size_rows_bucket{model="detector",le="2"} 3
vig_batch_size_rows_bucket{model="detector",le="3"} 5
vig_batch_size_rows_bucket{model="detector",le="4"} 10
vig_batch_size_rows_bucket{model="detector",le="+Inf"} 10
vig_batch_size_rows_sum{model="detector"} 29
vig_batch_size_rows_count{model="detector"} 10
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "vig_batch_alone_total", "vig_batch_size_rows"); err != nil {
		t.Error(err)
	}
}

func TestVariantMetrics(t *testing.T) {
	r := New()
	s := r.NewSched(func(dst *sched.Snapshot) { *dst = sched.Snapshot{SafetyMargin: sched.DefaultMargin} })
	s.Variant("detector", "detector_dla0")
	s.Variant("detector", "detector_dla0")
	s.Variant("detector", "detector_gpu")
	want := `
# HELP vig_variant_dispatches_total Frames of a logical model (variants) dispatched, by the variant they ran as (docs/config.md, models.NAME.variants).
# TYPE vig_variant_dispatches_total counter
vig_variant_dispatches_total{model="detector",variant="detector_dla0"} 2
vig_variant_dispatches_total{model="detector",variant="detector_gpu"} 1
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "vig_variant_dispatches_total"); err != nil {
		t.Error(err)
	}
}

// The coverage gauge exists only for a stream with a window that has ended: a
// default-contract stream (no period) has none, and a 0 would read as a
// contract missed.
func TestCoverageOnlyWithWindows(t *testing.T) {
	r := New()
	snap := sched.Snapshot{SafetyMargin: sched.DefaultMargin, Streams: []sched.StreamStats{
		{Name: "cam", Class: sched.Protected, Coverage: 0.9, CoverageWindows: 10, CoveredWindows: 9},
		{Name: "default/m", Class: sched.BestEffort, Default: true},
		{Name: "new", Class: sched.High},
	}}
	r.NewSched(func(dst *sched.Snapshot) { *dst = snap })
	want := `
# HELP vig_stream_coverage_ratio Share of the recent complete period windows that received a fresh result (age < max_age).
# TYPE vig_stream_coverage_ratio gauge
vig_stream_coverage_ratio{class="protected",stream="cam"} 0.9
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "vig_stream_coverage_ratio"); err != nil {
		t.Error(err)
	}
}
