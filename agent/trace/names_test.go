package trace_test

import (
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/agent/trace"
)

// TestNamesMatchSched: the trace names outcomes, reasons and codes as sched
// does, and knows all of sched's.
func TestNamesMatchSched(t *testing.T) {
	for i, n := range trace.OutcomeNames {
		if s := sched.Outcome(i).String(); s != n {
			t.Errorf("outcome %d: trace says %q, sched %q", i, n, s)
		}
	}
	if s := sched.Outcome(len(trace.OutcomeNames)).String(); !strings.HasPrefix(s, "Outcome(") {
		t.Errorf("sched has an outcome %q the trace does not name", s)
	}
	for i, n := range trace.ReasonTexts {
		if s := sched.Reason(i).String(); s != n {
			t.Errorf("reason %d: trace says %q, sched %q", i, n, s)
		}
	}
	if s := sched.Reason(len(trace.ReasonTexts)).String(); !strings.HasPrefix(s, "Reason(") {
		t.Errorf("sched has a reason %q the trace does not know", s)
	}
	for i, n := range trace.CodeNames {
		if s := sched.Code(i).String(); !strings.HasPrefix(s, "Code(") && s != n {
			t.Errorf("code %d: trace says %q, sched %q", i, n, s)
		}
	}
}
