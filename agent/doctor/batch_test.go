package doctor

import (
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/config"
)

// scenarioE is SCENARIOS.md's scenario E as a config: six cameras on one
// detector, depth on its own model, one slot.
func scenarioE(t *testing.T, model string) *config.Config {
	t.Helper()
	src := `backend: {address: "127.0.0.1:8001", slots: 1}
models:
  detector: ` + model + `
  depth: {exec_ms: 6}
streams:
  - {name: cam0, model: detector, class: protected, period_ms: 33, max_age_ms: 50}
  - {name: cam1, model: detector, class: protected, period_ms: 33, max_age_ms: 50}
  - {name: cam2, model: detector, class: high, period_ms: 33, max_age_ms: 66}
  - {name: cam3, model: detector, class: high, period_ms: 33, max_age_ms: 66}
  - {name: cam4, model: detector, class: high, period_ms: 33, max_age_ms: 66}
  - {name: cam5, model: detector, class: high, period_ms: 33, max_age_ms: 66}
  - {name: depth, model: depth, class: high, period_ms: 66, max_age_ms: 100}
`
	c, err := config.Parse("e.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBatchingScenarioE: doctor says scenario E is overbooked one frame per job
// and feasible batched, with the numbers of both.
func TestBatchingScenarioE(t *testing.T) {
	unbatched := Analyze(scenarioE(t, "{exec_ms: 10}"))
	if _, ok := find(unbatched, CodeHighOverbooked, ""); !ok {
		t.Fatalf("unbatched: want %s: %v", CodeHighOverbooked, codes(unbatched, Info))
	}
	if _, ok := find(unbatched, CodeBatching, ""); ok {
		t.Fatalf("unbatched: a %s finding", CodeBatching)
	}
	batched := Analyze(scenarioE(t, "{exec_ms: 10, max_batch: 8, batch_exec_ms: {1: 10, 8: 27.5}}"))
	f, ok := find(batched, CodeBatching, "")
	if !ok {
		t.Fatalf("batched: no %s: %v", CodeBatching, codes(batched, Info))
	}
	if !strings.Contains(f.Message, "feasible only batched") || f.Severity != Info {
		t.Fatalf("batched: %+v", f)
	}
	// One batch of 6 per 33 ms: 10 + 2.5·5 = 22.5 ms; with depth 6/66.
	if got, want := f.Numbers["u_protected_high_batched"], round3(22.5/33+6.0/66); got != want {
		t.Fatalf("batched demand %v, want %v", got, want)
	}
	if got := f.Numbers["u_protected_high_unbatched"]; got < 1.9 {
		t.Fatalf("unbatched demand %v", got)
	}
	if _, ok := find(batched, CodeHighOverbooked, ""); ok {
		t.Fatalf("batched: still %s: %v", CodeHighOverbooked, codes(batched, Warning))
	}
	if worst(batched) > Info {
		t.Fatalf("batched scenario E: %v", codes(batched, Warning))
	}
	for _, s := range []string{"cam0", "cam1"} {
		r, ok := find(batched, CodeResponseTime, s)
		if !ok {
			t.Fatalf("%s: no response time: %v", s, codes(batched, Info))
		}
		// Its job is the batch of six, 22.5 ms, blocked by depth at most.
		if got := r.Numbers["r_ms"]; got < 22.5 || got > 50 {
			t.Fatalf("%s: response %v ms", s, got)
		}
	}
	// Linear batches gain nothing: still overbooked, said so.
	linear := Analyze(scenarioE(t, "{exec_ms: 10, max_batch: 8, batch_exec_ms: {1: 10, 8: 80}}"))
	f, _ = find(linear, CodeBatching, "")
	if f.Severity != Warning || !strings.Contains(f.Message, "overbooked even batched") {
		t.Fatalf("linear: %+v", f)
	}
}

func worst(fs []Finding) Severity {
	w := Info
	for _, f := range fs {
		w = max(w, f.Severity)
	}
	return w
}
