package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/platform/profile"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// The batch rows: what merging frames into one backend request and splitting
// its answer costs vig per frame. Each round sends one frame of each of k
// streams of one batching model (max_batch 8) at once, VIA vig and DIRECT to
// the mock backend (whose dynamic batcher, as Triton's, merges what queues);
// the latency is the time until all k are answered, the cost columns are per
// frame.
const (
	PathBatch4 = "grpc-tcp-batch4" // PathTCP, 4 streams of a batching model
	PathBatch8 = "grpc-tcp-batch8" // PathTCP, 8 streams of a batching model
)

// batchPeriod is the streams' period. Rounds are paced at two periods: a
// frame whose result would land in a window its stream already has is held
// for its model's next batch (agent/sched, Batching), and with one round in
// flight that batch only comes with the next round; two periods apart, a
// round's results land in windows of their own.
const batchPeriod = 20 * time.Millisecond

// batchMaxAge bounds how long the scheduler may hold a frame: one it drops
// (late, or superseded) fails its round, which is not timed but counted.
const batchMaxAge = 200 * time.Millisecond

// batchMaxPayload is the largest frame the batch rows measure (8 × 1.2 MB a
// round).
const batchMaxPayload = 1_200_000

// batchFrames is the frames per round of a batch path, 0 for the others.
func batchFrames(path string) int {
	switch path {
	case PathBatch4:
		return 4
	case PathBatch8:
		return 8
	}
	return 0
}

// batchStream names stream i of the batch rows.
func batchStream(i int) string { return fmt.Sprintf("b%d", i) }

// vigBatchConfig is vig's configuration for a batch row: k streams of one
// model that batches up to 8 frames, a batch of 8 costing twice one frame
// (the mock backend charges the same, mockbackend.FromConfig).
func vigBatchConfig(listenGRPC, backend string, exec time.Duration, k int) string {
	var streams strings.Builder
	for i := range k {
		fmt.Fprintf(&streams, "  - {name: %s, model: %s, class: high, period_ms: %d, max_age_ms: %d}\n", batchStream(i), benchModel, batchPeriod.Milliseconds(), batchMaxAge.Milliseconds())
	}
	ms := float64(exec) / 1e6
	return fmt.Sprintf(`listen: {grpc: %q, unix: "off", metrics: "off"}
backend: {address: %q, slots: 1}
log: {format: json, level: info}
models:
  %s: {exec_ms: %g, max_batch: 8, batch_exec_ms: {1: %g, 8: %g}}
streams:
%s`, listenGRPC, backend, benchModel, ms, ms, 2*ms, streams.String())
}

// batchMock is the mock backend's configuration for the batch rows.
func batchMock(exec time.Duration, k int) (mockbackend.Config, error) {
	cfg, err := config.Parse("batch.yaml", []byte(vigBatchConfig("127.0.0.1:0", "127.0.0.1:1", exec, k)))
	if err != nil {
		return mockbackend.Config{}, err
	}
	m := mockbackend.FromConfig(cfg)
	m.Seed = 1
	return m, nil
}

// batchRequest is frame of stream i: one row of payload bytes.
func batchRequest(i int, frame uint64, data []byte) rawMsg {
	req := &pb.ModelInferRequest{
		ModelName: benchModel,
		Id:        mockbackend.FrameID(batchStream(i), frame),
		Parameters: map[string]*pb.InferParameter{
			wire.ParamStream: {ParameterChoice: &pb.InferParameter_StringParam{StringParam: batchStream(i)}},
		},
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{1, int64(len(data))}}},
		RawInputContents: [][]byte{data},
	}
	b, err := proto.Marshal(req)
	if err != nil {
		panic(err) // a message of known fields always encodes
	}
	return b
}

// callAll times k calls sent at once: until the last answer. refused counts
// the calls vig's scheduler answered itself (dropped, not run).
func callAll(ctx context.Context, cc *grpc.ClientConn, msgs []rawMsg) (d time.Duration, refused int, err error) {
	var wg sync.WaitGroup
	errs := make([]error, len(msgs))
	t0 := time.Now()
	for i, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = call(ctx, cc, m)
		}()
	}
	wg.Wait()
	d = time.Since(t0)
	for _, e := range errs {
		switch {
		case e == nil:
		case strings.HasPrefix(status.Convert(e).Message(), "vig: "):
			refused++
		default:
			return d, refused, e
		}
	}
	return d, refused, nil
}

// mockExecutions reads the mock backend's execution count of the bench model
// (a batch counts once).
func mockExecutions(ctx context.Context, cc *grpc.ClientConn) (uint64, error) {
	r, err := pb.NewGRPCInferenceServiceClient(cc).ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: benchModel})
	if err != nil {
		return 0, err
	}
	if len(r.ModelStats) == 0 {
		return 0, fmt.Errorf("the mock backend reports no statistics for %s", benchModel)
	}
	return r.ModelStats[0].ExecutionCount, nil
}

// measureBatchRow is measureRow for a batch path: rounds paced at
// batchPeriod, each k frames DIRECT and k VIA (the order flipping every
// round), the proxy profiled over the measured rounds and its cost divided
// by the frames.
func measureBatchRow(ctx context.Context, o *DatapathOptions, e *pathEnv, payload, run int) (*DatapathRun, error) {
	k := batchFrames(e.path)
	datas := make([][]byte, k)
	for i := range datas {
		datas[i] = make([]byte, payload)
		for j := range datas[i] {
			datas[i][j] = byte(i*31 + j*7)
		}
	}
	var d, v, diff []float64
	var sess *profile.Session
	var profErr error
	defer func() {
		if sess != nil {
			sess.Close()
		}
	}()
	var viaExec uint64
	dropped := 0
	total := o.Warmup + o.Rounds
	start := time.Now()
	msgs := make([]rawMsg, k)
	for i := range total {
		if i == o.Warmup {
			sess, profErr = profile.Start(profile.Options{PID: e.proxy.PID, EBPF: profile.Auto})
		}
		frame := uint64(run*total + i)
		for s := range msgs {
			msgs[s] = batchRequest(s, frame, datas[s])
		}
		time.Sleep(time.Until(start.Add(time.Duration(i) * 2 * batchPeriod)))
		var td, tv time.Duration
		var err error
		refused := 0
		via := func() error {
			before, err := mockExecutions(ctx, e.direct)
			if err != nil {
				return err
			}
			if tv, refused, err = callAll(ctx, e.via, msgs); err != nil {
				return err
			}
			after, err := mockExecutions(ctx, e.direct)
			if i >= o.Warmup && refused == 0 {
				viaExec += after - before
			}
			return err
		}
		direct := func() (err error) {
			td, _, err = callAll(ctx, e.direct, msgs)
			return err
		}
		if i%2 == 0 {
			if err = direct(); err == nil {
				err = via()
			}
		} else {
			if err = via(); err == nil {
				err = direct()
			}
		}
		if err != nil {
			return nil, err
		}
		if i >= o.Warmup && refused > 0 {
			dropped += refused
			continue
		}
		if i >= o.Warmup {
			d, v = append(d, ms(td)), append(v, ms(tv))
			diff = append(diff, ms(tv)-ms(td))
		}
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("vig dropped a frame in every round (%d frames)", dropped)
	}
	r := &DatapathRun{Direct: Summarize(d), Via: Summarize(v), PairMedian: Median(diff),
		BackendRequests: float64(viaExec) / float64(len(v)), Dropped: dropped}
	switch {
	case sess != nil:
		rep, err := sess.Stop()
		sess = nil
		if err != nil {
			r.Cost = &ProxyCost{Syscalls: -1, Source: err.Error()}
			break
		}
		rep.SetRequests(uint64(o.Rounds * k))
		r.Cost = costOf(rep)
	case profErr != nil:
		r.Cost = &ProxyCost{Syscalls: -1, Source: "profile: " + profErr.Error()}
	}
	return r, nil
}
