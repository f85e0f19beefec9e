package gateway

import (
	"testing"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/agent/trace"
)

// TestTraceVariant: a dispatch under a model other than the frame's names it
// in the window's models, configured or not; its own model names none.
func TestTraceVariant(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte("models: {m: {exec_ms: 1}, n: {exec_ms: 2}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var now int64
	clock := func() int64 { now++; return now }
	rec, _ := trace.NewRecorder(1024, clock, nil)
	g, err := NewGovernor(GovernorOptions{Config: cfg, Clock: clock, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	span := rec.Begin()
	g.mu.Lock()
	for i, model := range []string{"", "n", "m_fp16", "m_fp16"} {
		g.traceAction(sched.Time(clock()), &sched.Action{Kind: sched.Dispatch, Token: uint64(i + 1), Model: model})
	}
	g.mu.Unlock()
	w := span.End()
	if len(w.Events) != 4 {
		t.Fatalf("%d events", len(w.Events))
	}
	name := func(v int16) string {
		if v < 0 {
			return ""
		}
		return w.Models[v]
	}
	for i, want := range []string{"", "n", "m_fp16", "m_fp16"} {
		if got := name(w.Events[i].Variant); got != want {
			t.Errorf("dispatch %d: variant %q, want %q (models %v)", i, got, want, w.Models)
		}
	}
}
