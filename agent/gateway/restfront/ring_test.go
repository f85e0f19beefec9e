package restfront_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/gateway/restfront"
	"github.com/vig-edge/vig/agent/gateway/ringback"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/platform/clock"
	"github.com/vig-edge/vig/shmring"
)

var ringSeq atomic.Uint64

// A ring runtime as the backend: HTTP infer goes over the ring; vig answers
// liveness and readiness itself, and says 501 for what a ring has no
// equivalent of.
func TestRingBackend(t *testing.T) {
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	cfg, err := config.Parse("ring.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	mcfg := mockbackend.FromConfig(cfg)
	mcfg.Spin = -1
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mcfg, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Stop() })
	ln, err := shmring.Listen(fmt.Sprintf("@vig-restfront-test-%d-%d", os.Getpid(), ringSeq.Add(1)), shmring.ServerConfig{AllowUnsealed: true})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- mb.ServeRing(ln) }()
	t.Cleanup(func() { ln.Close(); <-served })
	rb, err := ringback.New(ln.Addr(), ringback.Options{MinBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend.Address = "ring:" + ln.Addr()
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}, Admit: gov, Backend: rb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	if err := rb.WaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	fe := restfront.New(gw, restfront.Options{})
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fe.Serve(hl) }()
	t.Cleanup(func() { fe.Close(); <-done })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r := &rig{base: "http://" + hl.Addr().String(), client: &http.Client{Transport: tr}}

	data := frameBytes(150_000, 5)
	body, h := inferBody(t, 8, data)
	if _, bin := splitAnswer(t, r.do(t, "POST", "/v2/models/det/infer", body, h)); !bytes.Equal(bin, output0(mockbackend.Digest([][]byte{data}), 8)) {
		t.Errorf("infer over a ring backend: %x", bin)
	}
	for path, want := range map[string]int{"/v2/health/live": 200, "/v2/health/ready": 200, "/v2/models/det/ready": 200, "/v2/models/nope/ready": 400, "/v2": 501, "/v2/models/det/config": 501} {
		if rep := r.do(t, "GET", path, nil, nil); rep.code != want {
			t.Errorf("GET %s: HTTP %d %s, want %d", path, rep.code, rep.body, want)
		}
	}
	if rep := r.do(t, "POST", "/v2/systemsharedmemory/region/x/register", []byte(`{"key":"/x","byte_size":8}`), nil); rep.code != http.StatusNotImplemented {
		t.Errorf("shm register over a ring backend: HTTP %d %s, want 501", rep.code, rep.body)
	}
}
