package bench

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// defaultGRPC is vig's default transport sizing (config defaults), used for every
// client and mock backend of the benchmarks so that all paths carry 6 MB frames
// with the same windows.
func defaultGRPC() config.GRPC {
	cfg, err := config.Parse("defaults", []byte("backend: {address: \"127.0.0.1:1\"}\nmodels: {m: {exec_ms: 1}}\nstreams: [{name: m, model: m, class: best_effort, period_ms: 1000, max_age_ms: 2000}]\n"))
	if err != nil {
		panic(fmt.Sprintf("bench: default config does not parse: %v", err))
	}
	return cfg.GRPC
}

// dial opens a client connection to addr ("host:port" or "unix:PATH") through
// netopt (TCP_NODELAY verified), sized like vig's own connections.
func dial(addr string) (*grpc.ClientConn, error) {
	var st *netopt.Stats
	opts := append(gateway.DialOptions(defaultGRPC()),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(st.DialAddr))
	return grpc.NewClient("passthrough:///"+addr, opts...)
}

// stockMaxMsg is the message limit of the stock peers (--stock-windows): Triton
// raises gRPC's 4 MiB default to INT32_MAX, and 64 MiB carries every payload.
const stockMaxMsg = 64 << 20

// stockServerOptions is a mock backend as a stock Triton runs its gRPC server:
// gRPC's default flow control (64 KiB initial windows grown by BDP probes,
// default buffers), only the message limit raised.
func stockServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(stockMaxMsg), grpc.MaxSendMsgSize(stockMaxMsg)}
}

// dialStock is dial for a stock client (tritonclient's gRPC channel): default
// flow control and buffers, only the message limit raised.
func dialStock(addr string) (*grpc.ClientConn, error) {
	var st *netopt.Stats
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(stockMaxMsg), grpc.MaxCallSendMsgSize(stockMaxMsg)),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(st.DialAddr))
}

// frameRequest is the request a sensor sends for one frame: the id names (stream,
// frame), so the mock's execution time is ExecTime(seed, stream, frame) on every
// path; vig_stream and vig_capture_ns tell vig (and the Triton-policy emulation,
// through the gateway) which stream and capture time it belongs to. The mock
// ignores vig_* parameters, so the direct path gets the same message.
func frameRequest(model, stream string, frame uint64, capture int64, payload []byte) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{
		ModelName: model,
		Id:        mockbackend.FrameID(stream, frame),
		Parameters: map[string]*pb.InferParameter{
			wire.ParamStream:  {ParameterChoice: &pb.InferParameter_StringParam{StringParam: stream}},
			wire.ParamCapture: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: capture}},
		},
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{int64(len(payload))}}},
		RawInputContents: [][]byte{payload},
	}
}

// startMock starts a mock backend for cfg's models, slots and seed on addr.
func startMock(ctx context.Context, addr string, cfg mockbackend.Config) (*mockbackend.Running, error) {
	return mockbackend.Start(ctx, addr, cfg, gateway.ServerOptions(defaultGRPC()), nil)
}
