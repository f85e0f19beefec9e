package restfront_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/vig-edge/vig/agent/gateway/restfront"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
)

// heldBackend answers each ModelInfer only when the test releases it.
type heldBackend struct {
	pb.UnimplementedGRPCInferenceServiceServer
	started chan string
	release chan struct{}
}

func (b *heldBackend) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	b.started <- req.Id
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &pb.ModelInferResponse{ModelName: req.ModelName, Id: req.Id,
		Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "OUTPUT0", Datatype: "INT64", Shape: []int64{1}}},
		RawOutputContents: [][]byte{binary.LittleEndian.AppendUint64(nil, 1)}}, nil
}

// waitStream polls the scheduler until cond holds for stream cam (a hang guard
// bounds it; no timing is asserted).
func waitStream(t *testing.T, r *rig, what string, cond func(sched.StreamStats) bool) sched.StreamStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var snap sched.Snapshot
	for {
		r.gov.Snapshot(&snap)
		for _, s := range snap.Streams {
			if s.Name == "cam" && cond(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream cam never reached: %s (%+v)", what, snap.Streams)
		}
		time.Sleep(time.Millisecond)
	}
}

// The freshness rules hold for HTTP clients: a frame waiting behind a running
// one is superseded by a newer frame of the same stream and answered at once
// (400, Vig-Code ABORTED, as Triton answers a cancelled request); a client that
// leaves has its waiting frame cancelled; a frame already too old is answered
// 503 DEADLINE_EXCEEDED without running. Every request is answered once and
// counted in the stream's outcomes.
func TestBurstSuperseded(t *testing.T) {
	hb := &heldBackend{started: make(chan string, 8), release: make(chan struct{})}
	r := newRig(t, restfront.Options{}, func(s *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(s, hb) })
	type result struct {
		rep reply
		err error
	}
	send := func(ctx context.Context, frame uint64, capture int64) chan result {
		params := obj{"vig_stream": "cam"}
		if capture != 0 {
			params["vig_capture_ns"] = capture
		}
		body, _ := json.Marshal(obj{"id": id(frame), "parameters": params,
			"inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{1}, "data": []int{1}}}})
		ch := make(chan result, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", r.base+"/v2/models/det/infer", bytesReader(body))
			resp, err := r.client.Do(req)
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b := make([]byte, 4096)
			n, _ := resp.Body.Read(b)
			ch <- result{rep: reply{resp.StatusCode, resp.Header, b[:n]}}
		}()
		return ch
	}
	// Frame 1 runs; frame 2 is pipelined behind it at the backend (one per slot).
	a := send(context.Background(), 1, 0)
	if got := <-hb.started; got != id(1) {
		t.Fatalf("backend started %s, want %s", got, id(1))
	}
	b := send(context.Background(), 2, 0)
	if got := <-hb.started; got != id(2) {
		t.Fatalf("backend started %s, want %s", got, id(2))
	}
	waitStream(t, r, "frames 1 and 2 on the backend", func(s sched.StreamStats) bool { return s.Running == 2 })
	c := send(context.Background(), 3, 0)
	waitStream(t, r, "frame 3 waiting", func(s sched.StreamStats) bool { return s.Waiting == 1 })
	d := send(context.Background(), 4, 0) // supersedes 3
	res := <-c
	if res.err != nil || res.rep.code != http.StatusBadRequest || res.rep.header.Get("Vig-Code") != "ABORTED" {
		t.Errorf("superseded frame: %v HTTP %d %s (Vig-Code %q), want 400 ABORTED", res.err, res.rep.code, res.rep.body, res.rep.header.Get("Vig-Code"))
	}

	// A client that leaves while its frame waits: cancelled, its slot not taken.
	ctx, cancel := context.WithCancel(context.Background())
	waitStream(t, r, "frame 4 waiting", func(s sched.StreamStats) bool { return s.Waiting == 1 && s.Superseded == 1 })
	e := send(ctx, 5, 0) // supersedes 4
	res = <-d
	if res.rep.code != http.StatusBadRequest || res.rep.header.Get("Vig-Code") != "ABORTED" {
		t.Errorf("frame 4: HTTP %d %s, want 400 ABORTED", res.rep.code, res.rep.body)
	}
	waitStream(t, r, "frame 5 waiting", func(s sched.StreamStats) bool { return s.Waiting == 1 && s.Superseded == 2 })
	cancel()
	if res := <-e; res.err == nil {
		t.Errorf("cancelled request answered HTTP %d", res.rep.code)
	}
	waitStream(t, r, "frame 5 cancelled", func(s sched.StreamStats) bool { return s.Cancelled == 1 && s.Waiting == 0 })

	// A frame captured 10 s ago (max_age 5 s) cannot be fresh: answered at
	// once, never run.
	res = <-send(context.Background(), 6, clock.Monotonic()-10e9)
	if res.rep.code != http.StatusServiceUnavailable || res.rep.header.Get("Vig-Code") != "DEADLINE_EXCEEDED" {
		t.Errorf("late frame: HTTP %d %s (Vig-Code %q), want 503 DEADLINE_EXCEEDED", res.rep.code, res.rep.body, res.rep.header.Get("Vig-Code"))
	}

	hb.release <- struct{}{}
	hb.release <- struct{}{}
	for i, ch := range []chan result{a, b} {
		if res := <-ch; res.rep.code != http.StatusOK {
			t.Errorf("frame %d: HTTP %d %s", i+1, res.rep.code, res.rep.body)
		}
	}
	s := waitStream(t, r, "all answered", func(s sched.StreamStats) bool { return s.Running == 0 && s.Waiting == 0 })
	if s.Received != 6 || s.Forwarded != 2 || s.Superseded != 2 || s.Cancelled != 1 || s.LateDropped != 1 {
		t.Errorf("stream cam outcomes %+v, want received 6: forwarded 2, superseded 2, cancelled 1, late_dropped 1", s.Counters)
	}
	select {
	case id := <-hb.started:
		t.Errorf("backend ran %s, a frame vig should have answered itself", id)
	default:
	}
}
