package gateway

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/wire"
)

// Interim bridge for the ring adapters until they implement Backend and Submit
// (removed with them).

// InferBackend runs one ModelInfer request synchronously (the ring backend).
type InferBackend interface {
	Infer(ctx context.Context, h *wire.InferHeader, req mem.BufferSlice) (mem.BufferSlice, error)
}

// SyncBackend adapts an InferBackend to Backend, a goroutine per call; state is
// reported by the caller through Gateway.SetBackendUp.
type SyncBackend struct{ B InferBackend }

func (s SyncBackend) Open(func(bool)) {}
func (s SyncBackend) Close() error    { return nil }
func (s SyncBackend) Abort(*Call)     {}
func (s SyncBackend) Start(c *Call) {
	go func() {
		msg, err := c.Message()
		if err != nil {
			c.Finish(nil, err)
			return
		}
		c.Finish(s.B.Infer(context.Background(), &c.Header, msg))
	}()
}

// SetBackendUp reports the state of a backend that does not report it itself.
func (g *Gateway) SetBackendUp(up bool) { g.setBackendUp(up) }

// InvokeRaw calls method on the gRPC backend with a message given as buffers.
func (g *Gateway) InvokeRaw(ctx context.Context, method string, req mem.BufferSlice) ([]byte, error) {
	if g.relay == nil {
		return nil, status.Error(codes.Unimplemented, "no gRPC backend")
	}
	return g.relay.Invoke(ctx, method, req.Materialize())
}
