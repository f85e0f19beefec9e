package gateway

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/sched"
)

// The pipeline every inference call takes, whatever its frontend and backend:
//
//	frontend ──Submit──▶ scheduler ──Start──▶ backend ──Finish──▶ scheduler ──Reply──▶ frontend
//
// Each arrow runs on the goroutine that has the event: Submit on the frontend's
// reader, the decision inline under the scheduler's lock, Start (the write to the
// backend) right after it on the same goroutine, Finish on the backend's reader,
// which also starts the next waiting call and then writes the answer to the client.
// A call that waits is started later by whichever event frees its slot (a Finish
// or the scheduler's one timer). No goroutine is created and nothing hands work to
// another goroutine on the way.

// Submit runs c through the scheduler to the backend and answers it exactly once
// through c.Replier.
func (g *Gateway) Submit(c *Call) {
	c.gw = g
	switch {
	case g.gov != nil:
		g.gov.submit(c)
	case g.opts.Admit != nil:
		g.admitBlocking(c)
	default:
		c.phase = phaseRunning
		g.start(c)
	}
}

// start hands c to the backend, with vig's deadline for it armed first: the
// backend may finish it before Start returns.
func (g *Gateway) start(c *Call) {
	g.exp.add(c)
	g.backend.Start(c)
}

// admitBlocking runs an Admitter that blocks (a policy other than vig's
// scheduler) on a goroutine of its own.
func (g *Gateway) admitBlocking(c *Call) {
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go func() {
		done, err := g.opts.Admit.Admit(c.ctx, &c.Header)
		if err != nil {
			g.reply(c, nil, err)
			return
		}
		c.done = done
		c.phase = phaseRunning
		g.start(c)
	}()
}

// Cancel tells the gateway that the client of a submitted call has left. The call
// is still answered exactly once (its Replier may ignore the answer).
func (g *Gateway) Cancel(c *Call) {
	abort := c
	if g.gov != nil {
		var answered bool
		if answered, abort = g.gov.cancel(c); answered {
			return // it was waiting: answered CANCELLED
		}
	} else if c.cancel != nil {
		c.cancel()
	}
	if abort != nil {
		g.backend.Abort(abort)
	}
}

// finish is Call.Finish: the backend's answer.
func (g *Gateway) finish(c *Call, resp mem.BufferSlice, err error) {
	c.run.Store(0)
	g.exp.remove(c)
	if err != nil && c.expired.Load() && status.Code(err) == codes.Canceled {
		// vig gave up on it (expiry.go) and the backend stopped it.
		err = g.exp.errFor(c)
		g.m.BackendExpired()
	}
	err = lateAtBackend(c, err)
	switch {
	case g.gov != nil && c.token != 0:
		g.gov.complete(c, err) // may start the next call before this one is answered
	case c.done != nil:
		c.done(err)
	}
	g.reply(c, resp, err)
}

// reply answers the client and recycles the call.
func (g *Gateway) reply(c *Call, resp mem.BufferSlice, err error) {
	if c.cancel != nil {
		c.cancel()
	}
	c.Replier.Reply(c, resp, err)
	c.release()
}

// decision is one scheduler action for a call, carried out after the lock.
type decision struct {
	c *Call
	a sched.Action
}

// carry out decisions taken under the scheduler's lock: answers and starts.
func (g *Gateway) carry(ds []decision) {
	for _, d := range ds {
		if d.c.wake != nil { // a blocking Admit waits for it
			d.c.wake <- d.a
			continue
		}
		if d.a.Kind == sched.Answer {
			g.reply(d.c, nil, answerError(d.a))
			continue
		}
		if b := d.c.batch; b != nil {
			g.startBatch(b)
			continue
		}
		g.start(d.c)
	}
}

func answerError(a sched.Action) error {
	return status.Errorf(codes.Code(a.Code), "vig: %s (%s)", a.Reason, a.Outcome)
}
