package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// repoServer is a Triton-shaped backend that serves only its models'
// configuration (instance groups) and answers inference at once: what vig
// reads the layout from.
type repoServer struct {
	pb.UnimplementedGRPCInferenceServiceServer
	mu     sync.Mutex
	groups map[string][]wire.InstanceGroup
}

func (s *repoServer) ModelConfig(_ context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.groups[r.Name]
	if !ok {
		return nil, errNotFound(r.Name)
	}
	return &pb.ModelConfigResponse{Config: wire.AppendModelConfig(nil, &wire.ModelConfig{Name: r.Name, InstanceGroups: g})}, nil
}

func (s *repoServer) ModelInfer(_ context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	return &pb.ModelInferResponse{ModelName: r.ModelName, Id: r.Id}, nil
}

func errNotFound(name string) error {
	return status.Errorf(codes.NotFound, "Request for unknown model: '%s' is not found", name)
}

// startRepo serves groups on the Unix socket path until the test ends (or
// stop is called).
func startRepo(t *testing.T, path string, groups map[string][]wire.InstanceGroup) (stop func()) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, &repoServer{groups: groups})
	go srv.Serve(ln)
	var once sync.Once
	stop = func() { once.Do(srv.Stop) }
	t.Cleanup(stop)
	return stop
}

func dla(core int64) []wire.InstanceGroup {
	return []wire.InstanceGroup{{Kind: wire.KindGPU, Count: 1, SecondaryDevices: []wire.SecondaryDevice{{Kind: wire.KindNVDLA, DeviceID: core}}}}
}

// orinRepo is a Jetson Orin's repository: one engine on the GPU, one per DLA core.
var orinRepo = map[string][]wire.InstanceGroup{
	"detector_gpu":  {{Kind: wire.KindGPU, Count: 1}},
	"detector_dla0": dla(0),
	"lane":          dla(1),
}

const derivedYAML = `
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0"}
backend: {stats_interval_ms: -1}
models:
  detector_gpu: {exec_ms: 8}
  detector_dla0: {exec_ms: 14}
  lane: {exec_ms: 14}
streams:
  - {name: cam, model: detector_gpu, class: protected, period_ms: 50, max_age_ms: 50}
  - {name: lane, model: lane, class: high, period_ms: 50, max_age_ms: 100}
`

// waitLog waits until the log holds want.
func waitLog(t *testing.T, logs *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", want, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// vig serve with no accelerators: and no on: waits for the backend (it is
// not up yet), reads its instance groups, schedules the derived layout
// (gpu, dla0, dla1: one slot each) and says so in its log and metrics;
// a server that later binds a model elsewhere is said, with the fix.
func TestServeDerivesLayout(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "triton.sock")
	cfg, err := config.Parse("derived.yaml", []byte(derivedYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend.Address = "unix:" + sock
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), ready, nil) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	waitLog(t, &logs, "waiting for the backend to describe the models' instance groups")
	stop := startRepo(t, sock, orinRepo)
	var addrs map[string]string
	select {
	case addrs = <-ready:
	case err := <-served:
		t.Fatalf("serve ended: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("vig did not start:\n%s", logs.String())
	}
	for _, want := range []string{`msg="layout derived from the server" accelerators="dla0=1,dla1=1,gpu=1" models=3`,
		`msg=layout model=lane on=dla1 instances=1 source=server`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
	resp, err := http.Get("http://" + addrs["metrics"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, a := range []string{"gpu", "dla0", "dla1"} {
		if want := `vig_accelerator_slots{accelerator="` + a + `"} 1`; !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// The server comes back with lane moved to DLA core 0: vig keeps the
	// layout it schedules and says what changed.
	stop()
	moved := map[string][]wire.InstanceGroup{"detector_gpu": orinRepo["detector_gpu"], "detector_dla0": dla(0), "lane": dla(0)}
	startRepo(t, sock, moved)
	waitLog(t, &logs, "the server's layout differs from the one vig schedules")
	if !strings.Contains(logs.String(), `accelerator dla1 is gone; lane: on \"dla1\" with 1 instance(s), now on \"dla0\" with 1`) {
		t.Errorf("the warning does not say what changed:\n%s", logs.String())
	}
}

// accelerators: from_server with no backend: vig gives up after
// --layout-wait with the fix; without it, vig starts on backend.slots.
func TestServeLayoutWaitBounded(t *testing.T) {
	old := layoutWait
	layoutWait = 300 * time.Millisecond
	defer func() { layoutWait = old }()
	sock := filepath.Join(t.TempDir(), "none.sock")

	cfg, err := config.Parse("f.yaml", []byte("accelerators: from_server\n"+derivedYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend.Address = "unix:" + sock
	err = serve(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "accelerators: from_server, but the backend at unix:"+sock+" did not describe the models within 300ms") ||
		!strings.Contains(err.Error(), "--layout-wait") {
		t.Fatalf("error %v", err)
	}

	cfg, err = config.Parse("a.yaml", []byte(derivedYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend.Address = "unix:" + sock
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), ready, nil) }()
	select {
	case <-ready:
	case err := <-served:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatalf("vig did not start:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "the backend did not describe the models in time: vig schedules with the config's own layout") {
		t.Errorf("the log does not say what vig assumed:\n%s", logs.String())
	}
	// The backend comes up describing the Orin layout: vig says it runs
	// another, and how to take it.
	startRepo(t, sock, orinRepo)
	waitLog(t, &logs, "the server's layout differs from the one vig schedules")
	if !strings.Contains(logs.String(), "accelerator dla0 (1 slots) is new") {
		t.Errorf("the warning does not say what changed:\n%s", logs.String())
	}
	cancel()
	<-served
}

// vig doctor on a config that leaves the layout to the server reads it
// first and analyses the derived accelerators; a server it cannot reach is
// said, with what doctor assumed; a declared layout the server binds
// otherwise is reported with the fix.
func TestDoctorReadsServerLayout(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "triton.sock")
	startRepo(t, sock, orinRepo)
	run := func(yaml string) (int, doctorJSON) {
		t.Helper()
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := doctorMain(context.Background(), []string{"-c", path, "--json"}, &out, &errb, false)
		var r doctorJSON
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v: %s %s", err, out.String(), errb.String())
		}
		return code, r
	}
	layoutCheck := func(r doctorJSON) []string {
		var out []string
		for _, c := range r.Checks {
			if c.Name == "server layout" {
				out = append(out, c.Status+": "+c.Detail)
			}
		}
		return out
	}

	_, r := run(strings.Replace(derivedYAML, "backend: {stats_interval_ms: -1}", "backend: {address: \"unix:"+sock+"\"}", 1))
	if c := layoutCheck(r); len(c) != 1 || c[0] != "ok: read from unix:"+sock+": 3 of 3 models described; derived accelerators dla0=1,dla1=1,gpu=1" {
		t.Errorf("layout check %q", c)
	}

	_, r = run(strings.Replace(derivedYAML, "backend: {stats_interval_ms: -1}", "backend: {address: \"unix:"+sock+".gone\"}", 1))
	if c := layoutCheck(r); len(c) != 1 || !strings.HasPrefix(c[0], "warn: cannot read the models' configuration from unix:"+sock+".gone") ||
		!strings.Contains(c[0], "doctor assumed one accelerator of backend.slots 1 for every model") {
		t.Errorf("unreachable server: %q", c)
	}

	var out, errb bytes.Buffer
	path := filepath.Join(dir, "c.yaml")
	doctorMain(context.Background(), []string{"-c", path, "--json", "--no-server"}, &out, &errb, false)
	if !strings.Contains(errb.String(), "the config leaves the layout to the server, not read (--no-server, --no-device-checks): doctor assumed one accelerator of backend.slots 1") {
		t.Errorf("--no-server does not say what doctor assumed: %q", errb.String())
	}

	declared := strings.Replace(derivedYAML, "backend: {stats_interval_ms: -1}", "backend: {address: \"unix:"+sock+"\"}\naccelerators: {gpu: 1, dla: 2}", 1)
	declared = strings.Replace(declared, "detector_gpu: {exec_ms: 8}", "detector_gpu: {exec_ms: 8, on: gpu}", 1)
	declared = strings.Replace(declared, "detector_dla0: {exec_ms: 14}", "detector_dla0: {exec_ms: 14, on: dla}", 1)
	declared = strings.Replace(declared, "lane: {exec_ms: 14}", "lane: {exec_ms: 14, on: dla}", 1)
	_, r = run(declared)
	c := layoutCheck(r)
	if len(c) != 3 || !strings.Contains(c[1], `model detector_dla0: the config says runs it on "dla"; the server binds it to dla0`) ||
		!strings.Contains(c[2], "fix: remove accelerators: and every on: to take the server's layout, or declare dla1: 1 and give the model on: dla1") {
		t.Errorf("declared layout against the server: %q", c)
	}
}

// doctorJSON is what these tests read of doctor's JSON report.
type doctorJSON struct {
	Checks []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Detail string `json:"detail"`
	} `json:"checks"`
}

// The case end to end: vig's mock backend serving an Orin-shaped
// repository (GPU count 1, engines on DLA0 and DLA1, interference), and a
// config with no accelerators: and no on: — doctor derives the layout from
// the server and prints it.
func TestDoctorDerivesOrinFromMock(t *testing.T) {
	sock := "unix:" + filepath.Join(t.TempDir(), "mock.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc, codec := make(chan string, 1), make(chan int, 1)
	var stderr syncBuffer
	examples := filepath.Join("..", "..", "examples", "scenarios")
	go func() {
		codec <- mockBackend(ctx, []string{"--listen", sock, "--repository", filepath.Join(examples, "d2.repository.yaml")},
			&bytes.Buffer{}, &stderr, func(a string) { addrc <- a })
	}()
	select {
	case <-addrc:
	case code := <-codec:
		t.Fatalf("mock exited %d before serving: %s", code, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(examples, "d2.server.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vig.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), `"127.0.0.1:8001"`, `"`+sock+`"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	doctorMain(context.Background(), []string{"-c", path, "--device", "orin"}, &out, &errb, false)
	if strings.Contains(out.String(), "ModelReady") || strings.Contains(out.String(), "not ready") {
		t.Errorf("a model the server serves is said not ready, or the logical model was asked for:\n%s", out.String())
	}
	got := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			got[f[0]] = f[1:]
		}
	}
	for name, want := range map[string]string{
		"gpu": "1 ×1.3 server", "dla0": "1 ×1.15 server", "dla1": "1 ×1.15 server",
		"detector_dla0": "dla0 1 server", "detector_dla1": "dla1 1 server", "detector_gpu": "gpu 1 server",
		"lane_dla0": "dla0 1 server", "segment_dla1": "dla1 1 server", "pose": "gpu 1 server",
		"detector": "variants detector_gpu (gpu), detector_dla0 (dla0), detector_dla1 (dla1) - config",
	} {
		if g := strings.Join(got[name], " "); g != want {
			t.Errorf("%s: %q, want %q\n%s%s", name, g, want, out.String(), errb.String())
		}
	}
}

// badConfigServer answers ModelConfig with bytes that do not decode.
type badConfigServer struct {
	pb.UnimplementedGRPCInferenceServiceServer
}

func (badConfigServer) ModelConfig(context.Context, *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	return &pb.ModelConfigResponse{Config: []byte{0xff, 0xff, 0xff}}, nil
}

// A backend that answers with a configuration vig cannot decode is not a
// backend that is not up yet: vig stops at once with the fix, not after
// --layout-wait with "start the backend first".
func TestServeLayoutBadConfigNotRetried(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bad.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, badConfigServer{})
	go srv.Serve(ln)
	defer srv.Stop()
	cfg, err := config.Parse("f.yaml", []byte(derivedYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend.Address = "unix:" + sock
	err = serve(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "does not decode as Triton's ModelConfig") || !strings.Contains(err.Error(), "config.pbtxt") ||
		strings.Contains(err.Error(), "start the backend first") {
		t.Fatalf("error %v", err)
	}
}
