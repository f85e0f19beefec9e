package gateway

import (
	"time"

	"github.com/vig-edge/vig/h2"
)

// SetHandshakeTimeout sets how long g waits for a connection's preface (10 s
// otherwise), so that a test can watch vig drop the connections that never send
// it. Call it before Serve.
func SetHandshakeTimeout(g *Gateway, d time.Duration) { g.handshakeTimeout = d }

// ConnMsgBudget is the bound on what one connection's incomplete messages hold
// (h2.ConnMsgBudget, for the default max_message_mib).
const ConnMsgBudget = h2.ConnMsgBudget

// BackendConnSeq numbers g's current backend connection, once it is usable
// (the backend's SETTINGS received); 0 while there is none.
func BackendConnSeq(g *Gateway) uint32 {
	if g.relay == nil {
		return 0
	}
	if c := g.relay.cur.Load(); c != nil {
		return c.seq
	}
	return 0
}

// ParkedCalls is how many calls wait for g's next backend connection.
func ParkedCalls(g *Gateway) int {
	if g.relay == nil {
		return 0
	}
	g.relay.mu.Lock()
	defer g.relay.mu.Unlock()
	return len(g.relay.parked)
}

// SetBodyStall sets how long a started call may wait for its request's bytes
// (cutthrough.go) and returns the restore.
func SetBodyStall(d time.Duration) (restore func()) {
	old := bodyStall.Swap(int64(d))
	return func() { bodyStall.Store(old) }
}

// SetAnswerBudget bounds the unread answers of the connections accepted from
// now on (answerBudget) and returns the restore.
func SetAnswerBudget(n int64) (restore func()) {
	old := answerBudgetOverride.Swap(n)
	return func() { answerBudgetOverride.Store(old) }
}

// LeftInBatches counts running batch members whose client left.
func LeftInBatches(g *Governor) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.calls {
		if c.batch != nil && c.left {
			n++
		}
	}
	return n
}
