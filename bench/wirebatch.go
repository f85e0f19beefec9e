package bench

import (
	"bytes"
	"errors"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/mockbackend"
	pb "github.com/vig-edge/vig/proto/inference"
)

// batchingModel reports whether the scenario's model takes batches: its frames
// are sent as [1, wirePayload] with content of their own, and every answer is
// checked to be its frame's.
func batchingModel(cfg *config.Config, model string) bool {
	m, ok := cfg.Models[model]
	return ok && m.MaxBatch != nil && *m.MaxBatch > 1
}

// framePayload is a frame's own content: wirePayload bytes from a hash of
// (stream, frame), so that no two frames of a run carry the same row.
func framePayload(stream string, frame uint64) []byte {
	b := make([]byte, wirePayload)
	h := uint64(14695981039346656037)
	for i := 0; i < len(stream); i++ {
		h = (h ^ uint64(stream[i])) * 1099511628211
	}
	h ^= frame * 0x9e3779b97f4a7c15
	for i := 0; i < len(b); i += 8 {
		// xorshift64*: cheap, and every 8 bytes differ.
		h ^= h >> 12
		h ^= h << 25
		h ^= h >> 27
		v := h * 0x2545f4914f6cdd1d
		for k := 0; k < 8 && i+k < len(b); k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// batchFrameRequest is frameRequest for a batching model: one row, shape
// [1, len(row)], as Triton requires of a client when max_batch_size > 0.
func batchFrameRequest(model, stream string, frame uint64, capture int64, row []byte) *pb.ModelInferRequest {
	req := frameRequest(model, stream, frame, capture, row)
	req.Inputs[0].Shape = []int64{1, int64(len(row))}
	return req
}

// errMixedUp is a sensor's answer that belongs to another frame.
var errMixedUp = errors.New("the answer is not its frame's")

// ownAnswer reports whether resp answers the frame (stream, frame) whose row was
// sent: its id, and OUTPUT0 = [1, 16] computed from that row alone.
func ownAnswer(resp *pb.ModelInferResponse, stream string, frame uint64, row []byte) bool {
	if resp.Id != mockbackend.FrameID(stream, frame) || len(resp.Outputs) != 1 || len(resp.RawOutputContents) != 1 {
		return false
	}
	if o := resp.Outputs[0]; o.Name != mockbackend.OutputName || len(o.Shape) != 2 || o.Shape[0] != 1 {
		return false
	}
	return bytes.Equal(resp.RawOutputContents[0], mockbackend.RowOutput([][]byte{row}))
}

// batchCounts counts the executions that started in [start, end) by model and
// batch size (rows), from the mock backend's timeline; nil unless some
// execution ran more than one row.
func batchCounts(jobs []mockbackend.Job, mono func(time.Time) int64, start, end int64) map[string]map[int]int {
	out := map[string]map[int]int{}
	batched := false
	seen := map[uint64]bool{}
	for _, j := range jobs {
		if s := mono(j.Start); s < start || s >= end || seen[j.Execution] {
			continue
		}
		seen[j.Execution] = true
		if out[j.Model] == nil {
			out[j.Model] = map[int]int{}
		}
		out[j.Model][max(j.Batch, 1)]++
		batched = batched || j.Batch > 1
	}
	if !batched {
		return nil
	}
	return out
}

// executions keeps one job of every execution on the timeline (jobs ordered by
// slot and start), the one queued first: the requests of a batch share one
// execution, one start and one end, and the slot ran it once; the oldest of
// them is the one the batch formed around.
func executions(jobs []mockbackend.Job) []mockbackend.Job {
	out := make([]mockbackend.Job, 0, len(jobs))
	type key struct {
		accel string
		x     uint64
	}
	at := map[key]int{} // execution (numbered per accelerator) → its index in out
	for _, j := range jobs {
		if k, ok := at[key{j.Accelerator, j.Execution}]; ok && j.Execution != 0 {
			if j.Queued.Before(out[k].Queued) {
				out[k] = j
			}
			continue
		}
		at[key{j.Accelerator, j.Execution}] = len(out)
		out = append(out, j)
	}
	return out
}
