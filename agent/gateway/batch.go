package gateway

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/wire"
)

// The batch call: the frames of several streams of one model sent to the
// backend as one request (doc.go, Batching).
//
// The scheduler decides which waiting requests form a batch (its Dispatches
// come together, the lead's first, each with Action.Batch). collect groups
// them, under the governor's lock, into a batchRun with a Call of its own
// (from NewCall: the merged request, the lead's metadata, the earliest
// client deadline); carry merges the members' messages and starts that call
// like any other, so vig's expiry covers it. Its answer is split into one
// answer per member; the scheduler's Complete runs once, for the lead, which
// finishes every member; then each member's client gets its own answer, or
// the batch's error. A member whose client left stays in the batch (its row
// is already on the backend) and is answered CANCELLED; the batch call is
// aborted only when every member left.

// Why a frame of a batching model runs alone, besides wire's Alone* reasons.
const (
	aloneStreamed = "streamed"       // forwarded as it arrives (cutthrough.go)
	aloneRing     = "ring"           // a ring frame offered by reference
	aloneOverMax  = "over_max_batch" // more rows than the model's max_batch
)

// batchRun is one batch on its way through the backend. Its members and left
// count are guarded by the governor's lock until the batch finishes.
type batchRun struct {
	call    *Call   // the request sent to the backend
	members []*Call // lead first
	left    int     // members whose client left
	parts   []wire.BatchPart
	outs    []mem.BufferSlice
	gone    []bool // per member: its client left (read at completion)
}

var (
	batchPool   = sync.Pool{New: func() any { return new(batchRun) }}
	batcherPool = sync.Pool{New: func() any { return new(wire.Batcher) }}
)

// batchKey fills the request's batch key and rows when its model batches; a
// frame that cannot join is counted by why.
//
// A ring frame (no message until a gRPC backend asks for one) joins by
// building its message now rather than at dispatch: for a sealed region its
// tensor bytes stay views of the client's mapping, for an unsealed one the
// copy a gRPC backend makes anyway happens earlier. A ring frame offered by
// reference (its header has no raw tensors) runs alone.
func (g *Governor) batchKey(c *Call, req *sched.Request) {
	p := g.maxBatch[req.Model]
	if p == nil || p.Load() <= 1 {
		return
	}
	mb := int(p.Load())
	why := g.joinable(c, mb)
	if why == "" {
		key, rows, w := wire.BatchKey(&c.Header, c.Msg)
		if w == "" && rows > mb {
			w = aloneOverMax
		}
		if w == "" {
			req.BatchKey, req.Rows = key, rows
			return
		}
		why = w
	}
	if g.obs != nil {
		g.obs.Alone(req.Model, why)
	}
}

// logicalModel reports whether model is a logical one (variants).
func (g *Gateway) logicalModel(model []byte) bool {
	return g.gov != nil && g.gov.logical[string(model)]
}

// batching reports whether vig merges the frames of model into batches.
func (g *Gateway) batching(model []byte) bool {
	if g.gov == nil {
		return false
	}
	p := g.gov.maxBatch[string(model)]
	return p != nil && p.Load() > 1
}

// joinable says why c cannot join a batch before its message is read ("":
// it may, and c.Msg is its message).
func (g *Governor) joinable(c *Call, mb int) string {
	h := &c.Header
	switch {
	case c.body != nil:
		return aloneStreamed
	case c.Msg != nil:
		return ""
	case c.Build == nil || h.RawInputs == 0:
		return aloneRing
	case len(h.Inputs) > 0 && len(h.Inputs[0].Shape) > 0 && h.Inputs[0].Shape[0] > int64(mb):
		return aloneOverMax // not worth building the message for
	}
	if _, err := c.Message(); err != nil {
		return aloneRing // the build fails again at dispatch, and says why
	}
	return ""
}

// group attaches a Dispatch of a batch to its batchRun and reports whether
// it is the lead's (the one decision carried out for the batch). Called with
// the governor's lock held.
func (g *Governor) group(c *Call, a sched.Action) (lead bool) {
	if g.gw == nil {
		return true // no gateway to form it (tests driving Admit alone)
	}
	if a.Token == a.Batch {
		b := batchPool.Get().(*batchRun)
		b.call = g.gw.NewCall()
		b.call.Tag, b.call.Replier, b.call.phase = b, batchReplier{}, phaseRunning
		b.members = append(b.members[:0], c)
		c.batch = b
		return true
	}
	l := g.calls[a.Batch]
	if l == nil || l.batch == nil || l.batch.members[0] != l {
		// Not the scheduler's way; run it alone rather than lose it.
		return true
	}
	c.batch = l.batch
	c.batch.members = append(c.batch.members, c)
	return false
}

// startBatch merges a batch's members and starts its call.
func (g *Gateway) startBatch(b *batchRun) {
	bc := b.call
	g.gov.mu.Lock()
	all := b.left == len(b.members)
	g.gov.mu.Unlock()
	if all { // every client left before it was sent
		g.reply(bc, nil, errCancelledRunning)
		return
	}
	b.parts = b.parts[:0]
	for _, m := range b.members {
		b.parts = append(b.parts, wire.BatchPart{H: &m.Header, Msg: m.Msg})
	}
	bt := batcherPool.Get().(*wire.Batcher)
	msg, err := bt.Merge(b.parts, mem.DefaultBufferPool())
	batcherPool.Put(bt)
	if err == nil {
		bc.Msg = msg
		err = bc.Header.ParseInfer(msg)
	}
	if err != nil {
		g.reply(bc, nil, status.Errorf(codes.Internal, "vig: forming the batch: %v", err))
		return
	}
	lead := b.members[0]
	bc.Meta = append(bc.Meta[:0], lead.Meta...)
	bc.rename = lead.rename // the members' messages name the model they were sent for
	bc.hand.deadline, bc.hand.class = sched.Never, sched.BestEffort
	for _, m := range b.members {
		if m.Deadline != 0 && (bc.Deadline == 0 || m.Deadline < bc.Deadline) {
			bc.Deadline = m.Deadline
		}
		bc.hand.deadline, bc.hand.class = min(bc.hand.deadline, m.hand.deadline), min(bc.hand.class, m.hand.class)
	}
	g.start(bc)
}

var errCancelledRunning = status.Error(codes.Canceled, "vig: the client left while its batch ran")

// batchReplier receives the batch call's answer.
type batchReplier struct{}

func (batchReplier) Reply(bc *Call, resp mem.BufferSlice, err error) {
	bc.gw.finishBatch(bc.Tag.(*batchRun), bc, resp, err)
}

// finishBatch splits the batch's answer, completes the batch in the
// scheduler once, and answers every member exactly once.
func (g *Gateway) finishBatch(b *batchRun, bc *Call, resp mem.BufferSlice, err error) {
	n := len(b.members)
	b.outs = b.outs[:0]
	for range n {
		b.outs = append(b.outs, nil)
	}
	if err == nil {
		bt := batcherPool.Get().(*wire.Batcher)
		if serr := bt.Split(resp, b.parts, mem.DefaultBufferPool(), b.outs); serr != nil {
			err = status.Errorf(codes.Internal, "vig: %v", serr)
		}
		batcherPool.Put(bt)
	}
	resp.Free() // the answers hold their own references
	g.gov.completeBatch(b, err)
	for i, m := range b.members {
		m.RespMeta = append(m.RespMeta[:0], bc.RespMeta...)
		m.TrailMeta = append(m.TrailMeta[:0], bc.TrailMeta...)
		switch {
		case b.gone[i]:
			b.outs[i].Free()
			g.reply(m, nil, errCancelledRunning)
		case err != nil:
			g.reply(m, nil, err)
		default:
			g.reply(m, b.outs[i], nil)
		}
	}
	clear(b.members)
	clear(b.parts)
	clear(b.outs)
	*b = batchRun{members: b.members[:0], parts: b.parts[:0], outs: b.outs[:0], gone: b.gone[:0]}
	batchPool.Put(b)
}

// completeBatch reports a batch's end to the scheduler: Complete of its
// lead, once, finishes every member.
func (g *Governor) completeBatch(b *batchRun, err error) {
	var buf [4]decision
	g.mu.Lock()
	now := g.clock()
	g.acts = g.acts[:0]
	cancelled := status.Code(err) == codes.Canceled
	b.gone = b.gone[:0]
	for _, m := range b.members {
		b.gone = append(b.gone, m.left)
		delete(g.calls, m.token)
		m.phase = phaseDone
		switch {
		case m.left:
		case err == nil && g.obs != nil:
			capture := m.capture
			if capture == 0 {
				capture = m.arrival
			}
			g.obs.Finished(m.stream, m.started.Sub(m.arrival), now.Sub(m.arrival), now.Sub(capture))
		case cancelled:
			// Stopped at the backend: counted cancelled, as a lone call.
			g.acts = g.s.Cancel(now, m.token, g.acts)
		}
	}
	if b.call.hand.late {
		g.acts = g.s.CompleteLate(now, b.members[0].token, g.acts)
	} else {
		g.acts = g.s.Complete(now, b.members[0].token, err == nil, g.acts)
	}
	ds := g.collect(now, buf[:0])
	g.mu.Unlock()
	g.carryTo(ds)
	if g.onComplete != nil {
		g.onComplete()
	}
}

// leave marks a running batch member whose client left; it returns the batch
// call when every member has left (to abort it at the backend). Called with
// the governor's lock held.
func (g *Governor) leave(now sched.Time, c *Call) *Call {
	b := c.batch
	if c.left {
		return nil
	}
	c.left = true
	b.left++
	g.acts = g.s.Cancel(now, c.token, g.acts[:0])
	if b.left == len(b.members) {
		return b.call
	}
	return nil
}
