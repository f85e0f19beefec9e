package gateway_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

// A relayed RPC with gRPC compression: the messages keep their compressed flag,
// so vig carries grpc-encoding (and grpc-accept-encoding) on, both ways. It used
// to strip them, and the backend refused a compressed message with no encoding.
func TestRelayCompressed(t *testing.T) {
	e, p := withProbe(t, "")
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
	defer cancel()
	// The probe echoes the request's bytes: a ModelConfigResponse whose config
	// field (1) reads back the request's name (field 1).
	r, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "detector"}, grpc.UseCompressor(gzip.Name))
	if err != nil {
		t.Fatalf("ModelConfig with gzip through vig: %v", err)
	}
	if want, _ := proto.Marshal(&pb.ModelConfigRequest{Name: "detector"}); string(r.Config) != string(want[2:]) {
		t.Errorf("echo %q", r.Config)
	}
	if n := len(p.recorded("/inference.GRPCInferenceService/ModelConfig")); n != 1 {
		t.Errorf("%d calls reached the backend, want 1", n)
	}
}
