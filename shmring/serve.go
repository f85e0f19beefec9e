package shmring

import (
	"context"
	"errors"
	"sync"
)

// Serve receives the client's requests until the session ends and runs handle for
// each on its own goroutine, so that requests can wait (for the scheduler, for the
// backend) without holding up the ones behind them. Requests come from a pool sized
// by what the client can have outstanding (its request descriptors and slots), so a
// client cannot make vig allocate without bound.
//
// handle must answer the request (Respond) or Release it; Serve releases it anyway
// when handle returns, and reuses it. ctx is cancelled when the session ends, so
// handlers waiting on it give up. Serve returns once every handler has returned:
// nil when the session ended normally, else why it ended (ErrCorrupt,
// ErrQuarantined).
func (c *Conn) Serve(ctx context.Context, handle func(ctx context.Context, req *Request)) error {
	ctx, cancel := context.WithCancel(ctx)
	var inflight sync.WaitGroup
	defer func() {
		cancel()
		inflight.Wait()
	}()
	go func() { // the session's end cancels the handlers' waits
		select {
		case <-c.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	lay := c.Layout().Rings[RequestRing]
	pool := make(chan *Request, int(lay.Descriptors)+int(lay.Slots))
	for range cap(pool) {
		pool <- new(Request)
	}
	for {
		var req *Request
		select {
		case req = <-pool:
		case <-c.Done():
			return nil
		}
		if err := c.Recv(req); err != nil {
			if errors.Is(err, ErrClosed) {
				return nil
			}
			return err
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			handle(ctx, req)
			c.Release(req) // no-op when handle answered or released it
			*req = Request{}
			pool <- req
		}()
	}
}
