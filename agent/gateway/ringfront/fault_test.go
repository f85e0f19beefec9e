package ringfront_test

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/gateway/ringfront"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/shmring/client"
)

// A ring client that leaves while its request runs on vig's only slot (the
// backend holds it for 5 s) and another waits in vig's queue: vig cancels both,
// the slot is free again while the backend still runs the first (its statistics
// count no "hold" inference yet), the waiting one is answered (into the closed
// session), another client's request runs, and the session's requests and
// buffers are released (the session closes).
func TestRingClientLeavesMidRequest(t *testing.T) {
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	cfg, err := config.Parse("leave.yaml", []byte(`
backend: {slots: 1, stats_interval_ms: -1}
scheduler: {pipeline: false} # the second request waits in vig, not at the backend
models:
  det: {exec_ms: 1}
  hold: {exec_ms: 1}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 60000}
  - {name: held, model: hold, class: protected, period_ms: 50, max_age_ms: 60000}
`))
	if err != nil {
		t.Fatal(err)
	}
	// The backend has a second slot of its own: what vig frees, the next
	// request gets, whatever the backend still does with the abandoned one.
	mcfg := mockbackend.Config{Models: []mockbackend.Model{{Name: "det", Exec: time.Millisecond}, {Name: "hold", Exec: 5 * time.Second}},
		Slots: 2, Spin: -1, Timeline: true}
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mcfg, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Stop() })
	cfg.Backend.Address = mb.Addr()
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	var st netopt.Stats
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: st.DialAddr, Admit: gov})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	ln, err := shmring.Listen(ringAddr("leave"), shmring.ServerConfig{AllowUnsealed: true})
	if err != nil {
		t.Fatal(err)
	}
	fe := ringfront.New(ln, gw, ringfront.Options{})
	go fe.Serve()
	t.Cleanup(fe.Close)
	var snap sched.Snapshot
	busy := func() int { gov.Snapshot(&snap); return snap.Busy }
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) { // a hang guard
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	a, err := client.Dial(ln.Addr(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.Loan()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Submit(f, &client.Request{Stream: "held", Model: "hold", Frame: 1, CaptureNs: clock.Monotonic(), Len: 1000}); err != nil {
		t.Fatal(err)
	}
	waitUntil("the request to run on vig's slot", func() bool { return busy() == 1 })
	// A second request waits in vig's queue behind it.
	f, err = a.Loan()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Submit(f, &client.Request{Stream: "cam", Model: "det", Frame: 1, CaptureNs: clock.Monotonic(), Len: 100}); err != nil {
		t.Fatal(err)
	}
	waitUntil("the second request to wait", func() bool {
		gov.Snapshot(&snap)
		for _, s := range snap.Streams {
			if s.Name == "cam" && s.Waiting == 1 {
				return true
			}
		}
		return false
	})
	a.Close() // the client leaves mid-request
	waitUntil("the slot to be freed", func() bool { return busy() == 0 })
	if n := holdInferences(t, mb.Addr()); n != 0 {
		t.Errorf("the slot was freed only after the backend finished the abandoned call (%d hold inferences)", n)
	}
	waitUntil("the session to close, its requests released", func() bool { b, c := fe.Sessions(); return b+c == 0 })

	b, err := client.Dial(ln.Addr(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	send(t, b, "det", 2, 100, checkOutput0)
	// The backend runs a job it was granted to its end (it is not preemptible):
	// wait for it, so that its goroutine is gone when the package's leak check
	// runs. vig's reset may also have reached the backend before the request did
	// (slow machines, qemu): then no job was granted and there is nothing to wait
	// for.
	granted := slices.ContainsFunc(mb.Timeline(), func(j mockbackend.Job) bool { return j.Model == "hold" })
	if granted {
		waitUntil("the backend to finish the abandoned call", func() bool { return holdInferences(t, mb.Addr()) == 1 })
	}
	gov.Snapshot(&snap)
	for _, s := range snap.Streams {
		if (s.Name == "held" || s.Name == "cam") && s.Cancelled != 1 {
			t.Errorf("stream %s: %+v, want 1 cancelled (the running and the waiting request)", s.Name, s.Counters)
		}
	}
}

// holdInferences is how many "hold" inferences the backend has completed.
func holdInferences(t *testing.T, addr string) uint64 {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := pb.NewGRPCInferenceServiceClient(cc).ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "hold"})
	if err != nil || len(r.ModelStats) != 1 {
		t.Fatalf("ModelStatistics: %v", err)
	}
	return r.ModelStats[0].InferenceCount
}
