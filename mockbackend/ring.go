package mockbackend

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
)

// ServeRing serves ring clients accepted on ln, as an on-device runtime without
// gRPC would: each request a client posts runs through the same path as a gRPC
// ModelInfer (same slots, execution times, statistics and output), and the answer
// goes back on the client's response ring.
//
// A ring request names its stream and frame explicitly (an empty stream means the
// model's name), so its execution time is ExecTime(seed, stream, frame, base) like a
// gRPC request with the id "stream#frame". Its tensors are the descriptor's tensor
// records; a request with none carries one input INPUT0, UINT8, shape [payload
// length]. The answer is the model's outputs (OUTPUT0: INT64, shape [2],
// [Digest(inputs), frame]; a detector's three) back to back in the response
// payload, with one tensor record each. Errors are answered with the gRPC code
// of the same error as the ring status and its message (truncated to
// shmring.MaxMessageLen bytes). The ring carries no model version: version "" runs.
//
// Frames on sealed (memfd) regions are read in place; frames on unsealed /dev/shm
// regions (accepted when ln's ServerConfig allows them) are copied out under the
// fault guard first, since their owner can truncate them.
//
// ServeRing returns when ln is closed (nil) or fails; either way it then ends every
// session it accepted, and returns once their requests have finished (a job that
// started runs to its end; clients see their sessions close).
func (s *Server) ServeRing(ln *shmring.Listener) error {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[*shmring.Conn]struct{}{}
	)
	var err error
	for {
		c, aerr := ln.Accept()
		if aerr != nil {
			if !errors.Is(aerr, net.ErrClosed) {
				err = aerr
			}
			break
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveRingConn(ctx, c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
	cancel()
	mu.Lock()
	for c := range conns {
		c.Close()
	}
	mu.Unlock()
	wg.Wait()
	return err
}

// serveRingConn receives a client's requests and runs each on its own goroutine
// (the slots bound how many execute); it returns when the session has ended and
// every request has been answered or dropped.
func (s *Server) serveRingConn(ctx context.Context, c *shmring.Conn) {
	defer c.Close()
	err := c.Serve(ctx, func(ctx context.Context, req *shmring.Request) {
		res := s.ringInfer(ctx, c, req)
		if err := c.Respond(req, &res); err != nil && !errors.Is(err, shmring.ErrClosed) {
			slog.Warn("mockbackend: ring response dropped", "pid", c.Peer().PID, "stream", req.Stream, "frame", req.Frame, "err", err)
		}
	})
	if err != nil {
		slog.Warn("mockbackend: ring client dropped", "pid", c.Peer().PID, "err", err)
	}
}

// ringInfer runs one ring request through the gRPC ModelInfer path.
func (s *Server) ringInfer(ctx context.Context, c *shmring.Conn, req *shmring.Request) shmring.Response {
	ir, err := ringRequest(c, req)
	var resp *inference.ModelInferResponse
	if err == nil {
		resp, err = s.infer(ctx, ir)
	}
	if err != nil {
		st := status.Convert(err)
		return shmring.Response{Status: shmring.Status(st.Code()), Message: st.Message()}
	}
	if len(resp.RawOutputContents) != len(resp.Outputs) || len(resp.Outputs) > shmring.MaxTensors {
		return shmring.Response{Status: shmring.StatusInternal, Message: "mockbackend: outputs and raw contents disagree"}
	}
	// The outputs back to back, one tensor record each.
	res := shmring.Response{Status: shmring.StatusOK, NumTensors: len(resp.Outputs)}
	for i, o := range resp.Outputs {
		t := &res.Tensors[i]
		*t = shmring.Tensor{Name: o.Name, Datatype: o.Datatype, Offset: uint64(len(res.Payload)), Length: uint64(len(resp.RawOutputContents[i]))}
		t.Rank = copy(t.Dims[:], o.Shape)
		res.Payload = append(res.Payload, resp.RawOutputContents[i]...)
	}
	return res
}

// ringRequest converts a ring request into the ModelInferRequest it stands for. The
// tensors view the client's frame in place (sealed regions) or one guarded copy of
// it (unsealed regions). A tensor record outside the payload is INVALID_ARGUMENT; a
// region that faulted while being copied is UNAVAILABLE (the client broke its own
// session). Neither reaches the model, so neither is counted in its statistics.
func ringRequest(c *shmring.Conn, req *shmring.Request) (*inference.ModelInferRequest, error) {
	payload := req.Payload()
	if !c.Sealed() && len(payload) > 0 {
		buf := make([]byte, len(payload))
		n, err := req.CopyPayload(buf)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "ring region faulted: %v", err)
		}
		payload = buf[:n]
	}
	stream := req.Stream
	if stream == "" {
		stream = req.Model
	}
	ir := &inference.ModelInferRequest{ModelName: req.Model, Id: FrameID(stream, req.Frame)}
	tensors := req.Tensors[:req.NumTensors]
	if len(tensors) == 0 {
		tensors = []shmring.Tensor{{Name: inputName, Datatype: inputDatatype, Rank: 1,
			Dims: [shmring.MaxRank]int64{int64(len(payload))}, Length: uint64(len(payload))}}
	}
	for i := range tensors {
		t := &tensors[i]
		if t.Offset > uint64(len(payload)) || t.Length > uint64(len(payload))-t.Offset {
			return nil, status.Errorf(codes.InvalidArgument, "tensor '%s': %d bytes at %d exceed the %d-byte frame", t.Name, t.Length, t.Offset, len(payload))
		}
		ir.Inputs = append(ir.Inputs, &inference.ModelInferRequest_InferInputTensor{
			Name: t.Name, Datatype: t.Datatype, Shape: append([]int64(nil), t.Shape()...),
		})
		ir.RawInputContents = append(ir.RawInputContents, payload[t.Offset:t.Offset+t.Length:t.Offset+t.Length])
	}
	return ir, nil
}
