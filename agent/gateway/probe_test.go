package gateway_test

// Shared helpers of the black-box conformance and abuse suites (conformance_test.go,
// h2abuse_test.go): a probe backend that records what reaches it, plain-window gRPC
// clients, and bounded polling.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/metrics"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// probeMode is the request metadata key that tells the probe backend what to do
// with a call: "hold" (wait until released or cancelled), "big:N" (a ModelInfer
// answered with N bytes of output), anything else echo.
const probeMode = "x-probe"

// probe is a Triton-protocol backend built on grpc-go with its default flow-control
// windows (64 KiB) and frame size (16 KiB); only the message size limits are raised.
// It answers every method with a raw handler and records what reached it.
type probe struct {
	addr        string
	srv         *grpc.Server
	release     chan struct{} // closed (unhold): held calls return
	releaseOnce sync.Once
	started     chan string // the x-probe-id (or method) of every call the handler entered

	mu sync.Mutex
	// onCall, when set (setOnCall), answers every call instead of the default
	// behaviour. req is the first request message (nil when the client sent
	// none). Under mu: vig's own calls (ModelConfig on connecting) may be in
	// the handler when a test sets it, and a socket is no happens-before edge
	// for the race detector.
	onCall func(ss grpc.ServerStream, method string, req []byte) error
	calls  []probeCall

	messages atomic.Int64 // calls whose request message arrived whole
	// inferMessages counts those of ModelInfer: vig's own calls (ModelStatistics,
	// health) reach the probe too, whenever their interval comes round.
	inferMessages atomic.Int64
	// cancelled counts calls whose stream ended by its context (vig reset it, or
	// its deadline passed) while the probe held them or before their request
	// message arrived: a reset can overtake the request's DATA, and that call's
	// backend stream is cancelled all the same.
	cancelled atomic.Int64
	ctxErrs   sync.Map // x-probe-id → context error of a cancelled call
}

type probeCall struct {
	method   string
	md       metadata.MD
	deadline time.Time // zero: none
	at       time.Time // when the handler was entered
}

func startProbe(t *testing.T, opts ...grpc.ServerOption) *probe {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startProbeOn(t, ln, opts...)
}

func startProbeOn(t *testing.T, ln net.Listener, opts ...grpc.ServerOption) *probe {
	t.Helper()
	p := &probe{addr: ln.Addr().String(), release: make(chan struct{}), started: make(chan string, 4096)}
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20), grpc.MaxSendMsgSize(64 << 20),
		grpc.ForceServerCodecV2(wire.RawCodec()), grpc.UnknownServiceHandler(p.handle)}, opts...)
	p.srv = grpc.NewServer(opts...)
	go p.srv.Serve(ln)
	t.Cleanup(func() { p.unhold(); p.srv.Stop() })
	return p
}

// unhold releases every held call.
func (p *probe) unhold() { p.releaseOnce.Do(func() { close(p.release) }) }

// setOnCall sets how the probe answers the calls that start from now on.
// Calls vig makes of its own (the model configuration read on connecting) may
// be running on other goroutines: onCall is read under p.mu.
func (p *probe) setOnCall(f func(ss grpc.ServerStream, method string, req []byte) error) {
	p.mu.Lock()
	p.onCall = f
	p.mu.Unlock()
}

func (p *probe) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	c := probeCall{method: method, md: md.Copy(), at: time.Now()}
	c.deadline, _ = ctx.Deadline()
	p.mu.Lock()
	p.calls = append(p.calls, c)
	onCall := p.onCall
	p.mu.Unlock()
	id := first(md, "x-probe-id")
	if id == "" {
		id = method
	}
	// vig reads the server's model configuration each time it connects
	// (servermodels.go): not a call the tests wait for.
	if method != "/"+wire.Service+"/ModelConfig" || first(md, "x-probe-id") != "" {
		select {
		case p.started <- id:
		default:
		}
	}

	var f wire.Frame
	var req []byte
	if err := ss.RecvMsg(&f); err == nil {
		req = f.Bytes()
		f.Free()
		p.messages.Add(1)
		if method == wire.MethodInfer {
			p.inferMessages.Add(1)
		}
	} else if onCall == nil {
		if ctx.Err() != nil {
			p.cancelled.Add(1)
			p.ctxErrs.Store(id, ctx.Err())
		}
		return err
	}
	if onCall != nil {
		return onCall(ss, method, req)
	}
	mode := first(md, probeMode)
	if mode == "hold" {
		select {
		case <-p.release:
		case <-ctx.Done():
			p.cancelled.Add(1)
			p.ctxErrs.Store(id, ctx.Err())
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	switch method {
	case "/" + wire.Service + "/ServerLive":
		b, _ := proto.Marshal(&pb.ServerLiveResponse{Live: true})
		return ss.SendMsg(rawBytes(b))
	case wire.MethodInfer:
	default:
		return ss.SendMsg(rawBytes(req)) // echo
	}
	var in pb.ModelInferRequest
	if err := proto.Unmarshal(req, &in); err != nil {
		return status.Errorf(codes.InvalidArgument, "probe: %v", err)
	}
	out := &pb.ModelInferResponse{ModelName: in.ModelName, ModelVersion: "1", Id: in.Id}
	if n, ok := strings.CutPrefix(mode, "big:"); ok {
		size, _ := strconv.Atoi(n)
		out.RawOutputContents = [][]byte{bigPattern(size)}
	} else {
		out.RawOutputContents = in.RawInputContents
	}
	b, err := proto.Marshal(out)
	if err != nil {
		return err
	}
	return ss.SendMsg(rawBytes(b))
}

// recorded returns the calls of method that reached the probe.
func (p *probe) recorded(method string) []probeCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []probeCall
	for _, c := range p.calls {
		if c.method == method {
			out = append(out, c)
		}
	}
	return out
}

// waitStarted waits for n calls to enter the probe's handler.
func (p *probe) waitStarted(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	timeout := time.After(5 * time.Second)
	for len(ids) < n {
		select {
		case id := <-p.started:
			ids = append(ids, id)
		case <-timeout:
			t.Fatalf("only %d of %d calls reached the backend: %v", len(ids), n, ids)
		}
	}
	return ids
}

// waitStartedID waits for n calls with x-probe-id id to enter the handler, ignoring
// others.
func (p *probe) waitStartedID(t *testing.T, id string, n int) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for seen := 0; seen < n; {
		select {
		case got := <-p.started:
			if got == id {
				seen++
			}
		case <-timeout:
			t.Fatalf("only %d of %d %q calls reached the backend", seen, n, id)
		}
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// pattern is n bytes that differ with seed, so that swapped or shifted payloads show.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

var bigPatterns sync.Map // size → pattern(size, 3), shared read-only

// bigPattern is pattern(n, 3), computed once per size.
func bigPattern(n int) []byte {
	if b, ok := bigPatterns.Load(n); ok {
		return b.([]byte)
	}
	b, _ := bigPatterns.LoadOrStore(n, pattern(n, 3))
	return b.([]byte)
}

// plainClient dials addr with grpc-go's default windows and frame size; only the
// message size limits are raised (a client of vig that sends camera frames must do
// that much).
func plainClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// withProbe starts vig (ungoverned) in front of a probe backend.
func withProbe(t *testing.T, extra string, opts ...grpc.ServerOption) (*env, *probe) {
	t.Helper()
	p := startProbe(t, opts...)
	cfg := testConfig(t, extra)
	cfg.Backend.Address = p.addr
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	return e, p
}

// waitBackendReady waits (health Watch, no polling) until vig reports SERVING:
// its backend connection is up.
func waitBackendReady(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	waitHealth(t, ctx, healthpb.NewHealthClient(e.dial(t, e.tcp)), healthpb.HealthCheckResponse_SERVING)
}

// governedYAML: one slot, three protected streams of one 5 ms model, max_age long
// enough that nothing is late-dropped while a held call blocks the slot.
// The scheduler does not commit a request to the backend behind a running one
// (pipeline: false): these tests hold one call on the backend and need the next
// ones waiting in vig. agent/sched tests the pipelined commit.
const governedYAML = `
listen: {metrics: "off"}
backend: {slots: 1, stats_interval_ms: -1}
scheduler: {safety_margin_pct: 100, pipeline: false}
models:
  m: {exec_ms: 5}
streams:
  - {name: a, model: m, class: protected, period_ms: 1000, max_age_ms: 30000}
  - {name: b, model: m, class: protected, period_ms: 1000, max_age_ms: 30000}
  - {name: c, model: m, class: protected, period_ms: 1000, max_age_ms: 30000}
`

// governedProbe starts vig with the freshness scheduler in front of a probe backend.
func governedProbe(t *testing.T) (*env, *gateway.Governor, *probe) {
	t.Helper()
	p := startProbe(t)
	e, gov, _ := governedAt(t, governedYAML, p.addr)
	// vig reads the model's configuration on connecting: done before a test
	// sets the probe's behaviour (setOnCall), which would answer those calls.
	eventually(t, "the server's model configuration read", func() bool { return e.gw.ServerModelReads() > 0 })
	return e, gov, p
}

// probeCtx is ctx with the probe's instructions for the call.
func probeCtx(ctx context.Context, mode, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, probeMode, mode, "x-probe-id", id)
}

// eventually polls cond (every 2 ms, at most 5 s).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// streamCounters reads the scheduler's per-stream series from vig's registry:
// stream → outcome or state ("received", "forwarded", …, "waiting", "running") → value.
func streamCounters(t *testing.T, reg *metrics.Registry) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	for k, v := range scrape(t, reg) {
		var kind string
		switch {
		case strings.HasPrefix(k, "vig_stream_requests_total{"):
			kind = "outcome"
		case strings.HasPrefix(k, "vig_stream_in_flight{"):
			kind = "state"
		default:
			continue
		}
		stream, what := label(k, "stream"), label(k, kind)
		if out[stream] == nil {
			out[stream] = map[string]float64{}
		}
		out[stream][what] = v
	}
	return out
}

func label(series, name string) string {
	_, rest, ok := strings.Cut(series, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// checkBalanced asserts received = Σ outcomes + in flight for every stream, read
// from one scrape of vig's registry, and returns the counters.
func checkBalanced(t *testing.T, reg *metrics.Registry) map[string]map[string]float64 {
	t.Helper()
	all := streamCounters(t, reg)
	for stream, c := range all {
		sum := c["forwarded"] + c["superseded"] + c["late_dropped"] + c["rejected"] + c["backend_error"] + c["cancelled"]
		if c["received"] != sum+c["waiting"]+c["running"] {
			t.Errorf("stream %s: received %v != outcomes %v + waiting %v + running %v (%v)", stream, c["received"], sum, c["waiting"], c["running"], c)
		}
	}
	return all
}

// grpcCodes reads vig_grpc_requests_total for method: code name → count.
func grpcCodes(t *testing.T, reg *metrics.Registry, method string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range scrape(t, reg) {
		if strings.HasPrefix(k, "vig_grpc_requests_total{") && label(k, "method") == method {
			out[label(k, "code")] += v
		}
	}
	return out
}

// drained waits until vig has answered every RPC it accepted.
func drained(t *testing.T, gw *gateway.Gateway) {
	t.Helper()
	eventually(t, "Accepted() == Answered()", func() bool { return gw.Accepted() == gw.Answered() })
}

// serves checks that vig answers a fresh client: ServerLive and one ModelInfer.
func serves(t *testing.T, addr, model string) error {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
	defer cancel()
	c := pb.NewGRPCInferenceServiceClient(cc)
	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		return fmt.Errorf("ServerLive: %v %v", r, err)
	}
	r, err := c.ModelInfer(ctx, inferRequest(model, "alive#1", 1000))
	if err != nil || r.Id != "alive#1" {
		return fmt.Errorf("ModelInfer: %v %v", r, err)
	}
	return nil
}
