package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/doctor"
	"github.com/vig-edge/vig/proto/inference"
)

func loadScenario(t *testing.T, name string) *config.Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "scenarios", name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func statuses(cs []doctor.Check) map[string]doctor.Status {
	m := map[string]doctor.Status{}
	for _, c := range cs {
		m[c.Name] = c.Status
	}
	return m
}

// backendChecks runs the device checks on this machine and keeps those about the
// backend and its models.
func backendChecks(t *testing.T, cfg *config.Config) []doctor.Check {
	t.Helper()
	var out []doctor.Check
	for _, c := range doctor.DeviceChecks(context.Background(), cfg, deviceHost()) {
		if c.Name == "backend" || strings.HasPrefix(c.Name, "model ") {
			out = append(out, c)
		}
	}
	return out
}

// TestThisMachine runs every device check for real, on the Host vig doctor and
// vig serve use. Each must produce a status and
// a detail; shared memory and NODELAY must work here (CI is Linux with /dev/shm).
func TestThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("device checks target Linux")
	}
	cfg := loadScenario(t, "c.yaml")
	r := doctor.Run(context.Background(), cfg, doctor.Options{Device: true, Host: deviceHost()})
	if len(r.Checks) < 8 {
		t.Fatalf("only %d checks", len(r.Checks))
	}
	for _, c := range r.Checks {
		t.Logf("%-8s %-16s %s", c.Status, c.Name, c.Detail)
		if c.Name == "" || c.Detail == "" {
			t.Errorf("check without name or detail: %+v", c)
		}
		if c.Status == doctor.Fail {
			t.Errorf("check %q failed on this machine: %s", c.Name, c.Detail)
		}
	}
	got := statuses(r.Checks)
	if got["tcp_nodelay"] != doctor.OK || got["shm memfd"] != doctor.OK {
		t.Errorf("tcp_nodelay %v, memfd %v: both must work on Linux", got["tcp_nodelay"], got["shm memfd"])
	}
	if _, err := os.Stat("/dev/shm"); err == nil && got["shm /dev/shm"] != doctor.OK {
		t.Errorf("/dev/shm exists but the check says %v", got["shm /dev/shm"])
	}
}

// fakeTriton answers ServerLive and ModelReady like a Triton server with some
// models loaded.
type fakeTriton struct {
	inference.UnimplementedGRPCInferenceServiceServer
	ready map[string]bool
}

func (f *fakeTriton) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (f *fakeTriton) ModelReady(_ context.Context, r *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	return &inference.ModelReadyResponse{Ready: f.ready[r.Name]}, nil
}

// TestBackendCheck talks to a real gRPC server on loopback through the Host's
// backend dialer (platform/deviceprobe over netopt).
func TestBackendCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(srv, &fakeTriton{ready: map[string]bool{"detector_small": true, "pose": true, "depth": true}})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	yaml := func(addr string) *config.Config {
		c, err := config.Parse("x.yaml", []byte(fmt.Sprintf(`backend: {address: %q}
models: {detector_small: {exec_ms: 8}, pose: {exec_ms: 5}, depth: {exec_ms: 10}, vlm: {exec_ms: 200}}
`, addr)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cs := backendChecks(t, yaml(ln.Addr().String()))
	got := statuses(cs)
	want := map[string]doctor.Status{"backend": doctor.OK, "model detector_small": doctor.OK, "model pose": doctor.OK, "model depth": doctor.OK, "model vlm": doctor.Warn}
	for n, st := range want {
		if got[n] != st {
			t.Errorf("%s: %v, want %v (%+v)", n, got[n], st, cs)
		}
	}
	if !strings.Contains(cs[0].Detail, "ServerLive took") {
		t.Errorf("no latency: %q", cs[0].Detail)
	}

	// A port nobody listens on: reported, not hung.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	cs = backendChecks(t, yaml(addr))
	if len(cs) != 1 || cs[0].Status != doctor.Warn || !strings.Contains(cs[0].Detail, "unreachable") {
		t.Errorf("dead backend: %+v", cs)
	}
}
