package trace_test

import (
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/agent/trace"
)

// TestNamesMatchSched: the trace names codes as sched does, and colours
// every outcome sched has.
func TestNamesMatchSched(t *testing.T) {
	if n, o := len(trace.Cnames), sched.Outcome(len(trace.Cnames)).String(); !strings.HasPrefix(o, "Outcome(") {
		t.Errorf("sched has an outcome %q (number %d) the trace has no colour for", o, n)
	}
	for i, n := range trace.CodeNames {
		if s := sched.Code(i).String(); !strings.HasPrefix(s, "Code(") && s != n {
			t.Errorf("code %d: trace says %q, sched %q", i, n, s)
		}
	}
}
