package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/trace"
)

// TestGovernorTraceNoAllocation: the governor's trace hooks record every
// frame's arrival, dispatch, completion and answer, and cost no allocation per
// frame, recording or not.
func TestGovernorTraceNoAllocation(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`
models: {m: {exec_ms: 1}}
streams: [{name: cam, model: m, class: protected, period_ms: 1000, max_age_ms: 60000}]
`))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	clock := func() int64 { return int64(time.Since(t0)) + 1 }
	rec, _ := trace.NewRecorder(1<<12, clock, nil)
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	frame := func() {
		done, err := gov.AdmitFrame(ctx, "cam", "m", 0)
		if err != nil {
			t.Fatal(err)
		}
		done(nil)
	}
	off := testing.AllocsPerRun(200, frame)
	span := rec.Begin()
	on := testing.AllocsPerRun(200, frame)
	w := span.End()
	if on != off {
		t.Errorf("allocations per frame: %v recording, %v not", on, off)
	}
	count := map[trace.Kind]int{}
	for _, e := range w.Events {
		count[e.Kind]++
		if e.Stream != 0 || e.Kind == trace.Dispatch && (e.Accel != 0 || e.Slot != 0 || e.Busy != 1) {
			t.Fatalf("event %+v: want stream 0, a dispatch on accelerator 0 slot 0 with 1 job", e)
		}
	}
	// AllocsPerRun runs the function once more than it counts.
	for _, k := range []trace.Kind{trace.Arrive, trace.Dispatch, trace.Complete, trace.Answer} {
		if count[k] != 201 {
			t.Errorf("%d %s events for 201 frames", count[k], k)
		}
	}
	if len(w.Streams) == 0 || w.Streams[0].Name != "cam" || w.Streams[0].Class != "protected" || len(w.Accels) != 1 || w.Accels[0].Slots != 1 {
		t.Errorf("meta %+v", w.Meta)
	}
}
