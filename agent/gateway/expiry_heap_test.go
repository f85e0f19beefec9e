package gateway

import (
	"testing"
	"time"
)

// The expiry heap on a fake clock, fire called by hand: calls are given up on in
// the order of their expiry and only once due; a finished call is never given up
// on; the client's deadline wins over the bound; more calls fall due at once
// than one batch holds; the timer is left armed at the earliest expiry still
// pending, or not at all.
func TestExpiryOrder(t *testing.T) {
	var now int64 = 1e9
	var aborted []*Call
	e := newExpiry(func() int64 { return now }, time.Second, func(c *Call) {
		if !c.Expired() {
			t.Errorf("call %p aborted without the expired mark", c)
		}
		aborted = append(aborted, c)
	})
	// The test calls fire itself: the real timer, still armed by add, runs a
	// no-op instead.
	e.timer.Stop()
	e.timer = time.AfterFunc(time.Hour, func() {})
	defer e.stop()
	mk := func(deadline int64) *Call {
		c := new(Call)
		c.refs.Store(1)
		c.Deadline = deadline
		return c
	}
	grace := int64(expiryGrace)
	bound := mk(0)                    // expires at now + 1 s + grace
	early := mk(now + int64(100e6))   // the client's deadline: 100 ms
	late := mk(now + int64(5e9))      // 5 s
	finished := mk(now + int64(50e6)) // finishes before its deadline
	for _, c := range []*Call{bound, early, late, finished} {
		e.add(c)
	}
	if e.armed != finished.Deadline+grace {
		t.Errorf("armed at %d, want the earliest expiry %d", e.armed, finished.Deadline+grace)
	}
	e.remove(finished)

	now += int64(500e6) // 0.5 s: only early is due
	e.fire()
	if len(aborted) != 1 || aborted[0] != early {
		t.Fatalf("at 0.5 s gave up on %v, want only the 100 ms call", aborted)
	}
	if e.armed != bound.expAt || bound.expAt != 1e9+int64(time.Second)+grace {
		t.Errorf("re-armed at %d (bound call expires at %d)", e.armed, bound.expAt)
	}
	now += int64(10e9)
	e.fire()
	if len(aborted) != 3 || aborted[1] != bound || aborted[2] != late {
		t.Fatalf("at 10.5 s gave up on %v, want bound then late", aborted)
	}
	if e.armed != 0 || len(e.calls) != 0 {
		t.Errorf("idle: armed %d with %d calls, want 0 and 0", e.armed, len(e.calls))
	}
	if finished.Expired() {
		t.Error("a call finished before its deadline was marked expired")
	}
	for _, c := range aborted {
		if c.refs.Load() != 1 {
			t.Errorf("call %p holds %d references after its abort, want 1 (the hold is released)", c, c.refs.Load())
		}
	}

	aborted = aborted[:0]
	many := make([]*Call, 40) // more than one batch of fire
	for i := range many {
		many[i] = mk(now + int64(i))
		e.add(many[i])
	}
	now += int64(time.Second)
	e.fire()
	if len(aborted) != len(many) {
		t.Fatalf("gave up on %d of %d due calls", len(aborted), len(many))
	}
	for i, c := range aborted {
		if c != many[i] {
			t.Fatalf("call %d given up on out of order", i)
		}
	}
}
