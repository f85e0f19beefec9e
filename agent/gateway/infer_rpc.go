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
	if g.opts.Infer != nil {
		err = g.inferOther(ss, h, &req, m)
	} else {
		err = g.invoke(ss, methodInfer, &req, &resp, m)
	}
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
		g.Cancel(c)
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
	ch   chan struct{}
	resp mem.BufferSlice
	err  error
}

func (w *waitReply) Reply(_ *Call, resp mem.BufferSlice, err error) {
	w.resp, w.err = resp, err
	close(w.ch)
}

// inferOther runs a request on Options.Infer and sends its answer.
func (g *Gateway) inferOther(ss grpc.ServerStream, h *wire.InferHeader, req *wire.Frame, m *metrics.Method) error {
	out, err := g.opts.Infer.Infer(ss.Context(), h, req.Buffers())
	req.Free()
	if err != nil {
		return err
	}
	var resp wire.Frame
	resp.Set(out)
	n := resp.Len()
	if err := ss.SendMsg(&resp); err != nil {
		resp.Free()
		return err
	}
	m.Sent(n)
	return nil
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
	if g.opts.Infer != nil {
		var out mem.BufferSlice
		out, err = g.opts.Infer.Infer(ss.Context(), h, req.Buffers())
		resp.Set(out)
	} else {
		err = g.backend.Invoke(outgoing(ss.Context()), methodInfer, req, &resp)
	}
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
