package gateway

import (
	"testing"
	"time"
)

// Under steady traffic the stall watch fires about twice a bound, not once
// per call: looking at each call when it fell due would arm the timer per
// call again, and each arming woke an idle runtime thread.
func TestStallWatchFiresPerBoundNotPerCall(t *testing.T) {
	const bound = 200 * time.Millisecond
	defer SetBodyStall(bound)()
	var w stallWatch
	defer w.stop()
	start := time.Now()
	const calls = 40
	for range calls {
		p := new(bodyPipe)
		w.add(p)
		time.Sleep(5 * time.Millisecond)
		p.mu.Lock()
		p.close() // the call is answered
		p.mu.Unlock()
	}
	for {
		w.mu.Lock()
		left, fires := len(w.due), w.fires
		w.mu.Unlock()
		elapsed := time.Since(start)
		// One fire per half bound elapsed, and the first.
		if most := int(elapsed/(bound/2)) + 1; fires > most {
			t.Fatalf("the watch fired %d times for %d calls in %v; want at most %d (twice a bound of %v)", fires, calls, elapsed, most, bound)
		}
		if left == 0 {
			return
		}
		// Every call is due within a bound of the last add, and each fire
		// drops the ended calls due: a few fires after that, none is left.
		if fires > 10 {
			t.Fatalf("%d of %d ended calls still watched after %d fires", left, calls, fires)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
