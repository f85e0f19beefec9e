package doctor

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// configServer is a backend that is live, has every model ready and serves one
// ModelConfig for all of them.
type configServer struct {
	inference.GRPCInferenceServiceClient
	mc wire.ModelConfig
}

func (s configServer) ServerLive(context.Context, *inference.ServerLiveRequest, ...grpc.CallOption) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (s configServer) ModelReady(context.Context, *inference.ModelReadyRequest, ...grpc.CallOption) (*inference.ModelReadyResponse, error) {
	return &inference.ModelReadyResponse{Ready: true}, nil
}

func (s configServer) ModelConfig(_ context.Context, r *inference.ModelConfigRequest, _ ...grpc.CallOption) (*inference.ModelConfigResponse, error) {
	mc := s.mc
	mc.Name = r.Name
	return &inference.ModelConfigResponse{Config: wire.AppendModelConfig(nil, &mc)}, nil
}

// TestBatchCheck: doctor says how vig batches each model given the server's
// configuration, and warns with the fix where the config and the server
// disagree.
func TestBatchCheck(t *testing.T) {
	for _, tc := range []struct {
		model  string
		mc     wire.ModelConfig
		status Status
		detail string
	}{
		{"{exec_ms: 10}", wire.ModelConfig{MaxBatchSize: 8}, OK, "up to 8 frames"},
		{"{exec_ms: 10}", wire.ModelConfig{}, OK, "one frame per request"},
		{"{exec_ms: 10, max_batch: 8}", wire.ModelConfig{}, Warn, "max_batch_size in its config.pbtxt"},
		{"{exec_ms: 10, max_batch: 16}", wire.ModelConfig{MaxBatchSize: 8}, Warn, "set max_batch: 8"},
		{"{exec_ms: 10, max_batch: 8}", wire.ModelConfig{MaxBatchSize: 8, SequenceBatching: true}, Warn, "sequence batcher"},
	} {
		c, err := config.Parse("t.yaml", []byte("backend: {address: \"127.0.0.1:1\"}\nmodels:\n  det: "+tc.model+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		h := &Host{
			DialBackend: func(context.Context, string) (inference.GRPCInferenceServiceClient, func(), error) {
				return configServer{mc: tc.mc}, func() {}, nil
			},
			Since: func(time.Time) time.Duration { return 0 },
		}
		var got *Check
		for _, ch := range backendChecks(context.Background(), c, h) {
			if ch.Name == "model det batching" {
				got = &ch
			}
		}
		if got == nil || got.Status != tc.status || !strings.Contains(got.Detail, tc.detail) {
			t.Errorf("%s, server %+v: %+v, want %v saying %q", tc.model, tc.mc, got, tc.status, tc.detail)
		}
	}
}
