package bench

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/gateway/ringfront"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
)

// ringVig is vig's ring path in-process, assembled as `vig serve` does from the
// benchmark's own configuration: the governor admits, the gateway's backend
// connection forwards, the ring frontend serves the sessions.
func ringVig(t *testing.T, backend string) (string, *ringfront.Frontend) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr := ringAddr()
	cfg, err := config.Parse("bench", []byte(vigDatapathConfig("127.0.0.1:0", "off", addr, backend, time.Millisecond)))
	if err != nil {
		t.Fatalf("the benchmark's vig configuration does not parse: %v", err)
	}
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var sockets netopt.Stats
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: sockets.DialAddr, Admit: gov, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	kind, _ := shmring.Probe()
	rl, err := shmring.Listen(cfg.Listen.Ring, shmring.ServerConfig{AllowUnsealed: kind == shmring.BackendShmFile, AllowShmKey: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fe := ringfront.New(rl, gw, ringfront.Options{Log: quiet})
	done := make(chan error, 1)
	go func() { done <- fe.Serve() }()
	t.Cleanup(func() {
		fe.Close()
		if err := <-done; err != nil {
			t.Errorf("ring frontend: %v", err)
		}
	})
	return rl.Addr(), fe
}

// The shmring row's VIA side gets, through vig's scheduler and backend
// connection, the answer the mock backend gives the DIRECT request of the same
// frame: same input digest, same frame; and a frame larger than a ring slot is
// refused before anything is sent.
func TestRingSensorThroughVig(t *testing.T) {
	if err := ringSupport(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mb, err := startMock(ctx, "127.0.0.1:0", mockbackend.Config{Models: []mockbackend.Model{{Name: benchModel, Exec: time.Millisecond}}, Slots: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Stop()
	addr, fe := ringVig(t, mb.Addr())
	ring, err := dialRing(addr, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	// The row measures the by-reference path wherever the machine has /dev/shm.
	if ring.byRef {
		if _, _, err := ring.call(1, []byte{1}); err != nil { // the session is set up by now
			t.Fatal(err)
		}
		if byRef, _ := fe.Sessions(); byRef != 1 {
			t.Errorf("the ring row's session is not by reference (%d by-reference sessions)", byRef)
		}
	}
	direct, err := dial(mb.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()

	for i, size := range []int{0, 1, 150_000} {
		frame := uint64(10 + i)
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(j*7 + i)
		}
		_, digest, err := ring.call(frame, data)
		if err != nil {
			t.Fatalf("%d B through the ring: %v", size, err)
		}
		if want := mockbackend.Digest([][]byte{data}); digest != want {
			t.Errorf("%d B through the ring: digest %x, want %x (the frame's bytes did not reach the backend intact)", size, digest, want)
		}
		req := frameRequest(benchModel, ringStream, frame, 0, data)
		req.Parameters = nil
		resp, err := pb.NewGRPCInferenceServiceClient(direct).ModelInfer(ctx, req)
		if err != nil {
			t.Fatalf("%d B direct: %v", size, err)
		}
		if len(resp.RawOutputContents) != 1 {
			t.Fatalf("%d B direct: %d outputs", size, len(resp.RawOutputContents))
		}
		dd, df, ok := mockOutput(resp.RawOutputContents[0])
		if !ok || dd != digest || df != frame {
			t.Errorf("%d B: direct answer (digest %x, frame %d) differs from the ring's (%x, %d)", size, dd, df, digest, frame)
		}
		if resp.Id != mockbackend.FrameID(ringStream, frame) {
			t.Errorf("direct id %q", resp.Id)
		}
	}

	big := make([]byte, shmring.DefaultConfig.Requests.SlotSize+1)
	if _, _, err := ring.call(99, big); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("a frame larger than a slot: %v, want a does-not-fit error", err)
	}
	// The refused frame's slot went back: the ring still works.
	if _, _, err := ring.call(100, []byte{1, 2, 3}); err != nil {
		t.Errorf("after a refused frame: %v", err)
	}
}
