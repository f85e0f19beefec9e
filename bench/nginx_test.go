package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vig-edge/vig/mockbackend"
	pb "github.com/vig-edge/vig/proto/inference"
)

// nginx starts with the generated configuration and proxies gRPC, unary inference
// with a camera-sized frame included, to the mock backend.
func TestNginxProxies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := nginxBinary(); errors.Is(err, errSkip) {
		t.Skip(err)
	}
	mb, err := startMock(ctx, "127.0.0.1:0", mockbackend.Config{Models: []mockbackend.Model{{Name: "m", Exec: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Stop()
	p, addr, err := StartNginx(ctx, t.TempDir(), mb.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	cc, err := dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive through nginx: %v %v", r, err)
	}
	for _, size := range []int{0, 6_200_000} {
		resp, err := c.ModelInfer(ctx, frameRequest("m", "cam", 7, 1, make([]byte, size)))
		if err != nil {
			t.Fatalf("ModelInfer %d B through nginx: %v", size, err)
		}
		if resp.Id != mockbackend.FrameID("cam", 7) || len(resp.RawOutputContents) != 1 {
			t.Fatalf("response %v", resp)
		}
	}
	if st, err := mb.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "m"}); err != nil || st.ModelStats[0].InferenceCount != 2 {
		t.Fatalf("backend saw %v (%v), want 2 inferences", st, err)
	}
}
