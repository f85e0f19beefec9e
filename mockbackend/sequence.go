package mockbackend

import (
	"context"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/proto/inference"
)

// SequenceBatching puts a model behind an emulation of Triton's sequence
// batcher (its direct strategy), enough to hold a client to its rules: a
// request names its sequence (sequence_id, int64, uint64 or string), the first
// request of a sequence carries sequence_start, the last sequence_end. A
// sequence holds one of Slots sequence slots from its START until its END, or
// until no request of it came for MaxIdle (max_sequence_idle_microseconds);
// a START that finds every slot taken waits for one, as in Triton's backlog.
// A request of an unknown sequence without START is refused INVALID_ARGUMENT
// with Triton's message. The mock records, per sequence, the requests in the
// order it received them (Server.Sequences).
type SequenceBatching struct {
	// MaxIdle frees an idle sequence's slot; 0: Triton's default, 1 s.
	MaxIdle time.Duration
	// Slots is how many sequences hold a slot at once; 0: 1.
	Slots int
}

// SeqFrame is one request of a sequence as the mock's sequence batcher
// received it.
type SeqFrame struct {
	ID         string // the request's id
	Start, End bool
	// Overlap: another request of the sequence was still running when it
	// came (its frames were not one at a time).
	Overlap bool
}

// SequenceLog is what the sequence batcher of one model saw.
type SequenceLog struct {
	// Frames holds each sequence's requests in arrival order, by sequence id
	// (a string id as given, a numeric one in decimal).
	Frames map[string][]SeqFrame
	// StartMissing counts requests refused for a missing START.
	StartMissing int
	// IdleFreed counts sequences whose slot the idle timeout freed.
	IdleFreed int
}

// seqBatcher is a model's sequence batcher state.
type seqBatcher struct {
	cfg    SequenceBatching
	mu     sync.Mutex
	active map[string]*sequence
	freed  chan struct{} // closed (and replaced) when a slot frees
	log    SequenceLog
}

type sequence struct {
	last    time.Time // the last request's arrival or end
	running int
}

func newSeqBatcher(cfg SequenceBatching) *seqBatcher {
	if cfg.MaxIdle <= 0 {
		cfg.MaxIdle = time.Second
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 1
	}
	return &seqBatcher{cfg: cfg, active: map[string]*sequence{}, freed: make(chan struct{}),
		log: SequenceLog{Frames: map[string][]SeqFrame{}}}
}

// Sequences returns a copy of what model's sequence batcher saw; false when
// the model has none.
func (s *Server) Sequences(model string) (SequenceLog, bool) {
	m := s.models[model]
	if m == nil || m.seq == nil {
		return SequenceLog{}, false
	}
	b := m.seq
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.log
	out.Frames = make(map[string][]SeqFrame, len(b.log.Frames))
	for k, v := range b.log.Frames {
		out.Frames[k] = append([]SeqFrame(nil), v...)
	}
	return out, true
}

// sequenceParams reads a request's sequence parameters as Triton's gRPC
// frontend does.
func sequenceParams(model string, req *inference.ModelInferRequest) (id string, start, end bool, err error) {
	for k, p := range req.Parameters {
		switch k {
		case "sequence_id":
			switch v := p.GetParameterChoice().(type) {
			case *inference.InferParameter_Int64Param:
				if v.Int64Param != 0 {
					id = strconv.FormatInt(v.Int64Param, 10)
				}
			case *inference.InferParameter_Uint64Param:
				if v.Uint64Param != 0 {
					id = strconv.FormatUint(v.Uint64Param, 10)
				}
			case *inference.InferParameter_StringParam:
				id = v.StringParam
			default:
				return "", false, false, status.Errorf(codes.InvalidArgument, "invalid value type for 'sequence_id' parameter, expected int64_param, uint64_param or string_param")
			}
		case "sequence_start", "sequence_end":
			v, ok := p.GetParameterChoice().(*inference.InferParameter_BoolParam)
			if !ok {
				return "", false, false, status.Errorf(codes.InvalidArgument, "invalid value type for '%s' parameter, expected bool_param", k)
			}
			if k == "sequence_start" {
				start = v.BoolParam
			} else {
				end = v.BoolParam
			}
		}
	}
	if id == "" {
		return "", false, false, status.Errorf(codes.InvalidArgument,
			"inference request to model '%s' must specify a non-zero or non-empty correlation ID", model)
	}
	return id, start, end, nil
}

// runInSequence runs a request through the model's sequence batcher, if it
// has one, then as any request.
func (s *Server) runInSequence(ctx context.Context, m *model, req *inference.ModelInferRequest, stream string, frame uint64, arrival time.Time) (*inference.ModelInferResponse, phases, error) {
	b := m.seq
	if b == nil {
		return s.run(ctx, m, req, stream, frame, arrival)
	}
	id, start, end, err := sequenceParams(m.Name, req)
	if err != nil {
		return nil, phases{}, err
	}
	sq, err := b.enter(ctx, m.Name, id, req.Id, start, end)
	if err != nil {
		return nil, phases{}, err
	}
	resp, ph, err := s.run(ctx, m, req, stream, frame, arrival)
	b.leave(id, sq, end)
	return resp, ph, err
}

// enter admits a request of sequence id: it takes a slot for a START (waiting
// for one if need be), refuses a request of an unknown sequence without one,
// and records it.
func (b *seqBatcher) enter(ctx context.Context, model, id, reqID string, start, end bool) (*sequence, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		now := time.Now()
		wake := b.reap(now)
		sq := b.active[id]
		if sq == nil && !start {
			b.log.StartMissing++
			return nil, status.Errorf(codes.InvalidArgument,
				"inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence", id, model)
		}
		if sq == nil && len(b.active) >= b.cfg.Slots {
			freed := b.freed
			b.mu.Unlock()
			t := time.NewTimer(time.Until(wake))
			select {
			case <-freed:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			b.mu.Lock()
			if err := ctx.Err(); err != nil {
				return nil, status.FromContextError(err).Err()
			}
			continue
		}
		if sq == nil {
			sq = &sequence{}
			b.active[id] = sq
		}
		b.log.Frames[id] = append(b.log.Frames[id], SeqFrame{ID: reqID, Start: start, End: end, Overlap: sq.running > 0})
		sq.running++
		sq.last = now
		return sq, nil
	}
}

// leave ends a request of sequence id; its END frees the slot.
func (b *seqBatcher) leave(id string, sq *sequence, end bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sq.running--
	sq.last = time.Now()
	if end && b.active[id] == sq {
		b.free(id)
	}
}

// reap frees the slots of sequences idle for MaxIdle and returns when the
// next may be freed.
func (b *seqBatcher) reap(now time.Time) time.Time {
	next := now.Add(b.cfg.MaxIdle)
	for id, sq := range b.active {
		if sq.running > 0 {
			continue
		}
		at := sq.last.Add(b.cfg.MaxIdle)
		if !now.Before(at) {
			b.log.IdleFreed++
			b.free(id)
			continue
		}
		if at.Before(next) {
			next = at
		}
	}
	return next
}

func (b *seqBatcher) free(id string) {
	delete(b.active, id)
	close(b.freed)
	b.freed = make(chan struct{})
}

// sequencesFromConfig puts the models of backend.sequence_batching behind the
// sequence batcher.
func sequencesFromConfig(models []Model, c *config.Config) {
	for i := range models {
		if sq, ok := c.Backend.SequenceBatching[models[i].Name]; ok {
			models[i].Sequence = &SequenceBatching{MaxIdle: time.Duration(sq.MaxIdleMs) * time.Millisecond, Slots: sq.Slots}
		}
	}
}
