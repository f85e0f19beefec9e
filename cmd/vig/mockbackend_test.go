package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

func TestMockBackendFlagErrors(t *testing.T) {
	dir := t.TempDir()
	badCfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badCfg, []byte("models:\n  a: {exec_ms: 1, bogus: 2}\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{nil, "no models"},
		{[]string{"--model", "noequals"}, "NAME=EXEC_MS"},
		{[]string{"--model", "a=-1"}, "EXEC_MS"},
		{[]string{"--model", "=1"}, "NAME=EXEC_MS"},
		{[]string{"--model", "a=1", "--slots", "0"}, "--slots 0"},
		{[]string{"--model", "a=1", "--log-format", "xml"}, "text or json"},
		{[]string{"--model", "a=1", "extra"}, "unexpected arguments"},
		{[]string{"--nope"}, "flag provided but not defined"},
		{[]string{"--model", "a=1", "--sequence", "b"}, "--sequence b: no such model"},
		{[]string{"--model", "a=1", "--sequence", "a=x"}, "MAX_IDLE_MS"},
		{[]string{"--model", "a=1", "--sequence", "a=10,0"}, "SLOTS"},
		{[]string{"--model", "a=1", "--queue-timeout", "a=0"}, "DEFAULT_TIMEOUT_MS"},
		{[]string{"--model", "a=1", "--queue-timeout", "b=5"}, "--queue-timeout b: no such model"},
		{[]string{"--model", "a=1", "--batch", "b=8"}, "--batch b: no such model"},
		{[]string{"--model", "a=1", "--batch", "a=0"}, "MAX must be a batch size"},
		{[]string{"--model", "a=1", "--batch", "a=8,gain=-1"}, "gain"},
		{[]string{"--model", "a=1", "--batch", "a=8,preferred=9"}, "preferred batch size"},
		{[]string{"--model", "a=1", "--batch", "a=8,speed=2"}, "unknown option"},
		{[]string{"-c", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"-c", badCfg}, "bad.yaml:2: models.a.bogus: unknown key"},
		{[]string{"-c", filepath.Join("..", "..", "examples", "scenarios", "d.yaml"), "--slots", "2"}, "declares accelerators with their slots; drop --slots"},
		{[]string{"--model", "a=1", "--instance", "a=tpu"}, "a: \"tpu\": want gpu, cpu or dla<N>"},
		{[]string{"--model", "a=1", "--instance", "a"}, "want NAME=gpu|cpu|dla<N>[:COUNT]"},
		{[]string{"--model", "a=1", "--instance", "b=dla0"}, "model b: give its exec_ms"},
		{[]string{"--model", "a=1", "--interference", "gpu"}, "--interference \"gpu\": want ACCELERATOR=FACTOR"},
		{[]string{"--model", "a=1", "--interference", "npu=1.2"}, "interference npu: no such accelerator"},
		{[]string{"--model", "a=1", "--gpu-slots", "-1"}, "--gpu-slots -1"},
		{[]string{"--model", "a=1", "--instance", "a=gpu", "--slots", "2"}, "give the GPU's slots with --gpu-slots"},
		{[]string{"--repository", filepath.Join(dir, "missing.yaml")}, "--repository: open"},
		{[]string{"--repository", badCfg}, "bad.yaml: yaml"},
	} {
		var stdout, stderr bytes.Buffer
		code := mockBackend(context.Background(), tc.args, &stdout, &stderr, func(string) { t.Errorf("%q: started", tc.args) })
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

func TestMockBackendHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := mockBackend(context.Background(), []string{"--help"}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"Usage: vig mock-backend", "-model NAME=EXEC_MS", "-listen", "-slots", "-seed", "-c FILE"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stdout.String())
		}
	}
}

func dialMock(t *testing.T, addr string) pb.GRPCInferenceServiceClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(new(netopt.Stats).DialAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewGRPCInferenceServiceClient(cc)
}

// TestMockBackendServes takes models from a config and a flag, serves them on a Unix
// socket and stops with exit 0 when its context ends.
func TestMockBackendServes(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "vig.yaml")
	os.WriteFile(cfgFile, []byte("backend: {slots: 2, seed: 3}\nmodels:\n  det: {exec_ms: 1}\n  vlm: {exec_ms: 50}\n"), 0o644)
	sock := "unix:" + filepath.Join(dir, "mock.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	codec := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		codec <- mockBackend(ctx, []string{"-c", cfgFile, "--listen", sock, "--model", "vlm=0.5", "--model", "extra=0", "--batch", "det=4,gain=0.5,delay_us=0,preferred=2/4"},
			&bytes.Buffer{}, &stderr, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-codec:
		t.Fatalf("exited %d before serving: %s", code, stderr.String())
	}
	if addr != sock {
		t.Errorf("serving on %s, want %s", addr, sock)
	}
	c := dialMock(t, addr)
	for _, m := range []string{"vlm", "extra"} {
		resp, err := c.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: m, Id: mockbackend.FrameID("s", 1)})
		if err != nil || resp.Id != "s#1" {
			t.Errorf("%s: %v, %v", m, resp, err)
		}
	}
	// det batches (--batch): a request carries [b, …] and its config says so.
	resp, err := c.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "det", Id: mockbackend.FrameID("s", 1),
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{2, 3}}},
		RawInputContents: [][]byte{{1, 2, 3, 4, 5, 6}}})
	if err != nil || len(resp.RawOutputContents) != 1 || len(resp.RawOutputContents[0]) != 2*mockbackend.RowBytes {
		t.Errorf("det, 2 rows: %v, %v", resp, err)
	}
	mc, err := c.ModelConfig(context.Background(), &pb.ModelConfigRequest{Name: "det"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := wire.ParseModelConfig(mc.Config); err != nil || cfg.MaxBatchSize != 4 || cfg.DynamicBatching == nil || len(cfg.DynamicBatching.PreferredBatchSize) != 2 {
		t.Errorf("det's config: %+v, %v; want max_batch_size 4 with a dynamic batcher preferring 2 and 4", cfg, err)
	}
	st, err := c.ModelStatistics(context.Background(), &pb.ModelStatisticsRequest{})
	if err != nil || len(st.ModelStats) != 3 {
		t.Fatalf("statistics: %v, %v", st, err)
	}
	cancel()
	if code := <-codec; code != 0 {
		t.Errorf("exit %d after stop; log:\n%s", code, stderr.String())
	}
	for _, want := range []string{"mock backend serving", "slots=2", "seed=3", "vlm=500µs", "det=1ms (batch 4, gain 0.5)", "mock backend stopped"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestMockBackendSIGTERM runs the real entry point and stops it with SIGTERM.
func TestMockBackendSIGTERM(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mock.sock")
	codec := make(chan int, 1)
	go func() {
		codec <- runMockBackend([]string{"--listen", "unix:" + sock, "--model", "a=1", "--log-format", "json"})
	}()
	// The signal handler is installed before the socket exists. The file appears at
	// bind(2), before listen(2): wait until a connection is accepted, not for the file.
	for {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			break
		}
		select {
		case code := <-codec:
			t.Fatalf("exited %d before serving", code)
		case <-time.After(time.Millisecond):
		}
	}
	c := dialMock(t, "unix:"+sock)
	if r, err := c.ServerLive(context.Background(), &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive: %v, %v", r, err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-codec; code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's writes beside the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// --sequence and --queue-timeout give a model Triton's sequence batcher and a
// queue policy: its ModelConfig says so, and a request of an unknown sequence
// without START is refused.
func TestMockBackendSequenceFlags(t *testing.T) {
	sock := "unix:" + filepath.Join(t.TempDir(), "mock.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	codec := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		codec <- mockBackend(ctx, []string{"--listen", sock, "--model", "trk=1", "--model", "det=1", "--sequence", "trk=500,2", "--queue-timeout", "det=1000,3"},
			&bytes.Buffer{}, &stderr, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-codec:
		t.Fatalf("exited %d before serving: %s", code, stderr.String())
	}
	c := dialMock(t, addr)
	_, err := c.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "trk", Id: "x",
		Parameters: map[string]*pb.InferParameter{"sequence_id": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 3}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "must specify the START flag") {
		t.Errorf("a sequence without START: %v, want INVALID_ARGUMENT", err)
	}
	for model, check := range map[string]func(*wire.ModelConfig) bool{
		"trk": func(m *wire.ModelConfig) bool { return m.SequenceBatching },
		"det": func(m *wire.ModelConfig) bool {
			db := m.DynamicBatching
			return db != nil && db.PriorityLevels == 3 && db.DefaultQueuePolicy != nil &&
				db.DefaultQueuePolicy.AllowTimeoutOverride && db.DefaultQueuePolicy.DefaultTimeoutMicroseconds == 1_000_000
		},
	} {
		resp, err := c.ModelConfig(context.Background(), &pb.ModelConfigRequest{Name: model})
		if err != nil {
			t.Fatal(err)
		}
		if mc, err := wire.ParseModelConfig(resp.Config); err != nil || !check(mc) {
			t.Errorf("%s: ModelConfig %+v, %v", model, mc, err)
		}
	}
	cancel()
	if code := <-codec; code != 0 {
		t.Errorf("exit %d after stop; log:\n%s", code, stderr.String())
	}
}

// --repository serves a Jetson-Orin-shaped repository: each model's
// ModelConfig names its instance group (a DLA engine with its secondary
// device), --instance and --interference apply over the file, and requests
// run.
func TestMockBackendRepository(t *testing.T) {
	sock := "unix:" + filepath.Join(t.TempDir(), "mock.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	codec := make(chan int, 1)
	var stderr syncBuffer
	repo := filepath.Join("..", "..", "examples", "scenarios", "d2.repository.yaml")
	go func() {
		codec <- mockBackend(ctx, []string{"--listen", sock, "--repository", repo, "--model", "ocr=1", "--instance", "ocr=cpu:2", "--instance", "pose=gpu:2", "--gpu-slots", "2", "--interference", "gpu=1.2,dla=1.1"},
			&bytes.Buffer{}, &stderr, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-codec:
		t.Fatalf("exited %d before serving: %s", code, stderr.String())
	}
	c := dialMock(t, addr)
	for model, want := range map[string]string{
		"detector_dla1": "KIND_GPU x1 nvdla[1]", "lane_dla0": "KIND_GPU x1 nvdla[0]", "detector_gpu": "KIND_GPU x1",
		"pose": "KIND_GPU x2", "ocr": "KIND_CPU x2",
	} {
		resp, err := c.ModelConfig(context.Background(), &pb.ModelConfigRequest{Name: model})
		if err != nil {
			t.Fatal(err)
		}
		mc, err := wire.ParseModelConfig(resp.Config)
		if err != nil || len(mc.InstanceGroups) != 1 {
			t.Fatalf("%s: %+v, %v", model, mc, err)
		}
		g := mc.InstanceGroups[0]
		got := fmt.Sprintf("%v x%d", g.Kind, g.Count)
		for _, d := range g.SecondaryDevices {
			if d.Kind == wire.KindNVDLA {
				got += fmt.Sprintf(" nvdla[%d]", d.DeviceID)
			}
		}
		if got != want {
			t.Errorf("%s: instance group %s, want %s", model, got, want)
		}
		if _, err := c.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: model, Id: model + "#1"}); err != nil {
			t.Errorf("%s: %v", model, err)
		}
	}
	for _, s := range []string{"accelerators=gpu:2,dla0:1,dla1:1,cpu:2", "interference=\"map[dla:1.1 gpu:1.2]\"", "detector_dla0=14ms on dla0", "pose=5ms on gpu x2"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, stderr.String())
		}
	}
	cancel()
	if code := <-codec; code != 0 {
		t.Errorf("exit %d after stop; log:\n%s", code, stderr.String())
	}
}
