package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

const governedConfig = `
listen: {metrics: "off"}
backend: {slots: 1, seed: 3, stats_interval_ms: -1}
scheduler: {safety_margin_pct: 100}
models:
  slow: {exec_ms: 1000}
  fast: {exec_ms: 5}
streams:
  - {name: blocker, model: slow, class: best_effort, period_ms: 5000, max_age_ms: 20000}
  - {name: cam, model: fast, class: protected, period_ms: 50, max_age_ms: 10000}
`

// startGoverned is startEnv with the freshness scheduler in front of the backend.
func startGoverned(t *testing.T, yaml string) (*env, *gateway.Governor, *metrics.Sched) {
	t.Helper()
	return startGovernedMock(t, yaml, "")
}

// startGovernedMock is startGoverned with a mock backend built from mockYAML
// (its models' exec_ms are what the backend really takes), vig's own config's
// exec_ms being only its priors; "" builds both from yaml.
func startGovernedMock(t *testing.T, yaml, mockYAML string) (*env, *gateway.Governor, *metrics.Sched) {
	t.Helper()
	if mockYAML == "" {
		mockYAML = yaml
	}
	mcfg, err := config.Parse("mock.yaml", []byte(mockYAML))
	if err != nil {
		t.Fatal(err)
	}
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mockbackend.FromConfig(mcfg), gateway.ServerOptions(mcfg.GRPC), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Stop() })
	return governedAt(t, yaml, mb.Addr())
}

// governedAt starts vig with the freshness scheduler in front of the backend at
// addr, and waits until it is connected.
func governedAt(t *testing.T, yaml, addr string) (*env, *gateway.Governor, *metrics.Sched) {
	t.Helper()
	cfg, err := config.Parse("governed.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend.Address = addr
	e := &env{cfg: cfg, reg: metrics.New(), sockets: new(netopt.Stats)}
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	ms := e.reg.NewSched(gov.Snapshot)
	gov.SetObserver(ms)
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: e.sockets.DialAddr, Metrics: e.reg, Admit: gov})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", e.sockets)
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(ln)
	t.Cleanup(gw.Stop)
	e.gw, e.tcp = gw, ln.Addr().String()
	waitBackendReady(t, e)
	return e, gov, ms
}

func streamRequest(stream, model string, frame uint64, capture int64) *pb.ModelInferRequest {
	r := inferRequest(model, mockbackend.FrameID(stream, frame), 64)
	r.Parameters[wire.ParamStream] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: stream}}
	r.Parameters[wire.ParamCapture] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: capture}}
	return r
}

// A burst of 10 frames on a LATEST stream while the only slot is busy: 9 are
// answered ABORTED at once, only the newest runs; vig's metrics say the same.
func TestBurstOnLatestStream(t *testing.T) {
	e, _, _ := startGoverned(t, governedConfig)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)

	blocker := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(ctx, streamRequest("blocker", "slow", 0, clock.Monotonic()))
		blocker <- err
	}()
	waitRunning(t, e.reg, "blocker")

	base := clock.Monotonic()
	codesSeen := map[codes.Code]int{}
	var frames []uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.ModelInfer(ctx, streamRequest("cam", "fast", uint64(i), base+int64(i)*1000))
			mu.Lock()
			defer mu.Unlock()
			codesSeen[status.Code(err)]++
			if err == nil {
				frames = append(frames, uint64(i))
				_ = r
			}
		}()
	}
	wg.Wait()
	if err := <-blocker; err != nil {
		t.Fatalf("blocker: %v", err)
	}
	if codesSeen[codes.Aborted] != 9 || codesSeen[codes.OK] != 1 || len(frames) != 1 || frames[0] != 9 {
		t.Fatalf("burst: codes %v, forwarded frames %v; want 9 ABORTED and only frame 9 forwarded", codesSeen, frames)
	}
	m := scrape(t, e.reg)
	for outcome, want := range map[string]float64{"received": 10, "superseded": 9, "forwarded": 1, "late_dropped": 0, "rejected": 0} {
		key := fmt.Sprintf(`vig_stream_requests_total{class="protected",outcome=%q,stream="cam"}`, outcome)
		if m[key] != want {
			t.Errorf("%s = %v, want %v", key, m[key], want)
		}
	}
	if got := m[`vig_grpc_requests_total{code="Aborted",method="ModelInfer"}`]; got != 9 {
		t.Errorf("ModelInfer Aborted = %v, want 9 (what the clients saw)", got)
	}
	if got := m[`vig_grpc_requests_total{code="OK",method="ModelInfer"}`]; got != 2 {
		t.Errorf("ModelInfer OK = %v, want 2 (blocker and frame 9)", got)
	}
}

// waitRunning waits until the scheduler reports a job of stream running (read from
// metrics; the wait is bounded by the test's context, not by a sleep).
func waitRunning(t *testing.T, reg *metrics.Registry, stream string) {
	t.Helper()
	key := fmt.Sprintf(`vig_stream_in_flight{class="best_effort",state="running",stream=%q}`, stream)
	// Polled with a pause: a goroutine spinning on scrapes must not take the CPU
	// from the connection's reader it waits for (under -race a scrape takes ms).
	for range 2000 {
		if scrape(t, reg)[key] == 1 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never became 1 in 10 s", key)
}

// A frame whose result cannot be fresh is never started: with a 1 s job on the only
// slot and a 100 ms max_age, the frame is answered DEADLINE_EXCEEDED.
func TestStaleFrameNotDispatched(t *testing.T) {
	e, _, _ := startGoverned(t, `
listen: {metrics: "off"}
backend: {slots: 1, stats_interval_ms: -1}
scheduler: {safety_margin_pct: 100}
models:
  slow: {exec_ms: 1000}
  fast: {exec_ms: 5}
streams:
  - {name: blocker, model: slow, class: best_effort, period_ms: 5000, max_age_ms: 20000}
  - {name: cam, model: fast, class: protected, period_ms: 50, max_age_ms: 100}
`)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	blocker := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(ctx, streamRequest("blocker", "slow", 0, clock.Monotonic()))
		blocker <- err
	}()
	waitRunning(t, e.reg, "blocker")
	_, err := c.ModelInfer(ctx, streamRequest("cam", "fast", 1, clock.Monotonic()))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("stale frame: %v, want DEADLINE_EXCEEDED", err)
	}
	<-blocker
	m := scrape(t, e.reg)
	if got := m[`vig_stream_requests_total{class="protected",outcome="late_dropped",stream="cam"}`]; got != 1 {
		t.Errorf("late_dropped = %v, want 1", got)
	}
	if got := m[`vig_stream_requests_total{class="protected",outcome="forwarded",stream="cam"}`]; got != 0 {
		t.Errorf("forwarded = %v, want 0", got)
	}
}

// Bad scheduling input gets a clear status, never a crash.
func TestGovernedBadInput(t *testing.T) {
	e, _, _ := startGoverned(t, governedConfig)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	future := streamRequest("cam", "fast", 1, clock.Monotonic()+int64(3600e9))
	if _, err := c.ModelInfer(ctx, future); status.Code(err) != codes.InvalidArgument {
		t.Errorf("capture in the future: %v, want INVALID_ARGUMENT", err)
	}
	wall := streamRequest("cam", "fast", 2, time.Now().UnixNano()) // wall clock sent to a monotonic vig
	if _, err := c.ModelInfer(ctx, wall); status.Code(err) != codes.InvalidArgument {
		t.Errorf("capture on the wrong clock: %v, want INVALID_ARGUMENT", err)
	}
	neg := inferRequest("fast", "x#1", 8)
	delete(neg.Parameters, wire.ParamStream)
	neg.Parameters["timeout"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -5}}
	if _, err := c.ModelInfer(ctx, neg); status.Code(err) != codes.InvalidArgument {
		t.Errorf("negative timeout: %v, want INVALID_ARGUMENT", err)
	}
	wrong := inferRequest("fast", "x#2", 8)
	delete(wrong.Parameters, wire.ParamStream)
	wrong.Parameters["priority"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "high"}}
	if _, err := c.ModelInfer(ctx, wrong); status.Code(err) != codes.InvalidArgument {
		t.Errorf("priority as string: %v, want INVALID_ARGUMENT", err)
	}
	// A model vig has no prior for is forwarded ungoverned; the backend says NOT_FOUND.
	if _, err := c.ModelInfer(ctx, inferRequest("nope", "x#3", 8)); status.Code(err) != codes.NotFound {
		t.Errorf("unknown model: %v, want the backend's NOT_FOUND", err)
	}
	// Plain Triton request without a contract: default contract, honoured priority.
	plain := inferRequest("fast", "x#4", 8)
	delete(plain.Parameters, wire.ParamStream)
	plain.Parameters["priority"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1}}
	if _, err := c.ModelInfer(ctx, plain); err != nil {
		t.Errorf("plain Triton request: %v", err)
	}
}

// The statistics poller feeds the backend's compute times to the estimator after
// activity (and only then).
func TestStatsPollerFeedsEstimator(t *testing.T) {
	e, gov, _ := startGoverned(t, strings.Replace(governedConfig, "stats_interval_ms: -1", "stats_interval_ms: 20", 1))
	p := gateway.NewStatsPoller(e.gw, gov, 20*time.Millisecond, slog.Default())
	ctx := ctxT(t)
	go p.Run(ctx)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	var snap sched.Snapshot
	for i := range 2000 {
		if _, err := c.ModelInfer(ctx, streamRequest("cam", "fast", uint64(i), clock.Monotonic())); err != nil {
			t.Fatal(err)
		}
		gov.Snapshot(&snap)
		for _, est := range snap.Estimates {
			if est.Model == "fast" && est.Backend > 0 {
				if est.Backend > time.Second {
					t.Fatalf("backend compute time %v for a 5 ms model", est.Backend)
				}
				return
			}
		}
	}
	t.Fatalf("estimator never received backend statistics: %+v", snap.Estimates)
}

// TestSchedConfigScheduling maps the scheduling keys of issue 12: the told grid,
// the order and pipelined dispatch.
func TestSchedConfigScheduling(t *testing.T) {
	c, err := config.Parse("s.yaml", []byte(`scheduler: {order: class_first, pipeline: false, commit_lead_ms: 1.5}
models: {m: {exec_ms: 5}}
streams:
  - {name: a, model: m, class: high, period_ms: 33, max_age_ms: 66, window_offset_ms: 40}
  - {name: b, model: m, class: high, period_ms: 33, max_age_ms: 66}
`))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := gateway.SchedConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Order != sched.OrderClassFirst || !sc.NoPipeline || sc.CommitLead != 1500*time.Microsecond {
		t.Errorf("order %v, no pipeline %v, lead %v", sc.Order, sc.NoPipeline, sc.CommitLead)
	}
	if a, b := sc.Streams[0], sc.Streams[1]; !a.WindowAligned || a.WindowOffset != 7*time.Millisecond || b.WindowAligned {
		t.Errorf("grid: %+v / %+v", a, b)
	}
	c, _ = config.Parse("d.yaml", []byte("models: {m: {exec_ms: 5}}\n"))
	if sc, _ := gateway.SchedConfig(c); sc.Order != sched.OrderLaxity || sc.NoPipeline || sc.CommitLead != 0 {
		t.Errorf("defaults: %+v", sc)
	}
}

// A backend slower than vig's prior: the estimator follows what the backend
// really takes, and the freshness rule then uses it. A frame 520 ms old with a
// 600 ms max_age is forwarded while vig believes the model takes 2 ms, and
// refused (DEADLINE_EXCEEDED, never forwarded) once it has measured ~100 ms
// (at least 90: the mock's factor is 0.9–1.3). The max_age leaves fresh frames
// room however slow a loaded machine makes the measured calls (with 150 ms, an
// estimate of 114 ms on a loaded machine judged a fresh frame late).
func TestSlowBackendEstimatorAdapts(t *testing.T) {
	e, gov, _ := startGovernedMock(t, `
listen: {metrics: "off"}
backend: {slots: 1, stats_interval_ms: -1}
scheduler: {safety_margin_pct: 100}
models:
  fast: {exec_ms: 2}
streams:
  - {name: cam, model: fast, class: high, period_ms: 50, max_age_ms: 600}
`, `
models:
  fast: {exec_ms: 100}
`)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	aged := func() int64 { return clock.Monotonic() - int64(520*time.Millisecond) }
	forwarded := func() float64 {
		return scrape(t, e.reg)[`vig_stream_requests_total{class="high",outcome="forwarded",stream="cam"}`]
	}

	if _, err := c.ModelInfer(ctx, streamRequest("cam", "fast", 0, aged())); err != nil {
		t.Fatalf("a 520 ms old frame with the 2 ms prior: %v, want it forwarded", err)
	}
	estimate := func() time.Duration {
		var snap sched.Snapshot
		gov.Snapshot(&snap)
		for _, est := range snap.Estimates {
			if est.Model == "fast" && est.Busy <= 1 && est.Samples > 0 {
				return est.Estimate
			}
		}
		return 0
	}
	frame := uint64(1)
	for ; estimate() < 90*time.Millisecond; frame++ {
		if frame > 30 {
			t.Fatalf("after %d calls of ~100 ms the estimate is %v", frame-1, estimate())
		}
		if _, err := c.ModelInfer(ctx, streamRequest("cam", "fast", frame, clock.Monotonic())); err != nil {
			t.Fatalf("fresh frame %d: %v", frame, err)
		}
	}
	t.Logf("estimate %v after %d calls", estimate(), frame)

	before := forwarded()
	_, err := c.ModelInfer(ctx, streamRequest("cam", "fast", frame, aged()))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a 520 ms old frame once the backend is known to take ~100 ms: %v, want DEADLINE_EXCEEDED", err)
	}
	if after := forwarded(); after != before {
		t.Errorf("the refused frame was forwarded (forwarded %v → %v)", before, after)
	}
	if _, err := c.ModelInfer(ctx, streamRequest("cam", "fast", frame+1, clock.Monotonic())); err != nil {
		t.Errorf("a fresh frame after the refusal: %v", err)
	}
}

// A request on a configured stream that names another model is refused with both
// names and the fix, whether vig knows that model (it used to say only "stream is
// configured for another model") or not (it used to be forwarded ungoverned, out of
// the stream's contract).
func TestStreamBoundToAnotherModel(t *testing.T) {
	e, _, _ := startGoverned(t, governedConfig)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	for _, model := range []string{"slow", "nosuch"} {
		_, err := c.ModelInfer(ctxT(t), streamRequest("cam", model, 1, clock.Monotonic()))
		want := fmt.Sprintf(`stream "cam" is configured for model "fast", and this request names model %q`, model)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("model %s on stream cam: %v; want INVALID_ARGUMENT containing %q", model, err, want)
		}
	}
	if _, err := c.ModelInfer(ctxT(t), streamRequest("cam", "fast", 2, clock.Monotonic())); err != nil {
		t.Errorf("the stream's own model: %v", err)
	}
}
