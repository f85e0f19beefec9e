package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	pb "github.com/vig-edge/vig/proto/inference"
)

var payloads = []struct {
	name string
	size int
}{{"0B", 0}, {"150KB", 150_000}, {"6.2MB", 6_200_000}}

// BenchmarkForward measures one ModelInfer with no compute, directly to the backend
// and through vig (in this process, over loopback TCP), side by side.
func BenchmarkForward(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte("listen: {metrics: \"off\"}\nbackend: {slots: 4}\n"))
	if err != nil {
		b.Fatal(err)
	}
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0",
		mockbackend.Config{Models: []mockbackend.Model{{Name: "m", Exec: 0}}, Slots: 4}, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer mb.Stop()
	cfg.Backend.Address = mb.Addr()
	var st netopt.Stats
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: st.DialAddr})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", &st)
	if err != nil {
		b.Fatal(err)
	}
	go gw.Serve(ln)
	defer gw.Stop()
	for _, p := range payloads {
		for _, path := range []struct{ name, addr string }{{"direct", mb.Addr()}, {"via-vig", ln.Addr().String()}} {
			b.Run(p.name+"/"+path.name, func(b *testing.B) {
				runInfer(b, path.addr, gateway.DialOptions(cfg.GRPC), p.size)
			})
		}
	}
}

// BenchmarkWindows shows what flow-control sizing does to a 6.2 MB frame on one
// loopback hop: grpc-go's defaults against vig's transport settings.
func BenchmarkWindows(b *testing.B) {
	cfg, _ := config.Parse("bench.yaml", []byte("log: {level: info}\n"))
	for _, tc := range []struct {
		name string
		sopt []grpc.ServerOption
		dopt []grpc.DialOption
	}{
		{"grpc-defaults", []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)},
			[]grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))}},
		{"vig-sized", gateway.ServerOptions(cfg.GRPC), gateway.DialOptions(cfg.GRPC)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0",
				mockbackend.Config{Models: []mockbackend.Model{{Name: "m", Exec: 0}}, Slots: 4}, tc.sopt, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer mb.Stop()
			runInfer(b, mb.Addr(), tc.dopt, 6_200_000)
		})
	}
}

func runInfer(b *testing.B, addr string, dopts []grpc.DialOption, size int) {
	var st netopt.Stats
	cc, err := grpc.NewClient("passthrough:///"+addr, append(dopts,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(st.DialAddr))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	req := inferRequest("m", "", size)
	ctx := context.Background()
	if _, err := c.ModelInfer(ctx, req); err != nil { // connect and warm up
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var i uint64
	for b.Loop() {
		i++
		req.Id = fmt.Sprint("s#", i)
		if _, err := c.ModelInfer(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGovernedForward is BenchmarkForward with vig governing the model (a
// protected stream with a loose contract: every request is admitted, through the
// scheduler). Allocations per request in vig's own code are via-vig minus direct
// (the client and the mock backend, in this process, allocate the same on both).
func BenchmarkGovernedForward(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte(`listen: {metrics: "off"}
backend: {slots: 1, stats_interval_ms: -1}
models:
  m: {exec_ms: 1}
streams:
  - {name: m, model: m, class: protected, period_ms: 1000, max_age_ms: 60000}
`))
	if err != nil {
		b.Fatal(err)
	}
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0",
		mockbackend.Config{Models: []mockbackend.Model{{Name: "m", Exec: 0}}, Slots: 1}, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer mb.Stop()
	cfg.Backend.Address = mb.Addr()
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: func() int64 { return time.Now().UnixNano() }})
	if err != nil {
		b.Fatal(err)
	}
	var st netopt.Stats
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: st.DialAddr, Admit: gov})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", &st)
	if err != nil {
		b.Fatal(err)
	}
	go gw.Serve(ln)
	defer gw.Stop()
	for _, p := range payloads {
		for _, path := range []struct{ name, addr string }{{"direct", mb.Addr()}, {"via-vig", ln.Addr().String()}} {
			b.Run(p.name+"/"+path.name, func(b *testing.B) {
				runInfer(b, path.addr, gateway.DialOptions(cfg.GRPC), p.size)
			})
		}
	}
}

// BenchmarkGovernedTrace is BenchmarkGovernedForward at 0 B with vig's trace
// recorder off and on (the same gateway, alternately): the difference per
// request is what recording costs.
func BenchmarkGovernedTrace(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte(`listen: {metrics: "off"}
backend: {slots: 1, stats_interval_ms: -1}
models:
  m: {exec_ms: 1}
streams:
  - {name: m, model: m, class: protected, period_ms: 1000, max_age_ms: 60000}
`))
	if err != nil {
		b.Fatal(err)
	}
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0",
		mockbackend.Config{Models: []mockbackend.Model{{Name: "m", Exec: 0}}, Slots: 1}, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer mb.Stop()
	cfg.Backend.Address = mb.Addr()
	t0 := time.Now()
	clock := func() int64 { return int64(time.Since(t0)) + 1 }
	rec, _ := trace.NewRecorder(0, clock, nil)
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock, Recorder: rec})
	if err != nil {
		b.Fatal(err)
	}
	var st netopt.Stats
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: st.DialAddr, Admit: gov})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", &st)
	if err != nil {
		b.Fatal(err)
	}
	go gw.Serve(ln)
	defer gw.Stop()
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			if on {
				defer rec.Begin().Close()
			}
			runInfer(b, ln.Addr().String(), gateway.DialOptions(cfg.GRPC), 0)
		})
	}
}
