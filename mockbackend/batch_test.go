package mockbackend

import (
	"bytes"
	"context"
	"fmt"
	"slices"
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

// batchModels is scenario E's device: a detector that batches up to 8 with
// Triton's dynamic batcher (gain 0.25) and a depth model that never batches.
func batchModels() Config {
	return Config{Seed: 3, Models: []Model{
		{Name: "detector", Exec: time.Millisecond, MaxBatch: 8, Batcher: &wire.DynamicBatching{}, BatchGain: 0.25},
		{Name: "depth", Exec: time.Millisecond},
		{Name: "plain", Exec: 0, MaxBatch: 8}, // a batch dimension, no batcher
	}}
}

// frameRow is a distinct 1024-byte row per (stream, frame).
func frameRow(stream string, frame int) []byte {
	b := make([]byte, 1024)
	for i := range b {
		b[i] = byte(len(stream)*31 + frame*7 + i*13)
	}
	copy(b, fmt.Sprintf("%s#%d", stream, frame))
	return b
}

// rowsRequest is a request whose one UINT8 input has the given rows.
func rowsRequest(model, id string, rows ...[]byte) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{ModelName: model, Id: id,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8",
			Shape: []int64{int64(len(rows)), int64(len(rows[0]))}}},
		RawInputContents: [][]byte{bytes.Join(rows, nil)}}
}

func TestBatchedRequestAnswersPerRow(t *testing.T) {
	_, c, _ := serve(t, "127.0.0.1:0", batchModels())
	ctx := context.Background()
	rows := [][]byte{frameRow("cam0", 1), frameRow("cam1", 1), frameRow("cam2", 1)}
	for _, model := range []string{"detector", "plain"} {
		resp, err := c.ModelInfer(ctx, rowsRequest(model, "batch", rows...))
		if err != nil {
			t.Fatal(err)
		}
		o := resp.Outputs[0]
		if o.Name != OutputName || o.Datatype != "UINT8" || !slices.Equal(o.Shape, []int64{3, RowBytes}) {
			t.Fatalf("%s: output %s %s %v, want OUTPUT0 UINT8 [3 16]", model, o.Name, o.Datatype, o.Shape)
		}
		out := resp.RawOutputContents[0]
		for i, r := range rows {
			if got := out[i*RowBytes : (i+1)*RowBytes]; !bytes.Equal(got, RowOutput([][]byte{r})) {
				t.Errorf("%s: row %d is not its own input's", model, i)
			}
			// The row alone gets the bytes it got in the batch.
			one, err := c.ModelInfer(ctx, rowsRequest(model, "one", r))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(one.RawOutputContents[0], out[i*RowBytes:(i+1)*RowBytes]) {
				t.Errorf("%s: row %d alone answers differently than in a batch", model, i)
			}
		}
	}
	if bytes.Equal(RowOutput([][]byte{rows[0]}), RowOutput([][]byte{rows[1]})) {
		t.Error("two rows give the same output: a mixed-up answer could not be told")
	}
	// A model without a batch dimension answers as before: OUTPUT0 INT64 [2].
	resp, err := c.ModelInfer(ctx, rowsRequest("depth", "d", rows...))
	if err != nil {
		t.Fatal(err)
	}
	if o := resp.Outputs[0]; o.Datatype != outputDatatype || !slices.Equal(o.Shape, []int64{2}) {
		t.Errorf("depth answers %s %v, want INT64 [2]", o.Datatype, o.Shape)
	}
}

func TestBatchSizeErrors(t *testing.T) {
	_, c, _ := serve(t, "127.0.0.1:0", batchModels())
	ctx := context.Background()
	nine := make([][]byte, 9)
	for i := range nine {
		nine[i] = frameRow("cam", i)
	}
	bytesReq := rowsRequest("detector", "", []byte("ab"), []byte("cd"))
	bytesReq.Inputs[0].Datatype, bytesReq.Inputs[0].Shape = "BYTES", []int64{2, 1}
	bytesReq.RawInputContents[0] = []byte{2, 0, 0, 0, 'a', 'b', 9, 0, 0, 0, 'c'} // second element runs past the end
	twoInputs := rowsRequest("detector", "", frameRow("a", 0), frameRow("a", 1))
	twoInputs.Inputs = append(twoInputs.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "INPUT1", Datatype: "UINT8", Shape: []int64{1, 4}})
	twoInputs.RawInputContents = append(twoInputs.RawInputContents, []byte{1, 2, 3, 4})
	for _, tc := range []struct {
		name string
		req  *inference.ModelInferRequest
		want string
	}{
		{"nine rows", rowsRequest("detector", "", nine...), "inference request batch-size must be <= 8 for 'detector'"},
		{"zero rows", &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{0, 1024}}}, RawInputContents: [][]byte{{}}}, "batch-size must be >= 1"},
		{"batch sizes differ", twoInputs, "every input's first dimension is the same batch size"},
		{"bad BYTES", bytesReq, "runs past the tensor"},
	} {
		_, err := c.ModelInfer(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT with %q", tc.name, err, tc.want)
		}
	}
	// Shape [1024] on a batching model: its first dimension is read as the batch.
	_, err := c.ModelInfer(ctx, rawRequest("detector", "", make([]byte, 1024)))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "must be <= 8") {
		t.Errorf("shape [1024]: %v, want the batch-size error", err)
	}
}

// TestDynamicBatcherMerges queues requests of two models behind a slot the test
// holds, in a known order, then frees the slot: the oldest request takes the
// queued requests of its model with it, in arrival order, up to 8 rows; the other
// model's requests never join. Read from the server's own timeline, not the clock.
func TestDynamicBatcherMerges(t *testing.T) {
	cfg := batchModels()
	cfg.Timeline = true
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	held, err := r.slots.acquire(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// 11 one-row detector frames, one 2-row detector request and two depth
	// frames, interleaved.
	var order []sent
	for i := range 11 {
		order = append(order, sent{"detector", FrameID("cam", uint64(i)), 1})
		if i == 2 || i == 9 {
			order = append(order, sent{"depth", FrameID("depth", uint64(i)), 1})
		}
		if i == 6 {
			order = append(order, sent{"detector", "pair", 2})
		}
	}
	var wg sync.WaitGroup
	answers := make([]*inference.ModelInferResponse, len(order))
	rows := make([][][]byte, len(order))
	for k, s := range order {
		for i := range s.rows {
			rows[k] = append(rows[k], frameRow(s.id, i))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.ModelInfer(context.Background(), rowsRequest(s.model, s.id, rows[k]...))
			if err != nil {
				t.Error(err)
				return
			}
			answers[k] = resp
		}()
		waitQueued(t, r.slots, k+1)
	}
	r.slots.release(held.slot, time.Now())
	wg.Wait()
	if t.Failed() {
		return
	}
	for k, resp := range answers {
		if order[k].model != "detector" {
			continue
		}
		var want []byte
		for _, row := range rows[k] {
			want = append(want, RowOutput([][]byte{row})...)
		}
		if !bytes.Equal(resp.RawOutputContents[0], want) || resp.Id != order[k].id {
			t.Errorf("request %s got another request's rows", order[k].id)
		}
	}
	// Executions in start order, each with its requests in arrival order.
	byExec := map[uint64][]Job{}
	var execs []uint64
	for _, j := range r.Timeline() {
		if _, ok := byExec[j.Execution]; !ok {
			execs = append(execs, j.Execution)
		}
		byExec[j.Execution] = append(byExec[j.Execution], j)
	}
	var got []string
	for _, x := range execs {
		jobs := byExec[x]
		var ids []string
		rows := 0
		for _, j := range jobs {
			if j.Model != jobs[0].Model {
				t.Errorf("execution %d mixes models %s and %s", x, jobs[0].Model, j.Model)
			}
			if j.Batch != jobs[0].Batch || !j.Start.Equal(jobs[0].Start) || !j.End.Equal(jobs[0].End) {
				t.Errorf("execution %d: its requests disagree on batch, start or end", x)
			}
			ids = append(ids, j.ID)
			rows += j.Rows
		}
		if rows != jobs[0].Batch || rows > 8 {
			t.Errorf("execution %d: %d rows, batch %d (max 8)", x, rows, jobs[0].Batch)
		}
		slices.SortFunc(ids, func(a, b string) int { return indexOf(order, a) - indexOf(order, b) })
		got = append(got, strings.Join(ids, " "))
	}
	want := []string{
		// cam#0 heads the queue and takes the detector requests behind it up to 8
		// rows: cam#0..6 (7 rows) and not the pair (9 rows).
		"cam#0 cam#1 cam#2 cam#3 cam#4 cam#5 cam#6",
		"depth#2",
		"pair cam#7 cam#8 cam#9 cam#10",
		"depth#9",
	}
	if !slices.Equal(got, want) {
		t.Errorf("executions\n got %q\nwant %q", got, want)
	}
	sizes := r.BatchSizes()
	if sizes["detector"][7] != 1 || sizes["detector"][6] != 1 || sizes["depth"][1] != 2 {
		t.Errorf("batch sizes recorded %v, want detector {7: 1, 6: 1}, depth {1: 2}", sizes)
	}
	st, err := c.ModelStatistics(context.Background(), &inference.ModelStatisticsRequest{Name: "detector"})
	if err != nil {
		t.Fatal(err)
	}
	if ms := st.ModelStats[0]; ms.InferenceCount != 13 || ms.ExecutionCount != 2 {
		t.Errorf("detector statistics: %d inferences, %d executions; want 13 rows in 2 executions", ms.InferenceCount, ms.ExecutionCount)
	}
}

// sent is a request a test sent: its model, id and rows.
type sent struct {
	model, id string
	rows      int
}

func indexOf(order []sent, id string) int {
	return slices.IndexFunc(order, func(s sent) bool { return s.id == id })
}

// TestFromConfigBatching: the embedded backend serves a model's max_batch with
// Triton's dynamic batcher and the batch gain that reproduces batch_exec_ms.
func TestFromConfigBatching(t *testing.T) {
	eight, one := 8, 1
	for _, tc := range []struct {
		m        config.Model
		max      int
		gain     float64
		batching bool
	}{
		{config.Model{ExecMs: 10, MaxBatch: &eight, BatchExecMs: map[int]float64{1: 10, 8: 27.5}}, 8, 0.25, true}, // scenario E
		{config.Model{ExecMs: 10, MaxBatch: &eight, BatchExecMs: map[int]float64{1: 10, 8: 80}}, 8, 1, true},      // E-linear
		{config.Model{ExecMs: 10, MaxBatch: &eight, BatchExecMs: map[int]float64{4: 17.5}}, 8, 0.25, true},        // from exec_ms
		{config.Model{ExecMs: 10, MaxBatch: &eight}, 8, 1, true},                                                  // no costs given: no gain
		{config.Model{ExecMs: 10, MaxBatch: &one}, 0, 0, false},                                                   // max_batch 1: no batch dimension
		{config.Model{ExecMs: 10}, 0, 0, false},
	} {
		cfg := FromConfig(&config.Config{Models: map[string]config.Model{"detector": tc.m}})
		m := cfg.Models[0]
		if m.MaxBatch != tc.max || (m.Batcher != nil) != tc.batching || m.BatchGain != tc.gain {
			t.Errorf("%+v: max %d batcher %v gain %g; want %d %v %g", tc.m, m.MaxBatch, m.Batcher != nil, m.BatchGain, tc.max, tc.batching, tc.gain)
		}
	}
}

// TestModelConfigServed reads each model's configuration over gRPC as vig
// would.
func TestModelConfigServed(t *testing.T) {
	cfg := batchModels()
	cfg.Models[0].Batcher = &wire.DynamicBatching{PreferredBatchSize: []int32{4, 8}, MaxQueueDelayMicroseconds: 100}
	_, c, _ := serve(t, "127.0.0.1:0", cfg)
	for _, tc := range []struct {
		model string
		max   int32
		dyn   *wire.DynamicBatching
	}{
		{"detector", 8, cfg.Models[0].Batcher},
		{"depth", 0, nil},
		{"plain", 8, nil},
	} {
		resp, err := c.ModelConfig(context.Background(), &inference.ModelConfigRequest{Name: tc.model})
		if err != nil {
			t.Fatal(err)
		}
		mc, err := wire.ParseModelConfig(resp.Config)
		if err != nil {
			t.Fatal(err)
		}
		if mc.Name != tc.model || mc.MaxBatchSize != tc.max || mc.SequenceBatching {
			t.Errorf("%s: name %q max_batch_size %d", tc.model, mc.Name, mc.MaxBatchSize)
		}
		if (mc.DynamicBatching == nil) != (tc.dyn == nil) || tc.dyn != nil &&
			(!slices.Equal(mc.DynamicBatching.PreferredBatchSize, tc.dyn.PreferredBatchSize) || mc.DynamicBatching.MaxQueueDelayMicroseconds != tc.dyn.MaxQueueDelayMicroseconds) {
			t.Errorf("%s: dynamic_batching %+v, want %+v", tc.model, mc.DynamicBatching, tc.dyn)
		}
		if len(mc.InstanceGroups) != 1 || mc.InstanceGroups[0].Kind != wire.KindGPU || mc.InstanceGroups[0].Count != 1 {
			t.Errorf("%s: instance groups %+v, want one KIND_GPU of count 1", tc.model, mc.InstanceGroups)
		}
		wantOut := []int64{2}
		if tc.max > 0 {
			wantOut = []int64{RowBytes}
		}
		if len(mc.Outputs) != 1 || !slices.Equal(mc.Outputs[0].Dims, wantOut) {
			t.Errorf("%s: outputs %+v, want OUTPUT0 dims %v", tc.model, mc.Outputs, wantOut)
		}
	}
}

// TestBatchCost checks the scenario's cost model on the server's own timeline:
// an execution of b one-row frames lasts mean(ExecTime of its frames) ×
// (1 + g·(b − 1)); a request that came with b rows, Exec × 1.1 × (1 + g·(b − 1)).
func TestBatchCost(t *testing.T) {
	for _, gain := range []float64{0.25, 1} {
		cfg := batchModels()
		cfg.Models[0].Exec, cfg.Models[0].BatchGain = 10*time.Millisecond, gain
		cfg.Timeline = true
		cfg.Spin = -1
		r, c, _ := serve(t, "127.0.0.1:0", cfg)
		held, err := r.slots.acquire(context.Background(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		frames := []uint64{3, 17, 4, 99}
		for k, f := range frames {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.ModelInfer(context.Background(), rowsRequest("detector", FrameID("cam"+fmt.Sprint(k), f), frameRow("x", k))); err != nil {
					t.Error(err)
				}
			}()
			waitQueued(t, r.slots, k+1)
		}
		r.slots.release(held.slot, time.Now())
		wg.Wait()
		if _, err := c.ModelInfer(context.Background(), rowsRequest("detector", "pre-batched", frameRow("a", 0), frameRow("b", 0), frameRow("c", 0))); err != nil {
			t.Fatal(err)
		}
		var sum time.Duration
		for k, f := range frames {
			sum += ExecTime(cfg.Seed, "cam"+fmt.Sprint(k), f, 10*time.Millisecond)
		}
		wantBatch := time.Duration(float64(sum) / 4 * (1 + gain*3))
		wantPre := time.Duration(10 * float64(time.Millisecond) * 1.1 * (1 + gain*2))
		jobs := r.Timeline()
		if len(jobs) != 5 {
			t.Fatalf("%d jobs, want 5", len(jobs))
		}
		near := func(a, b time.Duration) bool { return a-b < 3 && b-a < 3 } // ns rounding
		if d := jobs[0].End.Sub(jobs[0].Start); jobs[0].Batch != 4 || !near(d, wantBatch) {
			t.Errorf("gain %g: batch of %d frames lasts %v, want 4 frames in %v", gain, jobs[0].Batch, d, wantBatch)
		}
		if d := jobs[4].End.Sub(jobs[4].Start); jobs[4].Batch != 3 || !near(d, wantPre) {
			t.Errorf("gain %g: a 3-row request lasts %v (batch %d), want %v", gain, d, jobs[4].Batch, wantPre)
		}
	}
}

// TestBatcherPolicy drives the batcher's choice without a clock: preferred batch
// sizes and the queue delay, as Triton's dynamic batcher documents them.
func TestBatcherPolicy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	queue := func(s *slots, p *batchPolicy, arrivals ...int) {
		for _, a := range arrivals {
			w := &waiter{work: work{rows: 1, exec: time.Millisecond, policy: p}, arrival: ms(a), ready: make(chan grant, 1)}
			w.elem = s.queue.PushBack(w)
		}
	}
	other := &batchPolicy{max: 8, merge: true}
	for _, tc := range []struct {
		name     string
		p        *batchPolicy
		arrivals []int
		now      int
		take     int // 0: waits
		wake     int
	}{
		{"no preference takes all", &batchPolicy{max: 8, merge: true}, []int{0, 1, 2, 3, 4}, 5, 5, 0},
		{"largest preferred size", &batchPolicy{max: 8, merge: true, preferred: []int{2, 4}}, []int{0, 1, 2, 3, 4}, 5, 4, 0},
		{"below every preferred size takes all", &batchPolicy{max: 8, merge: true, preferred: []int{4}}, []int{0, 1, 2}, 5, 3, 0},
		{"up to max", &batchPolicy{max: 3, merge: true}, []int{0, 1, 2, 3, 4}, 5, 3, 0},
		{"delay: waits for more", &batchPolicy{max: 8, merge: true, delay: 10 * time.Millisecond}, []int{0, 1}, 5, 0, 10},
		{"delay: runs when it ends", &batchPolicy{max: 8, merge: true, delay: 10 * time.Millisecond}, []int{0, 1}, 12, 2, 0},
		{"delay: a preferred size runs at once", &batchPolicy{max: 8, merge: true, preferred: []int{2}, delay: 10 * time.Millisecond}, []int{0, 1, 2}, 5, 2, 0},
		{"delay: max runs at once", &batchPolicy{max: 2, merge: true, delay: 10 * time.Millisecond}, []int{0, 1, 2}, 5, 2, 0},
	} {
		s := newSlots(1)
		queue(s, tc.p, tc.arrivals...)
		queue(s, other, 3) // another model's request between never joins
		// The slot frees now: the requests queued by then may join.
		members, start, _ := s.nextLocked(ms(tc.now), ms(tc.now))
		switch {
		case tc.take == 0:
			// While the batch waits, the other model's request may go first;
			// then nothing runs until the wait ends.
			if len(members) != 1 || members[0].policy != other {
				t.Errorf("%s: took %d, want the other model's request while the batch waits", tc.name, len(members))
				continue
			}
			s.queue.Remove(members[0].elem)
			if m, _, wake := s.nextLocked(ms(tc.now), ms(tc.now)); m != nil || !wake.Equal(ms(tc.wake)) {
				t.Errorf("%s: took %d, wake at %v; want to wait until %d ms", tc.name, len(m), wake.Sub(t0), tc.wake)
			}
		case len(members) != tc.take:
			t.Errorf("%s: took %d, want %d", tc.name, len(members), tc.take)
		default:
			for k, w := range members {
				if w.policy != tc.p || !w.arrival.Equal(ms(tc.arrivals[k])) {
					t.Errorf("%s: member %d is not the %d-th queued request of the model", tc.name, k, k)
				}
			}
			if start.Before(members[len(members)-1].arrival) {
				t.Errorf("%s: batch starts at %v, before its last member arrived", tc.name, start.Sub(t0))
			}
		}
	}
}
