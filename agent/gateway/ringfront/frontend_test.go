package frontend_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/platform/clock"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/shmring/client"
	"github.com/vig-edge/vig/shmring/frontend"
)

// A sensor posts frames on its ring; they go through the scheduler to a real
// backend, and the backend's output comes back on the response ring.
func TestRingThroughSchedulerToBackend(t *testing.T) {
	backend, err := shmring.Probe()
	if err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	cfg, err := config.Parse("ring.yaml", []byte(`
backend: {slots: 1, stats_interval_ms: -1}
models:
  det: {exec_ms: 1}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 5000}
`))
	if err != nil {
		t.Fatal(err)
	}
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mockbackend.FromConfig(cfg), gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Stop()
	cfg.Backend.Address = mb.Addr()
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: new(netoptStats).DialAddr, Admit: gov})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Stop()

	addr := fmt.Sprintf("@vig-frontend-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	ln, err := shmring.Listen(addr, shmring.ServerConfig{AllowUnsealed: backend == shmring.BackendShmFile})
	if err != nil {
		t.Fatal(err)
	}
	fe := frontend.New(ln, gov, gw.Backend(), nil, nil)
	go fe.Serve()
	defer fe.Close()

	c, err := client.Dial(ln.Addr(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		f, err := c.Loan()
		if err != nil {
			t.Fatal(err)
		}
		n := 4096 * (i + 1)
		frame := f.Bytes()[:n]
		for j := range frame {
			frame[j] = byte(i + j)
		}
		want := mockbackend.Digest([][]byte{append([]byte(nil), frame...)})
		if _, err := c.Submit(f, &client.Request{Stream: "cam", Model: "det", Frame: uint64(i), CaptureNs: clock.Monotonic(), Len: n}); err != nil {
			t.Fatal(err)
		}
		var r client.Result
		if err := c.Next(&r); err != nil {
			t.Fatal(err)
		}
		if err := r.Err(); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		p := r.Payload()
		if len(p) < 16 || binary.LittleEndian.Uint64(p) != want || binary.LittleEndian.Uint64(p[8:]) != uint64(i) {
			t.Errorf("frame %d: result %x, want digest %x and frame %d", i, p, want, i)
		}
		c.Release(&r)
	}
	// A model the backend does not serve comes back as the backend's status.
	f, err := c.Loan()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(f, &client.Request{Stream: "x", Model: "nope", Frame: 1, Len: 8}); err != nil {
		t.Fatal(err)
	}
	var r client.Result
	if err := c.Next(&r); err != nil {
		t.Fatal(err)
	}
	if r.Status != shmring.StatusNotFound {
		t.Errorf("unknown model: status %v (%s), want NOT_FOUND", r.Status, r.Message)
	}
	c.Release(&r)
}
