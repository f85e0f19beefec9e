package ringback

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
)

// BenchmarkViaVig measures one ModelInfer with no compute through vig (gateway and
// governor, in this process, the client over loopback TCP), forwarded to the same
// mock backend over its gRPC socket or over a ring. Client, vig and backend share
// the process, so allocs/op counts all three.
func BenchmarkViaVig(b *testing.B) {
	region, err := shmring.Probe()
	if err != nil {
		b.Skipf("no shared memory for rings on this machine: %v", err)
	}
	cfg, err := config.Parse("bench.yaml", []byte("listen: {metrics: \"off\"}\nbackend: {slots: 4, stats_interval_ms: -1}\nmodels:\n  m: {exec_ms: 1}\n"))
	if err != nil {
		b.Fatal(err)
	}
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0",
		mockbackend.Config{Models: []mockbackend.Model{{Name: "m", Exec: 0}}, Slots: 4, Spin: -1}, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer mb.Stop()
	cfg.Backend.Address = mb.Addr()
	rln, err := shmring.Listen(ringAddr(), shmring.ServerConfig{AllowUnsealed: region == shmring.BackendShmFile})
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- mb.ServeRing(rln) }()
	defer func() { rln.Close(); <-served }()
	rb, err := New(rln.Addr(), Options{Config: testRing})
	if err != nil {
		b.Fatal(err)
	}
	defer rb.Close()

	for _, path := range []struct {
		name    string
		backend gateway.Backend
	}{{"grpc-backend", nil}, {"ring-backend", rb}} {
		gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
		if err != nil {
			b.Fatal(err)
		}
		var st netopt.Stats
		gw, err := gateway.New(gateway.Options{Config: cfg, Dial: st.DialAddr, Admit: gov, Backend: path.backend})
		if err != nil {
			b.Fatal(err)
		}
		if path.backend != nil {
			if err := rb.WaitUp(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		ln, err := netopt.Listen("tcp", "127.0.0.1:0", &st)
		if err != nil {
			b.Fatal(err)
		}
		go gw.Serve(ln)
		cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), append(gateway.DialOptions(cfg.GRPC),
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(new(netopt.Stats).DialAddr))...)
		if err != nil {
			b.Fatal(err)
		}
		c := pb.NewGRPCInferenceServiceClient(cc)
		for _, p := range []struct {
			name string
			size int
		}{{"150KB", 150_000}, {"1.2MB", 1_200_000}} {
			b.Run(p.name+"/"+path.name, func(b *testing.B) {
				in := pattern(p.size, 1)
				req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{u8Input("INPUT0", p.size)},
					RawInputContents: [][]byte{in}}
				ctx := context.Background()
				if _, err := c.ModelInfer(ctx, req); err != nil { // connect and warm up
					b.Fatal(err)
				}
				b.SetBytes(int64(p.size))
				b.ReportAllocs()
				var i uint64
				for b.Loop() {
					i++
					req.Id = "s#" + strconv.FormatUint(i, 10)
					if _, err := c.ModelInfer(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		cc.Close()
		gw.Stop()
	}
}
