package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
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
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
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
						wire.ParamStream:  {ParameterChoice: &pb.InferParameter_StringParam{StringParam: stream}},
						wire.ParamCapture: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: clock.Monotonic()}},
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

// vig in front of a runtime reachable only through a shared-memory ring (the mock
// backend's ring listener): inference goes over the ring, liveness is answered from
// the ring's state, and RPCs the ring has no equivalent for say so.
func TestServeRingBackend(t *testing.T) {
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings: %v", err)
	}
	mcfg, err := config.Parse("m.yaml", []byte("models: {det: {exec_ms: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mockbackend.New(mockbackend.FromConfig(mcfg))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ringAddr := fmt.Sprintf("@vig-serve-ring-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	rln, err := shmring.Listen(ringAddr, shmring.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeRing(rln)
	defer rln.Close()

	cfg, err := config.Parse("ring.yaml", []byte(fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", metrics: "off"}
backend: {address: "ring:%s", slots: 1}
models: {det: {exec_ms: 1}}
streams: [{name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 5000}]
`, rln.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil) }()
	addrs := <-ready
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	cc, err := grpc.NewClient("passthrough:///"+addrs["grpc"], append(gateway.DialOptions(cfg.GRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	for { // the ring session is set up in the background
		r, err := c.ServerReady(cctx, &pb.ServerReadyRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Ready {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	payload := []byte("a frame that crosses the ring")
	r, err := c.ModelInfer(cctx, &pb.ModelInferRequest{ModelName: "det", Id: mockbackend.FrameID("cam", 3),
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{int64(len(payload))}}},
		RawInputContents: [][]byte{payload}})
	if err != nil {
		t.Fatalf("ModelInfer over the ring: %v", err)
	}
	if len(r.RawOutputContents) != 1 || binary.LittleEndian.Uint64(r.RawOutputContents[0]) != mockbackend.Digest([][]byte{payload}) {
		t.Errorf("ring result %x, want the digest of the frame", r.RawOutputContents)
	}
	if _, err := c.ModelConfig(cctx, &pb.ModelConfigRequest{Name: "det"}); status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "ring runtime") {
		t.Errorf("ModelConfig on a ring backend: %v, want UNIMPLEMENTED saying why", err)
	}
}

// The start-up lines name the accelerators and their slots, not only the total.
func TestServeLogsAccelerators(t *testing.T) {
	cfg, err := config.Parse("accel.yaml", []byte(`
listen: {grpc: "127.0.0.1:0", unix: "off", metrics: "off"}
accelerators: {gpu: 1, dla: 2}
backend: {address: "127.0.0.1:0", embedded: true}
models: {det: {exec_ms: 1, on: dla}, vlm: {exec_ms: 5, on: gpu}}
streams: [{name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 5000}]
`))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), ready, nil) }()
	select {
	case <-ready:
	case err := <-served:
		t.Fatalf("serve ended before serving: %v\n%s", err, logs.String())
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
	for _, line := range []string{"embedded mock backend started", "vig serving"} {
		re := regexp.MustCompile(`msg="` + line + `".* slots=3 accelerators="dla=2,gpu=1"`)
		if !re.MatchString(logs.String()) {
			t.Errorf("no %q line with slots=3 accelerators=dla=2,gpu=1:\n%s", line, logs.String())
		}
	}
}
