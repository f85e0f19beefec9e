package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	"github.com/vig-edge/vig/wire"

	pb "github.com/vig-edge/vig/proto/inference"
)

const variantConfig = `
accelerators: {gpu: 1, dla0: 1}
models:
  detector: {variants: [detector_gpu, detector_dla0]}
  detector_gpu: {exec_ms: 8, on: gpu}
  detector_dla0: {exec_ms: 14, on: dla0}
streams:
  - {name: cam, model: detector, class: high, period_ms: 1000, max_age_ms: 2000}
`

// A frame of a logical model reaches the backend under the name of the
// variant it runs as (the mock knows only the variants: an unrenamed frame
// is NOT_FOUND there), whole or large enough to be cut through otherwise;
// the answer names the variant, and vig counts it.
func TestVariantRenamedOnTheWire(t *testing.T) {
	cfg, err := config.Parse("v.yaml", []byte(variantConfig))
	if err != nil {
		t.Fatal(err)
	}
	_, err = gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic})
	if err != nil {
		t.Fatal(err)
	}
	e, _, _ := startGovernedMock(t, variantConfig, `
backend: {slots: 2}
models:
  detector_gpu: {exec_ms: 2}
  detector_dla0: {exec_ms: 2}
`)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	ran := map[string]int{}
	for i, size := range []int{64, 64, 512 << 10} {
		r := streamRequest("cam", "detector", uint64(i), clock.Monotonic())
		r.Inputs[0].Shape = []int64{int64(size)}
		r.RawInputContents[0] = make([]byte, size)
		resp, err := c.ModelInfer(ctx, r)
		if err != nil {
			t.Fatalf("frame %d (%d bytes): %v", i, size, err)
		}
		if resp.ModelName != "detector_gpu" && resp.ModelName != "detector_dla0" {
			t.Fatalf("frame %d answered as %q, want a variant", i, resp.ModelName)
		}
		ran[resp.ModelName]++
	}
	m := scrape(t, e.reg)
	for v, n := range ran {
		key := fmt.Sprintf(`vig_variant_dispatches_total{model="detector",variant=%q}`, v)
		if m[key] != float64(n) {
			t.Errorf("%s = %v, want %d", key, m[key], n)
		}
	}
}

// The control RPCs that name a model answer for a logical one (the mock
// serves only its variants): ModelReady from the variants, ModelMetadata and
// ModelConfig the first variant's named detector, ModelStatistics each
// variant's entry. A name that is neither served nor logical is the
// backend's answer, as for any relayed RPC.
func TestLogicalModelControlRPCs(t *testing.T) {
	e, _, _ := startGovernedMock(t, variantConfig, `
models:
  detector_gpu: {exec_ms: 2}
  detector_dla0: {exec_ms: 2}
`)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	ready, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "detector"})
	if err != nil || !ready.Ready {
		t.Errorf("ModelReady(detector) = %v, %v; want ready", ready, err)
	}
	meta, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "detector"})
	if err != nil {
		t.Fatalf("ModelMetadata(detector): %v", err)
	}
	zmeta, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "detector"}, grpc.UseCompressor(gzip.Name))
	if err != nil || !proto.Equal(zmeta, meta) {
		t.Errorf("ModelMetadata(detector) gzip-compressed = %v, %v; want %v", zmeta, err, meta)
	}
	direct, err := pb.NewGRPCInferenceServiceClient(e.dial(t, e.cfg.Backend.Address)).ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "detector_gpu"})
	if err != nil {
		t.Fatal(err)
	}
	direct.Name = "detector"
	if !proto.Equal(meta, direct) {
		t.Errorf("ModelMetadata(detector) = %v, want detector_gpu's renamed: %v", meta, direct)
	}
	cfgResp, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "detector"})
	if err != nil {
		t.Fatalf("ModelConfig(detector): %v", err)
	}
	mc, err := wire.ParseModelConfig(cfgResp.Config)
	if err != nil || mc.Name != "detector" || mc.Platform == "" {
		t.Errorf("ModelConfig(detector) = %+v, %v; want detector_gpu's named detector", mc, err)
	}
	// A control request vig would have to hold or inflate beyond
	// maxLogicalRequest is relayed as it is: the backend does not know the
	// logical name.
	pad := protowire.AppendBytes(protowire.AppendTag(nil, 15, protowire.BytesType), []byte(strings.Repeat("1", 1<<20)))
	for _, opts := range [][]grpc.CallOption{nil, {grpc.UseCompressor(gzip.Name)}} {
		req := &pb.ModelReadyRequest{Name: "detector"}
		req.ProtoReflect().SetUnknown(pad) // the backend ignores an unknown field
		r, err := c.ModelReady(ctx, req, opts...)
		if err == nil && r.Ready {
			t.Errorf("ModelReady(detector) padded to 1 MiB (compressed %v) answered by vig: %v", opts != nil, r)
		}
	}
	st, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "detector"})
	if err != nil || len(st.ModelStats) != 2 || st.ModelStats[0].Name != "detector_gpu" || st.ModelStats[1].Name != "detector_dla0" {
		t.Errorf("ModelStatistics(detector) = %v, %v; want the entries of detector_gpu and detector_dla0", st, err)
	}
	if _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nothing"}); status.Code(err) != codes.NotFound {
		t.Errorf("ModelMetadata(nothing): %v, want NOT_FOUND", err)
	}
	if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "nothing"}); err != nil || r.Ready {
		t.Errorf("ModelReady(nothing) = %v, %v; want not ready", r, err)
	}
}

// A logical model is ready when one of its variants is, whichever; not
// ready when none is.
func TestLogicalModelReadyFromAnyVariant(t *testing.T) {
	for _, c := range []struct {
		served string
		ready  bool
	}{
		{"detector_dla0", true},
		{"other", false},
	} {
		t.Run(c.served, func(t *testing.T) {
			e, _, _ := startGovernedMock(t, variantConfig, "models: {"+c.served+": {exec_ms: 2}}")
			cl := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
			r, err := cl.ModelReady(ctxT(t), &pb.ModelReadyRequest{Name: "detector"})
			if err != nil || r.Ready != c.ready {
				t.Errorf("ModelReady(detector) with %s served = %v, %v; want ready %v", c.served, r, err, c.ready)
			}
		})
	}
}

// stallReady is a backend whose ModelReady answers only when its caller
// gives up, and which records the metadata each call carried.
type stallReady struct {
	pb.UnimplementedGRPCInferenceServiceServer
	gone chan string // the token of each ModelReady call, once its context ends
}

func (s *stallReady) ModelReady(ctx context.Context, _ *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	<-ctx.Done()
	md, _ := metadata.FromIncomingContext(ctx)
	s.gone <- strings.Join(md.Get("x-token"), ",")
	return nil, ctx.Err()
}

// A logical model's ModelReady carries the client's deadline and metadata
// to the backend's calls for its variants: past the deadline the client is
// answered DEADLINE_EXCEEDED and the backend's call is cancelled; vig has
// answered everything it accepted.
func TestLogicalModelReadyDeadline(t *testing.T) {
	backend := &stallReady{gone: make(chan string, 2)}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, backend)
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	e, _, _ := governedAt(t, variantConfig, ln.Addr().String())
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-token", "t1"), 300*time.Millisecond)
	defer cancel()
	if _, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "detector"}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("ModelReady(detector) past its deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	select {
	case tok := <-backend.gone:
		if tok != "t1" {
			t.Errorf("the backend's call carried x-token %q, want the client's t1", tok)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the backend's ModelReady call was never cancelled")
	}
	for until := time.Now().Add(30 * time.Second); e.gw.Accepted() != e.gw.Answered(); time.Sleep(time.Millisecond) {
		if time.Now().After(until) {
			t.Fatalf("%d accepted, %d answered", e.gw.Accepted(), e.gw.Answered())
		}
	}
}
