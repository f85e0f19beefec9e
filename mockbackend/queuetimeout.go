package mockbackend

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// Queue timeouts, as Triton's dynamic batcher applies them: a model whose
// dynamic batcher (Model.Batcher, else Model.Queue) has a default queue
// policy takes a request's `timeout` (µs)
// where the policy allows it (allow_timeout_override) and it is below the
// default timeout, else the default; a request still queued when its timeout
// passes is answered UNAVAILABLE "Request timeout expired" (timeout_action
// REJECT; DELAY runs it anyway). This is Triton's
// PriorityQueue::PolicyQueue::Enqueue and its rejection in
// dynamic_batch_scheduler.cc. Model.Queue gives a model the policy without
// merging its requests (Batcher does both).

// timeoutMsg is Triton's message for a request rejected at its timeout.
const timeoutMsg = "Request timeout expired"

// QueueRecord is one request of a model with a queue policy, as the mock
// served it.
type QueueRecord struct {
	ID      string
	Arrival time.Time     // when it joined the queue
	Start   time.Time     // when it started on a slot (zero if it never did)
	Timeout time.Duration // its effective timeout (0: none)
	// Expired: answered UNAVAILABLE at its timeout. Late: started after
	// Arrival + Timeout, which the policy exists to prevent.
	Expired, Late bool
	// Asked is the request's own timeout parameter, whether or not the
	// policy honoured it (0: none).
	Asked time.Duration
}

// maxQueueRecords bounds the records kept (a long-running mock-backend).
const maxQueueRecords = 1 << 20

type queueLog struct {
	mu   sync.Mutex
	recs []QueueRecord
}

// QueueRecords returns a copy of the records of every model with a queue
// policy, in completion order.
func (s *Server) QueueRecords() []QueueRecord {
	s.qlog.mu.Lock()
	defer s.qlog.mu.Unlock()
	return append([]QueueRecord(nil), s.qlog.recs...)
}

func (s *Server) record(r QueueRecord) {
	s.qlog.mu.Lock()
	defer s.qlog.mu.Unlock()
	if len(s.qlog.recs) < maxQueueRecords {
		s.qlog.recs = append(s.qlog.recs, r)
	}
}

// requestTimeout reads a request's timeout parameter (int64 µs), 0 if none.
func requestTimeout(req *inference.ModelInferRequest) time.Duration {
	if p, ok := req.Parameters["timeout"]; ok {
		if v, ok := p.GetParameterChoice().(*inference.InferParameter_Int64Param); ok && v.Int64Param > 0 {
			return time.Duration(v.Int64Param) * time.Microsecond
		}
	}
	return 0
}

// effectiveTimeout is the timeout Triton's queue policy gives a request.
func effectiveTimeout(p *wire.QueuePolicy, asked time.Duration) time.Duration {
	if p == nil {
		return 0
	}
	t := time.Duration(p.DefaultTimeoutMicroseconds) * time.Microsecond
	if p.AllowTimeoutOverride && asked != 0 && asked < t {
		t = asked
	}
	return t
}

// queuePolicy is the queue policy of the model's dynamic batcher, nil
// without one.
func (m *model) queuePolicy() *wire.QueuePolicy {
	if m.Batcher != nil && m.Batcher.DefaultQueuePolicy != nil {
		return m.Batcher.DefaultQueuePolicy
	}
	if m.Queue != nil {
		return m.Queue.DefaultQueuePolicy
	}
	return nil
}

// acquire waits for a slot for req as the model's queue policy says; the
// error is a gRPC status.
func (s *Server) acquire(ctx context.Context, m *model, req *inference.ModelInferRequest, queued time.Time, wk work) (grant, error) {
	policy := m.queuePolicy()
	if m.Queue == nil && m.Batcher == nil {
		g, err := m.pool.acquireWork(ctx, queued, wk)
		if err != nil {
			err = status.FromContextError(err).Err()
		}
		return g, err
	}
	rec := QueueRecord{ID: req.Id, Arrival: queued, Asked: requestTimeout(req)}
	rec.Timeout = effectiveTimeout(policy, rec.Asked)
	qctx := ctx
	reject := rec.Timeout > 0 && policy.TimeoutAction == wire.TimeoutReject
	deadline := queued.Add(rec.Timeout)
	if reject {
		var cancel context.CancelFunc
		qctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	g, err := m.pool.acquireWork(qctx, queued, wk)
	if err != nil {
		if reject && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			rec.Expired = true
			s.record(rec)
			return g, status.Error(codes.Unavailable, timeoutMsg)
		}
		s.record(rec)
		return g, status.FromContextError(err).Err()
	}
	if reject && g.start.After(deadline) && g.exec.requests == 1 {
		// Granted a start on the slot's timeline past its timeout (the timer
		// fired late): Triton finds it expired when it reaches it.
		if g.leader {
			m.pool.release(g.slot, g.start) // it never ran: the timeline is unchanged
		}
		rec.Expired = true
		s.record(rec)
		return grant{}, status.Error(codes.Unavailable, timeoutMsg)
	}
	rec.Start = g.start
	rec.Late = rec.Timeout > 0 && g.start.After(deadline)
	s.record(rec)
	return g, nil
}

// withTritonRules adds to a model's reported configuration its queue policy
// and priority levels (Model.Queue, where its batcher gives none) and its
// sequence batcher.
func (m *model) withTritonRules(c *wire.ModelConfig) *wire.ModelConfig {
	if q := m.Queue; q != nil {
		if c.DynamicBatching == nil {
			c.DynamicBatching = &wire.DynamicBatching{}
		}
		if c.DynamicBatching.DefaultQueuePolicy == nil {
			c.DynamicBatching.DefaultQueuePolicy = q.DefaultQueuePolicy
		}
		if c.DynamicBatching.PriorityLevels == 0 {
			c.DynamicBatching.PriorityLevels = q.PriorityLevels
		}
	}
	c.SequenceBatching = m.seq != nil
	return c
}
