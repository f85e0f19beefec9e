// Package frontend is the ring frontend of vig serve: requests that co-located
// sensor processes post on their shared-memory rings go through the same freshness
// scheduler as gRPC requests and on to the backend, and the results come back on the
// clients' response rings.
//
// A frame on a sealed (memfd) ring is never copied by vig: the ModelInfer message to
// the backend is assembled from a small header vig encodes and a view of the frame in
// the client's mapping, which gRPC writes straight to the backend connection. A frame
// on an unsealed /dev/shm ring is copied once under the fault guard first, because
// the client could truncate the file while gRPC reads it.
package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/gateway"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
)

// Admitter is the scheduler's entry for frames (gateway.Governor.AdmitFrame).
type Admitter interface {
	AdmitFrame(ctx context.Context, stream, model string, captureNs int64) (func(error), error)
}

// Frontend serves ring clients.
type Frontend struct {
	ln      *shmring.Listener
	admit   Admitter
	backend *grpc.ClientConn
	infer   gateway.InferBackend
	log     *slog.Logger
	codec   grpc.CallOption

	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[*shmring.Conn]struct{}
	closed bool
}

// New serves the clients of ln: admitted by admit (nil: forward at once), forwarded
// on infer when it is set (a ring backend), else on backend (the gateway's backend
// connection).
func New(ln *shmring.Listener, admit Admitter, backend *grpc.ClientConn, infer gateway.InferBackend, log *slog.Logger) *Frontend {
	if log == nil {
		log = slog.Default()
	}
	return &Frontend{ln: ln, admit: admit, backend: backend, infer: infer, log: log,
		codec: grpc.ForceCodecV2(wire.RawCodec()), conns: map[*shmring.Conn]struct{}{}}
}

// Serve accepts clients until the listener is closed.
func (f *Frontend) Serve() error {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			f.mu.Lock()
			closed := f.closed
			f.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			c.Close()
			return nil
		}
		f.conns[c] = struct{}{}
		f.wg.Add(1)
		f.mu.Unlock()
		p := c.Peer()
		f.log.Info("ring client connected", "pid", p.PID, "uid", p.UID, "sealed", c.Sealed())
		go f.serveConn(c)
	}
}

// Close stops accepting and waits until every request already received has been
// answered; then it ends the sessions.
func (f *Frontend) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close() // Recv returns; requests in flight still answer (Respond fails harmlessly)
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *Frontend) serveConn(c *shmring.Conn) {
	defer f.wg.Done()
	defer func() {
		c.Close()
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
	}()
	if err := c.Serve(context.Background(), func(ctx context.Context, req *shmring.Request) { f.handle(ctx, c, req) }); err != nil {
		f.log.Warn("ring client dropped", "pid", c.Peer().PID, "err", err)
	}
}

// handle runs one ring request and answers it exactly once.
func (f *Frontend) handle(ctx context.Context, c *shmring.Conn, req *shmring.Request) {
	out, err := f.run(ctx, c, req)
	res := shmring.Response{Status: shmring.StatusOK, Payload: out}
	if err != nil {
		st := status.Convert(err)
		res = shmring.Response{Status: shmring.Status(st.Code()), Message: st.Message()}
	}
	if err := c.Respond(req, &res); err != nil && !errors.Is(err, shmring.ErrClosed) {
		f.log.Warn("ring response dropped", "pid", c.Peer().PID, "stream", req.Stream, "err", err)
	}
}

func (f *Frontend) run(ctx context.Context, c *shmring.Conn, req *shmring.Request) ([]byte, error) {
	done := func(error) {}
	if f.admit != nil {
		var err error
		if done, err = f.admit.AdmitFrame(ctx, req.Stream, req.Model, req.CaptureNs); err != nil {
			return nil, err
		}
	}
	msg, err := encodeInfer(c, req)
	if err != nil {
		done(err)
		return nil, err
	}
	var b []byte
	if f.infer != nil {
		var h wire.InferHeader
		if err = h.ParseInfer(msg); err == nil {
			var out mem.BufferSlice
			if out, err = f.infer.Infer(ctx, &h, msg); err == nil {
				b = out.Materialize()
				out.Free()
			}
		}
	} else {
		var resp wire.Frame
		if err = f.backend.Invoke(ctx, "/"+wire.Service+"/ModelInfer", rawMessage(msg), &resp, f.codec); err == nil {
			b = resp.Bytes()
		}
		resp.Free()
	}
	done(err)
	if err != nil {
		return nil, err
	}
	var r pb.ModelInferResponse
	if err := proto.Unmarshal(b, &r); err != nil {
		return nil, status.Errorf(codes.Internal, "backend answer: %v", err)
	}
	if len(r.RawOutputContents) == 0 {
		return nil, nil
	}
	return r.RawOutputContents[0], nil
}

// rawMessage is a ModelInfer message as buffers; gateway's codec sends *Frame only,
// so it is wrapped into one.
func rawMessage(b mem.BufferSlice) *wire.Frame {
	var f wire.Frame
	f.Set(b)
	return &f
}

// encodeInfer builds a ModelInferRequest for a ring request: the header is encoded
// here, the tensor bytes are views of the client's frame (sealed regions) or one
// guarded copy (unsealed regions).
func encodeInfer(c *shmring.Conn, req *shmring.Request) (mem.BufferSlice, error) {
	payload := req.Payload()
	if !c.Sealed() {
		buf := make([]byte, len(payload))
		n, err := req.CopyPayload(buf)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "ring region faulted: %v", err)
		}
		payload = buf[:n]
	}
	tensors := req.Tensors[:req.NumTensors]
	if len(tensors) == 0 {
		tensors = []shmring.Tensor{{Name: "INPUT0", Datatype: "UINT8", Rank: 1, Dims: [shmring.MaxRank]int64{int64(len(payload))}, Length: uint64(len(payload))}}
	}
	h := protowire.AppendTag(nil, 1, protowire.BytesType)
	h = protowire.AppendString(h, req.Model)
	h = protowire.AppendTag(h, 3, protowire.BytesType)
	h = protowire.AppendString(h, fmt.Sprintf("%s#%d", req.Stream, req.Frame))
	for _, t := range tensors {
		var in []byte
		in = protowire.AppendTag(in, 1, protowire.BytesType)
		in = protowire.AppendString(in, t.Name)
		in = protowire.AppendTag(in, 2, protowire.BytesType)
		in = protowire.AppendString(in, t.Datatype)
		var shape []byte
		for _, d := range t.Dims[:t.Rank] {
			shape = protowire.AppendVarint(shape, uint64(d))
		}
		in = protowire.AppendTag(in, 3, protowire.BytesType)
		in = protowire.AppendBytes(in, shape)
		h = protowire.AppendTag(h, 5, protowire.BytesType)
		h = protowire.AppendBytes(h, in)
	}
	out := mem.BufferSlice{mem.SliceBuffer(h)}
	for _, t := range tensors {
		if t.Offset > uint64(len(payload)) || t.Length > uint64(len(payload))-t.Offset {
			return nil, status.Errorf(codes.InvalidArgument, "tensor %q: %d bytes at %d exceed the %d-byte frame", t.Name, t.Length, t.Offset, len(payload))
		}
		pre := protowire.AppendTag(nil, 7, protowire.BytesType)
		pre = protowire.AppendVarint(pre, t.Length)
		out = append(out, mem.SliceBuffer(pre))
		if t.Length > 0 {
			out = append(out, mem.SliceBuffer(payload[t.Offset:t.Offset+t.Length]))
		}
	}
	return out, nil
}
