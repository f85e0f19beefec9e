package gateway

import (
	"container/heap"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
)

// vig's own deadline for calls on the backend.
//
// A backend that neither answers nor honours the grpc-timeout vig forwards (a
// wedged runtime, a ring peer that stopped reading) would otherwise hold its slot
// for as long as its client waits, and a client that never resets its stream
// waits forever. So every call handed to a backend is given up on at the client's
// deadline, or backend.call_timeout_ms after its dispatch when the client set
// none, plus expiryGrace: the grace lets a backend that honours grpc-timeout
// answer first (its CANCEL becomes DEADLINE_EXCEEDED, deadline.go), so vig's timer
// only acts for one that does not.
//
// Giving up is the same path as a client leaving: the call is marked expired and
// the backend is told to Abort it; the backend finishes it (at once: a gRPC
// backend resets its stream, a ring backend forgets the posted request and keeps
// its room until the runtime answers), and Call.Finish turns that CANCELLED into
// DEADLINE_EXCEEDED. The scheduler frees the slot and counts the outcome as a
// backend error; vig_backend_calls_expired_total counts the expiries.
//
// There is one timer for all calls, not one per call: the calls on the backend
// sit in a heap ordered by expiry, and the timer is armed at the earliest
// expiry. It is not stopped when a call finishes (most calls finish long before
// their expiry, and with a fixed call timeout every new call expires after the
// ones before it): when it fires it re-arms itself at the earliest expiry left,
// or goes idle when none is. So dispatching a call costs a heap insertion and no
// timer operation, an idle vig has no timer armed, and the timer fires at most
// once per expiry of the earliest call it was armed for.

// expiryGrace is what vig adds to a call's deadline before giving up on it.
const expiryGrace = 100 * time.Millisecond

// expiry holds the calls on the backend by the time vig gives up on them.
type expiry struct {
	clock func() int64
	bound int64 // backend.call_timeout_ms, ns
	abort func(*Call)

	// The two answers of an expired call: the client's deadline passed, or the
	// configured bound did.
	errClient, errBound error

	mu    sync.Mutex
	calls expiryHeap
	timer *time.Timer
	armed int64 // when the timer fires (gateway clock); 0: not armed
	done  bool  // stopped: the gateway is closing
}

func newExpiry(clock func() int64, bound time.Duration, abort func(*Call)) *expiry {
	if bound <= 0 { // a Config not from config.Parse
		bound = config.DefaultCallTimeoutMs * time.Millisecond
	}
	e := &expiry{clock: clock, bound: int64(bound), abort: abort,
		errClient: status.Error(codes.DeadlineExceeded,
			"deadline exceeded: the backend neither answered nor honoured the call's grpc-timeout; vig stopped the call"),
		errBound: status.Errorf(codes.DeadlineExceeded,
			"deadline exceeded: the backend did not answer within backend.call_timeout_ms (%d ms); vig stopped the call", bound.Milliseconds())}
	e.timer = time.AfterFunc(time.Hour, e.fire)
	e.timer.Stop()
	return e
}

// add records a call about to be started on the backend.
func (e *expiry) add(c *Call) {
	now := e.clock()
	at := c.Deadline
	if at == 0 {
		at = now + e.bound
	}
	at += int64(expiryGrace)
	e.mu.Lock()
	c.expAt = at
	heap.Push(&e.calls, c)
	if !e.done && (e.armed == 0 || at < e.armed) {
		e.armed = at
		e.timer.Reset(time.Duration(max(at-now, 0)))
	}
	e.mu.Unlock()
}

// remove forgets a call the backend finished; it may have been taken by fire.
func (e *expiry) remove(c *Call) {
	e.mu.Lock()
	if c.expIdx != 0 {
		heap.Remove(&e.calls, int(c.expIdx-1))
	}
	e.mu.Unlock()
}

// fire gives up on every call whose time has come and re-arms the timer.
func (e *expiry) fire() {
	for {
		var buf [16]*Call
		due := buf[:0]
		e.mu.Lock()
		now := e.clock()
		for len(e.calls) > 0 && e.calls[0].expAt <= now && len(due) < len(buf) {
			c := heap.Pop(&e.calls).(*Call)
			c.Hold() // it stays a Call (not recycled) while it is aborted
			due = append(due, c)
		}
		more := len(due) == len(buf)
		if !more {
			e.armed = 0
			if len(e.calls) > 0 && !e.done {
				e.armed = e.calls[0].expAt
				e.timer.Reset(time.Duration(max(e.armed-now, 0)))
			}
		}
		e.mu.Unlock()
		for _, c := range due {
			// Marked before the backend looks for the call: a backend that
			// has not yet registered it finds the mark when it does (h2backend
			// Start, ringback's session).
			c.expired.Store(true)
			e.abort(c)
			c.Release()
		}
		if !more {
			return
		}
	}
}

// errFor is the answer of an expired call.
func (e *expiry) errFor(c *Call) error {
	if c.Deadline != 0 {
		return e.errClient
	}
	return e.errBound
}

// stop disarms the timer for good; calls still on the backend are failed by
// its Close.
func (e *expiry) stop() {
	e.mu.Lock()
	e.done = true
	e.timer.Stop()
	e.mu.Unlock()
}

// expiryHeap orders calls by expAt; a call's expIdx is its index + 1 (0: not in
// the heap). Guarded by expiry.mu.
type expiryHeap []*Call

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expAt < h[j].expAt }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].expIdx, h[j].expIdx = int32(i+1), int32(j+1)
}
func (h *expiryHeap) Push(x any) {
	c := x.(*Call)
	c.expIdx = int32(len(*h) + 1)
	*h = append(*h, c)
}
func (h *expiryHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.expIdx = 0
	return c
}
