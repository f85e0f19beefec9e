package mockbackend

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

func boolParam(v bool) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: v}}
}

func seqRequest(id string, seq *inference.InferParameter, start, end bool) *inference.ModelInferRequest {
	req := rawRequest("trk", id, []byte{1, 2, 3})
	req.Parameters = map[string]*inference.InferParameter{"sequence_id": seq}
	if start {
		req.Parameters["sequence_start"] = boolParam(true)
	}
	if end {
		req.Parameters["sequence_end"] = boolParam(true)
	}
	return req
}

// The sequence batcher refuses what Triton's refuses, keeps a sequence's slot
// from START to END, frees it at the idle timeout too, and records each
// sequence's requests in order.
func TestSequenceBatcher(t *testing.T) {
	const idle = 150 * time.Millisecond
	cfg := Config{Models: []Model{{Name: "trk", Exec: time.Millisecond, Sequence: &SequenceBatching{MaxIdle: idle, Slots: 1}}}}
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	ctx := context.Background()

	_, err := c.ModelInfer(ctx, seqRequest("x", i64(5), false, false))
	wantCode(t, "no START", err, codes.InvalidArgument)
	if want := "inference request for sequence 5 to model 'trk' must specify the START flag on the first request of the sequence"; status.Convert(err).Message() != want {
		t.Errorf("no START: %q, want Triton's %q", status.Convert(err).Message(), want)
	}
	_, err = c.ModelInfer(ctx, rawRequest("trk", "y", []byte{1}))
	wantCode(t, "no sequence id", err, codes.InvalidArgument)

	for i, rq := range []*inference.ModelInferRequest{
		seqRequest("a0", i64(5), true, false), seqRequest("a1", i64(5), false, false), seqRequest("a2", i64(5), false, true),
		seqRequest("b0", str("cam"), true, false), // takes the one slot, freed by END above
	} {
		if _, err := c.ModelInfer(ctx, rq); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	_, err = c.ModelInfer(ctx, seqRequest("a3", i64(5), false, false))
	wantCode(t, "after END", err, codes.InvalidArgument)

	// Sequence cam never ends: the next START gets the only slot once the idle
	// timeout frees it (counted below as IdleFreed, not timed).
	if _, err := c.ModelInfer(ctx, seqRequest("c0", i64(9), true, true)); err != nil {
		t.Fatal(err)
	}
	log, ok := r.Server.Sequences("trk")
	if !ok {
		t.Fatal("no sequence log")
	}
	if log.StartMissing != 2 || log.IdleFreed != 1 {
		t.Errorf("start missing %d (want 2), idle freed %d (want 1)", log.StartMissing, log.IdleFreed)
	}
	var ids []string
	for _, f := range log.Frames["5"] {
		ids = append(ids, f.ID)
	}
	if got := strings.Join(ids, ","); got != "a0,a1,a2" {
		t.Errorf("sequence 5 recorded %s, want a0,a1,a2", got)
	}
	if f := log.Frames["5"]; !f[0].Start || !f[2].End || f[1].Start || f[1].End {
		t.Errorf("flags recorded wrong: %+v", f)
	}

	// Its ModelConfig says sequence_batching.
	mc, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "trk"})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := wire.ParseModelConfig(mc.Config)
	if err != nil || !parsed.SequenceBatching || parsed.Name != "trk" {
		t.Fatalf("ModelConfig: %+v, %v; want sequence_batching and the model's name", parsed, err)
	}
}

// Two requests of one sequence at once are recorded as overlapping.
func TestSequenceOverlapRecorded(t *testing.T) {
	cfg := Config{Models: []Model{{Name: "trk", Exec: 300 * time.Millisecond, Sequence: &SequenceBatching{}}}, Slots: 2} // long enough to overlap on a loaded machine
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	ctx := context.Background()
	if _, err := c.ModelInfer(ctx, seqRequest("s", i64(1), true, false)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, id := range []string{"p", "q"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ModelInfer(ctx, seqRequest(id, i64(1), false, false)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	log, _ := r.Server.Sequences("trk")
	n := 0
	for _, f := range log.Frames["1"] {
		if f.Overlap {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d overlapping requests recorded, want 1: %+v", n, log.Frames["1"])
	}
}

// A request still queued at its timeout is answered UNAVAILABLE with Triton's
// text where the queue policy honours it, and runs where it does not.
func TestQueueTimeout(t *testing.T) {
	policy := &wire.DynamicBatching{PriorityLevels: 3, DefaultQueuePolicy: &wire.QueuePolicy{AllowTimeoutOverride: true, DefaultTimeoutMicroseconds: 10_000_000}}
	cfg := Config{Models: []Model{
		{Name: "det", Exec: 100 * time.Millisecond, Queue: policy},
		{Name: "plain", Exec: 100 * time.Millisecond, Queue: &wire.DynamicBatching{}},
	}}
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	ctx := context.Background()
	for _, model := range []string{"det", "plain"} {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // holds the one slot for 100 ms
			defer wg.Done()
			if _, err := c.ModelInfer(ctx, rawRequest(model, model+"-busy", []byte{1})); err != nil {
				t.Error(err)
			}
		}()
		for deadline := time.Now().Add(5 * time.Second); r.Server.models[model].pool.running.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) { // liveness
				t.Fatal("the busy request never started")
			}
		}
		req := rawRequest(model, model+"-late", []byte{1})
		req.Parameters = map[string]*inference.InferParameter{"timeout": i64(10_000)} // 10 ms
		_, err := c.ModelInfer(ctx, req)
		wg.Wait()
		if model == "det" {
			wantCode(t, "queued past its timeout", err, codes.Unavailable)
			if msg := status.Convert(err).Message(); msg != timeoutMsg {
				t.Errorf("message %q, want Triton's %q", msg, timeoutMsg)
			}
		} else if err != nil {
			t.Errorf("model without a default timeout: %v; want it run (Triton keeps no request timeout then)", err)
		}
	}
	var expired, late, started int
	for _, rec := range r.Server.QueueRecords() {
		if rec.Expired {
			expired++
		}
		if rec.Late {
			late++
		}
		if !rec.Start.IsZero() {
			started++
		}
	}
	if expired != 1 || late != 0 || started != 3 {
		t.Errorf("records: %d expired (want 1), %d late (want 0), %d started (want 3): %+v", expired, late, started, r.Server.QueueRecords())
	}
	mc, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "det"})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := wire.ParseModelConfig(mc.Config)
	if err != nil || parsed.DynamicBatching == nil ||
		parsed.DynamicBatching.PriorityLevels != 3 || parsed.DynamicBatching.DefaultQueuePolicy == nil || !parsed.DynamicBatching.DefaultQueuePolicy.AllowTimeoutOverride {
		t.Fatalf("ModelConfig: %+v, %v; want its dynamic batcher and queue policy", parsed, err)
	}
}

// backend.sequence_batching puts a model of the config behind the sequence
// batcher, and only that one.
func TestSequencesFromConfig(t *testing.T) {
	c, err := config.Parse("t.yaml", []byte("models: {trk: {exec_ms: 5}, det: {exec_ms: 5}}\nbackend: {sequence_batching: {trk: {max_idle_ms: 250, slots: 2}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range FromConfig(c).Models {
		switch {
		case m.Name == "trk" && (m.Sequence == nil || *m.Sequence != SequenceBatching{MaxIdle: 250 * time.Millisecond, Slots: 2}):
			t.Errorf("trk: sequence batcher %+v, want max idle 250ms and 2 slots", m.Sequence)
		case m.Name == "det" && m.Sequence != nil:
			t.Errorf("det: sequence batcher %+v, want none", m.Sequence)
		}
	}
}
