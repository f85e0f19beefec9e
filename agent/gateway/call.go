package gateway

import (
	"context"
	"sync"

	"google.golang.org/grpc/mem"

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

	gw     *Gateway
	token  uint64 // the scheduler's id of the request; 0 when ungoverned
	done   func(error)
	cancel func()
}

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
	// Abort tells the backend that the client of a started call has left. The
	// backend stops the call if it can; c.Finish still follows, exactly once.
	Abort(c *Call)
	// Close ends every session; started calls finish with UNAVAILABLE.
	Close() error
}

// Finish is how a Backend answers a started call: resp is the ModelInferResponse
// (the Call takes ownership), or err a gRPC status. It must be called exactly once
// per Start.
func (c *Call) Finish(resp mem.BufferSlice, err error) { c.gw.finish(c, resp, err) }

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
	return c
}

// release frees what the call still holds and returns it to the pool.
func (c *Call) release() {
	c.Msg.Free()
	meta := c.Meta[:0]
	*c = Call{Header: c.Header, Meta: meta}
	callPool.Put(c)
}

// Submit runs c through the scheduler to the backend and answers it exactly once
// through c.Replier.
//
// Interim implementation over the gRPC-go pipeline (a goroutine per call); the
// inline pipeline replaces it.
func (g *Gateway) Submit(c *Call) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		done, err := g.admit0(ctx, &c.Header)
		if err != nil {
			g.reply(c, nil, err)
			return
		}
		c.done = done
		if g.opts.Backend != nil {
			g.opts.Backend.Start(c)
			return
		}
		msg, err := c.Message()
		if err != nil {
			c.Finish(nil, err)
			return
		}
		c.Msg = nil
		req := new(wire.Frame)
		req.Set(msg)
		var resp wire.Frame
		err = g.backend.Invoke(ctx, methodInfer, req, &resp)
		req.Free()
		c.Finish(resp.Take(), backendErr(err))
	}()
}

// Cancel tells the gateway that the client of a submitted call has left. The call
// is still answered exactly once (its Replier may ignore the answer).
func (g *Gateway) Cancel(c *Call) {
	if c.cancel != nil {
		c.cancel()
	}
	if g.opts.Backend != nil {
		g.opts.Backend.Abort(c)
	}
}

func backendErr(err error) error {
	if err == nil {
		return nil
	}
	return backendError(err)
}

func (g *Gateway) admit0(ctx context.Context, h *wire.InferHeader) (func(error), error) {
	if g.opts.Admit == nil {
		return func(error) {}, nil
	}
	return g.opts.Admit.Admit(ctx, h)
}

func (g *Gateway) finish(c *Call, resp mem.BufferSlice, err error) {
	if c.done != nil {
		c.done(err)
	}
	g.reply(c, resp, err)
}

func (g *Gateway) reply(c *Call, resp mem.BufferSlice, err error) {
	if c.cancel != nil {
		c.cancel()
	}
	c.Replier.Reply(c, resp, err)
	c.release()
}
