package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// startEnvMock is vig with its freshness scheduler in front of the mock
// backend configured by mock (its models' extra behaviour set by the test).
func startEnvMock(t *testing.T, cfg *config.Config, mock func(*mockbackend.Config)) *env {
	t.Helper()
	e := &env{cfg: cfg, reg: metrics.New(), sockets: new(netopt.Stats)}
	mc := mockbackend.FromConfig(cfg)
	mock(&mc)
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mc, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Stop() })
	e.backend = mb
	cfg.Backend.Address = mb.Addr()
	e.direct = pb.NewGRPCInferenceServiceClient(e.dial(t, mb.Addr()))
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	gov.SetObserver(e.reg.NewSched(gov.Snapshot))
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: e.sockets.DialAddr, Metrics: e.reg, Admit: gov})
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	tcp, err := netopt.Listen("tcp", "127.0.0.1:0", e.sockets)
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(tcp)
	t.Cleanup(gw.Stop)
	e.tcp = tcp.Addr().String()
	waitBackendReady(t, e)
	return e
}

func seqFrameRequest(model, stream, id string, params map[string]*pb.InferParameter) *pb.ModelInferRequest {
	if params == nil {
		params = map[string]*pb.InferParameter{}
	}
	params[wire.ParamStream] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: stream}}
	return &pb.ModelInferRequest{ModelName: model, Id: id, Parameters: params,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{4}}},
		RawInputContents: [][]byte{{1, 2, 3, 4}}}
}

// A sequence of 100 frames sent faster than a tracker serves them, on a
// latest stream that shares the backend with a slow model kept busy, reaches
// the mock's sequence batcher whole: START first, END last, frames in order
// and one at a time, no START missing. Middle frames are superseded or
// late-dropped; with two slots the next frame of the sequence could start
// beside the previous one, and does not.
func TestSequenceThroughLatestUnderOverload(t *testing.T) {
	for _, slots := range []int{1, 2} {
		t.Run(fmt.Sprintf("slots=%d", slots), func(t *testing.T) {
			cfg := testConfigYAML(t, fmt.Sprintf(`
listen: {metrics: "off"}
backend: {slots: %d, seed: 7}
models:
  trk: {exec_ms: 5}
  slow: {exec_ms: 30}
streams:
  - {name: cam, model: trk, class: high, period_ms: 10, max_age_ms: 25}
  - {name: other, model: slow, class: high, period_ms: 40, max_age_ms: 400}
`, slots))
			e := startEnvMock(t, cfg, func(mc *mockbackend.Config) {
				for i := range mc.Models {
					if mc.Models[i].Name == "trk" {
						mc.Models[i].Sequence = &mockbackend.SequenceBatching{MaxIdle: 5 * time.Second}
					}
				}
			})
			c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
			ctx := ctxT(t)

			// The slow model keeps a slot busy for the whole sequence.
			stop := make(chan struct{})
			var bg sync.WaitGroup
			bg.Add(1)
			go func() {
				defer bg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					c.ModelInfer(ctx, seqFrameRequest("slow", "other", "other#"+strconv.Itoa(i), nil))
				}
			}()
			time.Sleep(20 * time.Millisecond) // the slow model is running

			// One ModelStreamInfer stream carries the sequence, so that its
			// frames reach vig in order (unary calls from goroutines need
			// not); vig forwards each as a call of its own.
			const n = 100
			s, err := c.ModelStreamInfer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			answers := map[string]int{}
			recvd := make(chan error, 1)
			go func() {
				for range n {
					r, err := s.Recv()
					if err != nil {
						recvd <- err
						return
					}
					switch msg := r.ErrorMessage; {
					case msg == "":
						answers["ok"]++
					case strings.Contains(msg, sched.Superseded.String()):
						answers["superseded"]++
					case strings.Contains(msg, sched.LateDropped.String()):
						answers["late_dropped"]++
					default:
						t.Errorf("frame %s: %s", r.InferResponse.GetId(), msg)
					}
				}
				recvd <- nil
			}()
			for i := range n {
				params := map[string]*pb.InferParameter{
					"sequence_id": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 42}},
				}
				if i == 0 {
					params["sequence_start"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}
				}
				if i == n-1 {
					params["sequence_end"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}
				}
				if err := s.Send(seqFrameRequest("trk", "cam", fmt.Sprintf("cam#%d", i), params)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond)
			}
			if err := <-recvd; err != nil {
				t.Fatal(err)
			}
			s.CloseSend()
			close(stop)
			bg.Wait()

			log, _ := e.backend.Server.Sequences("trk")
			frames := log.Frames["42"]
			t.Logf("answers %v; the backend saw %d of %d frames", answers, len(frames), n)
			if log.StartMissing != 0 {
				t.Errorf("%d requests refused for a missing START", log.StartMissing)
			}
			if len(frames) < 2 || frames[0].ID != "cam#0" || !frames[0].Start || frames[len(frames)-1].ID != fmt.Sprintf("cam#%d", n-1) || !frames[len(frames)-1].End {
				t.Fatalf("the backend saw %+v: want START (cam#0) first and END (cam#%d) last", frames, n-1)
			}
			prev := -1
			for _, f := range frames {
				k, _ := strconv.Atoi(strings.TrimPrefix(f.ID, "cam#"))
				if k <= prev {
					t.Errorf("frame %s after cam#%d: out of order", f.ID, prev)
				}
				prev = k
				if f.Overlap {
					t.Errorf("frame %s reached the backend while the sequence's previous frame ran", f.ID)
				}
			}
			if answers["ok"] == n {
				t.Errorf("every frame ran: no overload, the test shows nothing")
			}
		})
	}
}

func testConfigYAML(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A second client floods the same model directly (not through vig): its
// requests queue at the backend ahead of vig's frames. With the deadline handed
// on, no vig frame starts at the backend after its deadline (the backend drops
// it at the timeout vig gave, and vig answers it late); without, some do.
func TestDeadlineHandOffUnderFlood(t *testing.T) {
	const maxAge = 40 * time.Millisecond
	// run counts the frames that started at the backend after their deadline
	// (vig's: capture + max_age) and checks that none started past the
	// timeout it carried, as the backend counts it.
	run := func(t *testing.T, hand string) (lateStarts, atBackend, handed int, late float64) {
		cfg := testConfigYAML(t, fmt.Sprintf(`
listen: {metrics: "off"}
backend: {slots: 1, seed: 7}
models:
  det: {exec_ms: 5, hand_deadline: %s}
streams:
  - {name: cam, model: det, class: high, period_ms: 20, max_age_ms: %d}
`, hand, maxAge.Milliseconds()))
		e := startEnvMock(t, cfg, func(mc *mockbackend.Config) {
			mc.Models[0].Queue = &wire.DynamicBatching{PriorityLevels: 3,
				DefaultQueuePolicy: &wire.QueuePolicy{AllowTimeoutOverride: true, DefaultTimeoutMicroseconds: 10_000_000}}
		})
		eventually(t, "vig reads the server's model configuration", func() bool {
			_, ok := e.gw.ServerModel("det")
			return ok
		})
		ctx := ctxT(t)
		stop := make(chan struct{})
		var flood sync.WaitGroup
		var floodN atomic.Int64
		for w := range 8 { // eight requests queued at the backend at all times
			flood.Add(1)
			go func() {
				defer flood.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					e.direct.ModelInfer(ctx, seqFrameRequest("det", "flood", fmt.Sprintf("flood%d#%d", w, i), nil))
					floodN.Add(1)
				}
			}()
		}
		time.Sleep(50 * time.Millisecond) // the backend's queue fills
		c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
		sent := map[string]time.Time{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 40 {
			id := fmt.Sprintf("cam#%d", i)
			// Captured now: vig's deadline for the frame is exactly maxAge
			// after the time recorded.
			req := seqFrameRequest("det", "cam", id, map[string]*pb.InferParameter{
				wire.ParamCapture: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: clock.Monotonic()}}})
			mu.Lock()
			sent[id] = time.Now()
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.ModelInfer(ctx, req)
				if code := status.Code(err); code != codes.OK && code != codes.DeadlineExceeded && code != codes.Aborted {
					t.Errorf("frame %s: %v", id, err)
				}
			}()
			time.Sleep(20 * time.Millisecond)
		}
		wg.Wait()
		close(stop)
		flood.Wait()
		started := 0
		for _, r := range e.backend.Server.QueueRecords() {
			at, ok := sent[r.ID]
			if !ok {
				continue // the flood's
			}
			if r.Asked > 0 {
				handed++
				if r.Asked > maxAge {
					t.Errorf("frame %s carried timeout %v, more than its whole budget %v", r.ID, r.Asked, maxAge)
				}
			}
			atBackend++
			if r.Start.IsZero() {
				continue
			}
			started++
			if r.Start.After(at.Add(maxAge)) {
				lateStarts++
			}
			if r.Late {
				t.Errorf("frame %s started %v after joining the backend's queue, past its timeout %v", r.ID, r.Start.Sub(r.Arrival), r.Timeout)
			}
		}
		late = streamCounters(t, e.reg)["cam"]["late_dropped"]
		t.Logf("hand_deadline %s: %d flood requests; of vig's frames %d reached the backend, %d with a timeout, %d started there, %d of them after their deadline; late_dropped %v",
			hand, floodN.Load(), atBackend, handed, started, lateStarts, late)
		return lateStarts, atBackend, handed, late
	}
	t.Run("handed on", func(t *testing.T) {
		// Every frame reaches the backend with its budget left as timeout;
		// none starts past it as the backend counts it (from its own
		// arrival, one hop after vig's send: QueueRecord.Late, checked in
		// run). lateStarts, counted from vig's deadline, is logged only: it
		// may count a start within that hop.
		_, atBackend, handed, late := run(t, "auto")
		if handed == 0 || handed != atBackend {
			t.Fatalf("%d of the %d frames at the backend carried a timeout: want every one", handed, atBackend)
		}
		if late == 0 {
			t.Errorf("no frame counted late_dropped under a flood that delays them past their deadline")
		}
	})
	t.Run("off", func(t *testing.T) {
		lateStarts, _, handed, _ := run(t, "off")
		if handed != 0 {
			t.Errorf("%d frames carried a timeout with hand_deadline: off", handed)
		}
		if lateStarts == 0 {
			t.Errorf("no frame started after its deadline without the hand-off: the flood does not delay them, so the test shows nothing")
		}
	})
}

// A large frame is forwarded as it arrives (cut-through): the hand-off follows
// its last byte, and the backend decodes the message whole with vig's timeout
// and priority.
func TestDeadlineHandOffCutThrough(t *testing.T) {
	cfg := testConfigYAML(t, `
listen: {metrics: "off"}
backend: {slots: 1, seed: 7}
models:
  det: {exec_ms: 5, hand_deadline: on}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 500}
`)
	e := startEnvMock(t, cfg, func(mc *mockbackend.Config) {
		mc.Models[0].Queue = &wire.DynamicBatching{PriorityLevels: 3,
			DefaultQueuePolicy: &wire.QueuePolicy{AllowTimeoutOverride: true, DefaultTimeoutMicroseconds: 10_000_000}}
	})
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i)
	}
	for i := range 3 {
		req := seqFrameRequest("det", "cam", fmt.Sprintf("cam#%d", i), nil)
		req.Inputs[0].Shape = []int64{int64(len(big))}
		req.RawInputContents = [][]byte{big}
		resp, err := c.ModelInfer(ctxT(t), req)
		if err != nil || resp.Id != req.Id {
			t.Fatalf("frame %d: %v, %v", i, resp, err)
		}
	}
	recs := e.backend.Server.QueueRecords()
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for _, r := range recs {
		if r.Asked <= 0 || r.Asked > 500*time.Millisecond {
			t.Errorf("frame %s reached the backend with timeout %v, want the frame's budget left (0, 500ms]", r.ID, r.Asked)
		}
	}
}

// The hand-off on a request whose bytes reach the backend in two parts (the
// second after the client sent it): the length vig declared covers it, and the
// backend decodes the request with vig's timeout and priority.
func TestCutThroughHandOffSplit(t *testing.T) {
	rb, a := startArrivalsBackend(t)
	e, _, _ := governedAt(t, `
listen: {metrics: "off"}
backend: {slots: 1, stats_interval_ms: -1}
models:
  detector: {exec_ms: 5, hand_deadline: on}
streams:
  - {name: cam0, model: detector, class: protected, period_ms: 50, max_age_ms: 500}
`, rb.ln.Addr().String())
	h := dialH2(t, e.tcp)
	req := inferRequest("detector", "through", 1<<20)
	msg := grpcMessage(mustMarshal(t, req))
	if err := h.headers(1, h.block("/inference.GRPCInferenceService/ModelInfer"), false); err != nil {
		t.Fatal(err)
	}
	first, rest := msg[:600<<10], msg[600<<10:]
	sendFrames(h, 1, first, false)
	waitArrived(t, a, "the first 500 KiB before the client sent the rest", func(n int, ended, rst bool) bool { return n >= 500<<10 })
	sendFrames(h, 1, rest, true)
	if _, err := h.read(1); err != nil {
		t.Fatal(err)
	}
	stream, _, _, _ := a.get()
	a.mu.Lock()
	got := a.ended[stream]
	a.mu.Unlock()
	if len(got) < 5 || int(uint32(got[1])<<24|uint32(got[2])<<16|uint32(got[3])<<8|uint32(got[4])) != len(got)-5 {
		t.Fatal("the length prefix vig declared is not the length it sent")
	}
	var fwd pb.ModelInferRequest
	if err := proto.Unmarshal(got[5:], &fwd); err != nil {
		t.Fatalf("the backend got a message that does not decode: %v", err)
	}
	if fwd.Id != "through" || len(fwd.RawInputContents) != 1 || !bytes.Equal(fwd.RawInputContents[0], req.RawInputContents[0]) {
		t.Fatalf("the backend got id %q and %d raw inputs, not the request", fwd.Id, len(fwd.RawInputContents))
	}
	if to := fwd.Parameters["timeout"].GetInt64Param(); to <= 0 || to > 500_000 {
		t.Errorf("timeout %d µs, want the frame's budget left, in (0, 500000]", to)
	}
	if p := fwd.Parameters["priority"].GetUint64Param(); p != 1 {
		t.Errorf("priority %d, want 1 (protected)", p)
	}
}
