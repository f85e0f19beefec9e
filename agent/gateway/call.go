package gateway

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/wire"
)

// Call is one inference request on its way through vig, whatever frontend it came
// from (gRPC over TCP or a Unix socket, one message of ModelStreamInfer, a ring
// descriptor) and whatever backend runs it (Triton over gRPC, a ring runtime).
//
// Its header is parsed once, by the frontend that received it, and travels with it;
// the scheduler keeps the one record of its timing (arrival, capture, start). A
// frontend takes a Call from NewCall, fills Header (and Msg, the message a gRPC
// backend is sent), sets Replier, and hands it to Submit. From then on the gateway
// owns it: it answers it exactly once through Replier.Reply, after which the Call
// returns to the pool and must not be touched.
type Call struct {
	// Header is what vig read of the request. Its byte slices view Msg (or, for a
	// frontend that builds no message, the frontend's own buffers), so they stay
	// valid until the Call is answered.
	Header wire.InferHeader
	// Msg is the ModelInferRequest a gRPC backend is sent, vig's own parameters
	// removed; the Call owns its buffers. A ring frontend whose backend needs no
	// message may leave it nil and set Build instead.
	Msg mem.BufferSlice
	// Build, when Msg is nil, encodes the message on demand (a gRPC backend asks for
	// it when the call is dispatched, not before).
	Build func(c *Call) (mem.BufferSlice, error)
	// Meta is request metadata to forward to a gRPC backend (name, value pairs;
	// reserved and pseudo headers already removed).
	Meta []string
	// Deadline is the client's deadline on the monotonic clock in nanoseconds
	// (0: none); a gRPC backend is sent the time that remains.
	Deadline int64
	// Replier answers the client. Reply is called exactly once, on whatever
	// goroutine finished the call; it must not block and must not keep c.
	Replier Replier
	// Tag is the frontend's own reference for the call (its stream or ring
	// request), for the Replier's use.
	Tag any
	// Shared, when set, says that the request's input bytes already lie in a
	// sealed memory file (a ring client's memfd): a backend that can map it (a
	// ring runtime) takes them from there instead of copying them. The
	// frontend keeps the bytes unchanged until the call is answered.
	Shared *SharedFrame
	// body, for a request forwarded as it arrives (cutthrough.go): Msg is
	// then only its head, and the rest comes through body.
	body *bodyPipe

	// RespMeta and TrailMeta are the backend's response header and trailer
	// metadata (name, value pairs), set by a gRPC backend before Finish.
	RespMeta, TrailMeta []string

	gw *Gateway
	// run is the backend's own reference for the call while it runs there, 0
	// otherwise: what its Abort looks the call up by (the gRPC backend: its
	// connection and stream id). Opaque to the gateway.
	run  atomic.Uint64
	refs atomic.Int32 // the gateway's reference, plus frontends about to Cancel

	// vig's deadline for the call on the backend (expiry.go).
	expired atomic.Bool // vig gave up on it: the backend is to finish it now
	expAt   int64       // when, on the gateway's clock; guarded by expiry.mu
	expIdx  int32       // its place in the expiry heap + 1, 0 when not there; guarded by expiry.mu

	// Scheduling state, guarded by the Governor's lock.
	token   uint64 // the scheduler's id of the request; 0 when ungoverned
	phase   callPhase
	stream  int        // stream index, from the dispatch decision
	capture sched.Time // as scheduled
	arrival sched.Time
	started sched.Time
	ctx     context.Context    // for a blocking Admitter only
	cancel  context.CancelFunc // for a blocking Admitter only
	done    func(error)        // for a blocking Admitter only
	wake    chan sched.Action  // for Governor.Admit: the decision
	batch   *batchRun          // the batch it runs in (batch.go)
	left    bool               // a batch member whose client left
	hand    handOn             // what vig hands on to the backend (handoff.go)
	// rename is the model_name field of the variant a frame of a logical
	// model runs as (wire.RenameModel); nil otherwise.
	rename mem.Buffer
}

// SharedFrame is where a request's inputs lie in a sealed memory file.
type SharedFrame struct {
	// Region is the file; the same value for every call of one client session.
	Region SharedRegion
	// Off and Len are the payload inside the file; Inputs are the input
	// tensors inside the payload, in the order of Header.Inputs.
	Off, Len uint64
	Inputs   []wire.Span
}

// SharedRegion is a sealed memory file a frontend's client handed over.
type SharedRegion interface {
	// Fd is the file's descriptor, valid while a call naming it is unanswered;
	// a backend that keeps the file dups it (e.g. into another process).
	Fd() int
	Size() uint64
	// Done is closed when the client's session ends: no new call names it.
	Done() <-chan struct{}
}

type callPhase uint8

const (
	phaseNew     callPhase = iota
	phaseWaiting           // in the scheduler's queues
	phaseRunning           // started on the backend
	phaseDone              // answered
)

// Replier answers a Call. resp is a ModelInferResponse whose buffers the replier
// now owns (nil with err); err carries a gRPC status.
type Replier interface {
	Reply(c *Call, resp mem.BufferSlice, err error)
}

// Backend runs inference calls: Triton over gRPC, or a runtime behind a
// shared-memory ring. It is chosen once, when the gateway is built.
type Backend interface {
	// Open starts connecting. state is called on every change of reachability (on
	// any goroutine, never concurrently with itself); the gateway's health status,
	// the scheduler's notion of availability and the metrics all follow it.
	Open(state func(up bool))
	// Start sends c to the backend without waiting for its answer. The backend
	// then calls c.Finish exactly once, on any goroutine, possibly before Start
	// returns (a backend that is down fails the call at once).
	Start(c *Call)
	// Abort tells the backend that the client of a started call has left, or
	// that vig gave up on it (c.Expired). The backend stops the call if it can;
	// c.Finish still follows, exactly once. For an expired call it must follow
	// at once, whatever the backend itself does with the call, and a call that
	// expires while Start is still registering it must be found: a backend
	// checks Expired after it has recorded the call where Abort looks for it.
	Abort(c *Call)
	// Close ends every session; started calls finish with UNAVAILABLE.
	Close() error
}

// Finish is how a Backend answers a started call: resp is the ModelInferResponse
// (the Call takes ownership), or err a gRPC status. It must be called exactly once
// per Start.
func (c *Call) Finish(resp mem.BufferSlice, err error) { c.gw.finish(c, resp, err) }

// Expired reports whether vig gave up on the call on the backend: its deadline,
// or backend.call_timeout_ms, passed without an answer. A backend asked to Abort
// such a call finishes it at once (CANCELLED; the gateway answers the client
// DEADLINE_EXCEEDED).
func (c *Call) Expired() bool { return c.expired.Load() }

// Message returns the message a gRPC backend is sent, building it when the
// frontend deferred that (Build).
func (c *Call) Message() (mem.BufferSlice, error) {
	if c.Msg == nil && c.Build != nil {
		m, err := c.Build(c)
		if err != nil {
			return nil, err
		}
		c.Msg = m
	}
	return c.Msg, nil
}

var callPool = sync.Pool{New: func() any { return new(Call) }}

// NewCall returns an empty Call for a frontend to fill and Submit.
func (g *Gateway) NewCall() *Call {
	c := callPool.Get().(*Call)
	c.gw = g
	c.refs.Store(1)
	return c
}

// Hold keeps c from being recycled after it is answered, for a frontend that found
// it unanswered (under its own lock) and is about to Cancel it; Release ends that.
func (c *Call) Hold()    { c.refs.Add(1) }
func (c *Call) Release() { c.release() }

// release drops a reference; the last frees what the call still holds and returns
// it to the pool, keeping its storage.
func (c *Call) release() {
	if c.refs.Add(-1) > 0 {
		return
	}
	c.Msg.Free()
	if c.body != nil {
		c.body.release()
	}
	*c = Call{Header: c.Header, Meta: c.Meta[:0], RespMeta: c.RespMeta[:0], TrailMeta: c.TrailMeta[:0]}
	callPool.Put(c)
}
