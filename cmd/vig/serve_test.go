package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
)

func TestUnknownConfigKeyExits2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("listen: {grpc: \"127.0.0.1:0\"}\nbackend:\n  slots: 1\n  adress: x\n"), 0o600)
	stderr := captureStderr(t, func() {
		if code := run([]string{"serve", "-c", path}); code != 2 {
			t.Errorf("exit code %d, want 2", code)
		}
	})
	if !strings.Contains(stderr, "bad.yaml:4") || !strings.Contains(stderr, `unknown key "adress"`) {
		t.Errorf("error does not name key and line:\n%s", stderr)
	}
}

func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stderr
	os.Stderr = w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { buf.ReadFrom(r); close(done) }()
	f()
	os.Stderr = orig
	w.Close()
	<-done
	return buf.String()
}

// SIGTERM (ctx cancelled) during load: every request vig accepted is answered, the
// drain log says 0 lost, and every client call ended with a status (none hung).
func TestDrainUnderLoadLosesNothing(t *testing.T) {
	cfg, err := config.Parse("drain.yaml", []byte(`
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models:
  det: {exec_ms: 3}
  vlm: {exec_ms: 40, corun: false}
streams:
  - {name: det, model: det, class: protected, period_ms: 10, max_age_ms: 200}
  - {name: vlm, model: vlm, class: best_effort, period_ms: 100, max_age_ms: 2000, queue: fifo, capacity: 4}
`))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, log, ready, nil) }()
	addrs := <-ready

	cc, err := grpc.NewClient("passthrough:///"+addrs["grpc"], append(gateway.DialOptions(cfg.GRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)

	var mu sync.Mutex
	outcomes := map[codes.Code]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream, model := "det", "det"
			if i == 0 {
				stream, model = "vlm", "vlm"
			}
			for f := uint64(0); ; f++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
				r := &pb.ModelInferRequest{ModelName: model, Id: mockbackend.FrameID(stream, f),
					Parameters: map[string]*pb.InferParameter{
						gateway.ParamStream:  {ParameterChoice: &pb.InferParameter_StringParam{StringParam: stream}},
						gateway.ParamCapture: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: clock.Monotonic()}},
					}}
				_, err := c.ModelInfer(cctx, r)
				ccancel()
				mu.Lock()
				outcomes[status.Code(err)]++
				mu.Unlock()
				if status.Code(err) == codes.Unavailable {
					return // vig is gone (or going)
				}
			}
		}()
	}
	// Let load build up, then "SIGTERM".
	for {
		mu.Lock()
		n := outcomes[codes.OK]
		mu.Unlock()
		if n >= 30 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	close(stop)
	wg.Wait()
	out := logs.String()
	if !strings.Contains(out, "drained:") || !strings.Contains(out, " 0 lost") {
		t.Errorf("drain log missing or lossy:\n%s", out)
	}
	for code, n := range outcomes {
		switch code {
		case codes.OK, codes.Aborted, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted:
		default:
			t.Errorf("%d calls ended with %v (a hang or a lost request)", n, code)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}
