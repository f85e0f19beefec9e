package gateway

import (
	"context"
	"errors"

	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/agent/metrics"
)

// The seam of a frontend that encodes the ModelInferRequest itself (the REST
// frontend, package restfront): it hands vig the message and the client's
// control RPCs, and the gateway applies the same checks as to a gRPC client's.

// PrepareInfer reads msg, a ModelInferRequest the frontend encoded, into c as a
// gRPC client's request is read: header parsed, shared-memory references checked
// against vig's registry (looked up on the backend first when a region is not
// there: it may wait for one backend round trip, so call it on the request's own
// goroutine), vig's own parameters removed. c owns msg from here on. On error c
// is released (it must not be submitted) and the error is a gRPC status.
func (g *Gateway) PrepareInfer(c *Call, msg mem.BufferSlice, uid uint32, hasUID bool) error {
	err := g.prepare(c, msg, uid, hasUID)
	if errors.Is(err, errShmUnknown) {
		if err = g.shmSync(); err == nil {
			err = g.finishPrepare(c, uid, hasUID, true)
		}
	}
	if err != nil {
		c.release()
	}
	return err
}

// ShmControl runs a client's SystemSharedMemoryRegister or Unregister request
// (method, a Triton gRPC path; req, its message): checked, forwarded to the
// backend, and mirrored in vig's registry once the backend has accepted it, as
// for a gRPC client of uid (hasUID: the uid is known).
func (g *Gateway) ShmControl(ctx context.Context, method string, req []byte, uid uint32, hasUID bool) ([]byte, error) {
	hook, err := g.shmCheck(method, mem.BufferSlice{mem.SliceBuffer(req)}, uid, hasUID)
	if err != nil {
		return nil, err
	}
	resp, err := g.Invoke(ctx, method, req)
	if err == nil {
		hook()
	}
	return resp, err
}

// RequestAccepted and RequestAnswered count a request of the REST frontend
// beside the gRPC frontend's RPCs (Accepted, Answered): each accepted
// request is counted answered once its answer is written.
func (g *Gateway) RequestAccepted() { g.accepted.Add(1) }
func (g *Gateway) RequestAnswered() { g.answered.Add(1) }

// KnownModel reports whether the configuration names model (a ring backend has
// no repository to ask: vig answers ModelReady from its configuration).
func (g *Gateway) KnownModel(model string) bool {
	_, ok := g.opts.Config.Models[model]
	return ok
}

// Metrics is the registry the gateway counts into (Options.Metrics): the REST
// frontend counts its requests there beside the gRPC frontend's RPCs.
func (g *Gateway) Metrics() *metrics.Registry { return g.m }
