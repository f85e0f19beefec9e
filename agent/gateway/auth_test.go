package gateway_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/access"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/netopt"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// With a token configured, every RPC but the health check needs it; a refused
// call never reaches the backend, an admitted one reaches it without vig's
// credential, and the connection keeps serving after refusals.
func TestBearerToken(t *testing.T) {
	var calls atomic.Int64
	echo := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		calls.Add(1)
		md, _ := metadata.FromIncomingContext(ss.Context())
		ss.SetHeader(metadata.Pairs("x-echo-auth", strings.Join(md.Get("authorization"), ",")+"|"))
		var f wire.Frame
		ss.RecvMsg(&f)
		f.Free()
		return status.Error(codes.FailedPrecondition, "echo backend reached")
	}), grpc.ForceServerCodecV2(wire.RawCodec()))
	bln, err := netopt.Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go echo.Serve(bln)
	t.Cleanup(echo.Stop)

	cfg := testConfig(t, "")
	cfg.Backend.Address = bln.Addr().String()
	tok, err := access.NewToken([]byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	var sockets netopt.Stats
	reg := metrics.New()
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: sockets.DialAddr, Metrics: reg, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(ln)
	t.Cleanup(gw.Stop)
	e := &env{cfg: cfg, tcp: ln.Addr().String()}
	waitBackendReady(t, e)
	cc := e.dial(t, ln.Addr().String())
	c := pb.NewGRPCInferenceServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	with := func(v string) context.Context { return metadata.AppendToOutgoingContext(ctx, "authorization", v) }

	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"missing", ctx, "Bearer <token>"},
		{"wrong", with("Bearer guess"), "wrong"},
		{"other scheme", with("Basic czNjcjN0"), "not \"Bearer"},
	} {
		if _, err := c.ModelConfig(tc.ctx, &pb.ModelConfigRequest{Name: "m"}); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ModelConfig, token %s: %v, want UNAUTHENTICATED saying %q", tc.name, err, tc.want)
		}
		if _, err := c.ModelInfer(tc.ctx, inferRequest("detector", "cam0#1", 16)); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ModelInfer, token %s: %v, want UNAUTHENTICATED", tc.name, err)
		}
		st, err := c.ModelStreamInfer(tc.ctx)
		if err == nil {
			st.Send(inferRequest("detector", "cam0#1", 16))
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("ModelStreamInfer, token %s: %v, want UNAUTHENTICATED", tc.name, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d refused calls reached the backend", n)
	}
	// The health check stays open (an orchestrator probes without the token).
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without a token: %v", err)
	}
	var hdr, trl metadata.MD
	_, err = c.ModelConfig(with("Bearer s3cr3t"), &pb.ModelConfigRequest{Name: "m"}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "echo backend reached") {
		t.Fatalf("ModelConfig with the token: %v, want the backend's answer", err)
	}
	hdr = metadata.Join(hdr, trl)
	if got := hdr.Get("x-echo-auth"); len(got) != 1 || got[0] != "|" {
		t.Errorf("vig's credential reached the backend: %v", got)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("backend calls = %d, want 1", n)
	}
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), `vig_access_refused_total{listener="grpc",reason="token"} 9`) {
		t.Errorf("refusals not counted (want 9):\n%s", grepLines(string(body), "vig_access_refused"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
