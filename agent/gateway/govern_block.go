package gateway

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/wire"
)

// Blocking admission, for callers that run requests themselves instead of
// handing the gateway a Call: Admit waits until the scheduler lets the request
// start (or answers it) and returns the function that reports its outcome.

// Admit implements Admitter.
func (g *Governor) Admit(ctx context.Context, h *wire.InferHeader) (func(error), error) {
	if !g.known[string(h.Model)] {
		g.ungoverned(string(h.Model))
		return func(error) {}, nil
	}
	if g.logical[string(h.Model)] {
		return nil, errLogicalAdmit(string(h.Model))
	}
	req, err := g.request(h)
	if err != nil {
		return nil, err
	}
	return g.admitWait(ctx, req)
}

// errLogicalAdmit: a frame of a logical model runs as the variant the
// scheduler picks, under that name; a caller that sends frames itself is
// not told which.
func errLogicalAdmit(model string) error {
	return status.Errorf(codes.InvalidArgument, "vig: %q is a logical model (variants): its frames are sent as the variant vig picks, "+
		"so they must go through vig's gRPC, HTTP or ring frontend; or name a variant", model)
}

// AdmitFrame is Admit for requests that do not arrive as gRPC messages: stream,
// model and capture time (0 = arrival), on the configured capture clock.
func (g *Governor) AdmitFrame(ctx context.Context, stream, model string, captureNs int64) (func(error), error) {
	if !g.known[model] {
		g.ungoverned(model)
		return func(error) {}, nil
	}
	if g.logical[model] {
		return nil, errLogicalAdmit(model)
	}
	req := sched.Request{Stream: stream, Model: model}
	if captureNs != 0 {
		req.Capture = g.capture(captureNs)
	}
	return g.admitWait(ctx, req)
}

func (g *Governor) admitWait(ctx context.Context, req sched.Request) (func(error), error) {
	c := &Call{wake: make(chan sched.Action, 1)}
	g.mu.Lock()
	now := g.clock()
	g.next++
	c.token, req.Token = g.next, g.next
	c.phase, c.arrival = phaseWaiting, now
	g.calls[c.token] = c
	g.acts = g.s.Arrive(now, req, g.acts[:0])
	ds := g.collect(now, nil)
	g.mu.Unlock()
	g.carryTo(ds)
	var a sched.Action
	select {
	case a = <-c.wake:
	case <-ctx.Done():
		if answered, _ := g.cancel(c); answered {
			a = <-c.wake
			if a.Kind == sched.Answer {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		} else {
			a = <-c.wake // decided just before the cancel: honour it
		}
	}
	if a.Kind == sched.Answer {
		return nil, answerError(a)
	}
	return func(err error) { g.complete(c, err) }, nil
}

// carryTo carries out decisions when the governor may have no gateway (tests
// that drive it through Admit alone).
func (g *Governor) carryTo(ds []decision) {
	if g.gw != nil {
		g.gw.carry(ds)
		return
	}
	for _, d := range ds {
		d.c.wake <- d.a
	}
}
