package deviceprobe

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/vig-edge/vig/proto/inference"
)

// TCP_NODELAY must hold on Linux, where vig ships.
func TestNoDelay(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("vig's sockets are verified on Linux")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := NoDelay(ctx); err != nil {
		t.Fatalf("NoDelay on loopback: %v", err)
	}
}

// BPF either works or says which of the two known reasons stops it.
func TestBPF(t *testing.T) {
	err := BPF()
	t.Logf("BPF: %v", err)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, fs.ErrPermission) {
		t.Errorf("BPF: %v, want nil, ErrUnsupported or ErrPermission", err)
	}
}

type live struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

func (live) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

// DialBackend reaches a real gRPC server, and its release function closes the
// connection.
func TestDialBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(srv, live{})
	go srv.Serve(ln)
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, release, err := DialBackend(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive: %v, %v", r, err)
	}
	release()
	if _, err := c.ServerLive(ctx, &inference.ServerLiveRequest{}); err == nil {
		t.Error("ServerLive succeeded after the connection was released")
	}
}
