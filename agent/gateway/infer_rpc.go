package gateway

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/wire"
)

var errEOF = io.EOF

// infer handles ModelInfer: read the header, ask the scheduler, forward.
func (g *Gateway) infer(ss grpc.ServerStream, m *metrics.Method) error {
	var req, resp wire.Frame
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	m.Received(req.Len())
	if g.opts.Backend != nil {
		return g.inferCall(ss, &req, m)
	}
	h := g.headers.Get().(*wire.InferHeader)
	defer g.headers.Put(h)
	if err := g.prepare(ss.Context(), h, &req); err != nil {
		req.Free()
		return err
	}
	done, err := g.admit(ss, h)
	if err != nil {
		req.Free()
		return err
	}
	err = g.invoke(ss, methodInfer, &req, &resp, m)
	done(err)
	return err
}

// inferCall runs a request through Submit and sends its answer (interim: the
// inline pipeline replaces it).
func (g *Gateway) inferCall(ss grpc.ServerStream, req *wire.Frame, m *metrics.Method) error {
	c := g.NewCall()
	if err := g.prepare(ss.Context(), &c.Header, req); err != nil {
		req.Free()
		c.release()
		return err
	}
	c.Msg = req.Take()
	w := &waitReply{ch: make(chan struct{})}
	c.Replier = w
	g.Submit(c)
	select {
	case <-w.ch:
	case <-ss.Context().Done():
		w.cancel(g, c)
		<-w.ch
	}
	if w.err != nil {
		return w.err
	}
	var resp wire.Frame
	resp.Set(w.resp)
	n := resp.Len()
	if err := ss.SendMsg(&resp); err != nil {
		resp.Free()
		return err
	}
	m.Sent(n)
	return nil
}

type waitReply struct {
	ch      chan struct{}
	mu      sync.Mutex // orders Cancel before the answer, or the answer before Cancel
	replied bool
	resp    mem.BufferSlice
	err     error
}

func (w *waitReply) Reply(_ *Call, resp mem.BufferSlice, err error) {
	w.mu.Lock()
	w.replied = true
	w.resp, w.err = resp, err
	w.mu.Unlock()
	close(w.ch)
}

// cancel cancels c unless it has been answered: once Reply has run, the gateway
// releases c, and Cancel would touch a Call that is no longer this request's.
func (w *waitReply) cancel(g *Gateway, c *Call) {
	w.mu.Lock()
	if !w.replied {
		g.Cancel(c)
	}
	w.mu.Unlock()
}

// prepare parses a ModelInfer request and removes vig's parameters from it.
func (g *Gateway) prepare(ctx context.Context, h *wire.InferHeader, req *wire.Frame) error {
	if err := h.ParseInfer(req.Buffers()); err != nil {
		return status.Errorf(codes.InvalidArgument, "ModelInfer: %v", err)
	}
	if h.Shm {
		if err := g.checkShm(ctx, h); err != nil {
			return err
		}
	}
	if h.HasVigParams() {
		// The header's views stay valid: they point into buffers the stripped
		// message still references.
		stripped := h.StripVig(req.Buffers())
		req.Set(stripped)
	}
	return nil
}

func (g *Gateway) admit(ss grpc.ServerStream, h *wire.InferHeader) (func(error), error) {
	if g.opts.Admit == nil {
		return func(error) {}, nil
	}
	return g.opts.Admit.Admit(ss.Context(), h)
}

// streamInfer handles ModelStreamInfer. Each request is forwarded as its own
// ModelInfer call (so that each can be scheduled) on its own goroutine; answers are
// written back in completion order, as Triton does.
func (g *Gateway) streamInfer(ss grpc.ServerStream, m *metrics.Method) error {
	var (
		sendMu  sync.Mutex
		sendErr error
		wg      sync.WaitGroup
	)
	send := func(f *wire.Frame) {
		sendMu.Lock()
		defer sendMu.Unlock()
		n := f.Len()
		if sendErr != nil {
			f.Free()
			return
		}
		if sendErr = ss.SendMsg(f); sendErr != nil {
			f.Free()
			return
		}
		m.Sent(n)
	}
	defer wg.Wait()
	for {
		var req wire.Frame
		if err := ss.RecvMsg(&req); err != nil {
			wg.Wait()
			if err == errEOF {
				return nil
			}
			return err
		}
		m.Received(req.Len())
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out wire.Frame
			g.streamOne(ss, &req, &out)
			send(&out)
		}()
	}
}

// streamOne runs one request of a stream and leaves the ModelStreamInferResponse
// to send in out.
func (g *Gateway) streamOne(ss grpc.ServerStream, req, out *wire.Frame) {
	if g.opts.Backend != nil {
		g.streamCall(ss, req, out)
		return
	}
	h := g.headers.Get().(*wire.InferHeader)
	defer g.headers.Put(h)
	if err := g.prepare(ss.Context(), h, req); err != nil {
		req.Free()
		out.Set(streamError(nil, err))
		return
	}
	id := append([]byte(nil), h.ID...) // the header is reused once req is consumed
	done, err := g.admit(ss, h)
	if err != nil {
		req.Free()
		out.Set(streamError(id, err))
		return
	}
	var resp wire.Frame
	err = g.backend.Invoke(outgoing(ss.Context()), methodInfer, req, &resp)
	req.Free()
	done(err)
	if err != nil {
		resp.Free()
		out.Set(streamError(id, backendError(err)))
		return
	}
	// ModelStreamInferResponse{infer_response = 2: <the backend's bytes>}, spliced.
	prefix := protowire.AppendVarint(protowire.AppendTag(make([]byte, 0, 12), 2, protowire.BytesType), uint64(resp.Len()))
	buf := append(mem.BufferSlice{mem.SliceBuffer(prefix)}, resp.Take()...)
	out.Set(buf)
}

// streamCall is streamOne through Submit, for Options.Backend (interim: the inline
// pipeline replaces it).
func (g *Gateway) streamCall(ss grpc.ServerStream, req, out *wire.Frame) {
	c := g.NewCall()
	if err := g.prepare(ss.Context(), &c.Header, req); err != nil {
		req.Free()
		c.release()
		out.Set(streamError(nil, err))
		return
	}
	id := append([]byte(nil), c.Header.ID...) // the header is reused once the call is answered
	c.Msg = req.Take()
	w := &waitReply{ch: make(chan struct{})}
	c.Replier = w
	g.Submit(c)
	select {
	case <-w.ch:
	case <-ss.Context().Done():
		w.cancel(g, c)
		<-w.ch
	}
	if w.err != nil {
		out.Set(streamError(id, w.err))
		return
	}
	// ModelStreamInferResponse{infer_response = 2: <the backend's bytes>}, spliced.
	prefix := protowire.AppendVarint(protowire.AppendTag(make([]byte, 0, 12), 2, protowire.BytesType), uint64(w.resp.Len()))
	out.Set(append(mem.BufferSlice{mem.SliceBuffer(prefix)}, w.resp...))
}

// streamError encodes ModelStreamInferResponse{error_message, infer_response{id}}:
// a stream cannot carry a status per request, so Triton reports errors in-band.
func streamError(id []byte, err error) mem.BufferSlice {
	msg := status.Convert(err).Message()
	if c := status.Code(err); c != codes.Unknown {
		msg = c.String() + ": " + msg
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, msg)
	if len(id) > 0 {
		inner := protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), string(id))
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, inner)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}
}
