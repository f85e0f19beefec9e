package doctor

import (
	"slices"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/config"
)

// Scenario D: each accelerator analysed on its own. The VLM blocks pose and
// depth on the GPU, priced per run; nothing on the DLA.
func TestScenarioDPerAccelerator(t *testing.T) {
	fs := Analyze(loadScenario(t, "d.yaml"))
	if got := codes(fs, Warning); len(got) != 1 || got[0] != CodeLongJobBlocksHigh {
		t.Fatalf("warnings and errors %v, want only %s", got, CodeLongJobBlocksHigh)
	}
	f, _ := find(fs, CodeLongJobBlocksHigh, "vlm")
	if f.Accelerator != "gpu" || !strings.HasPrefix(f.Message, "gpu: ") || f.Numbers["windows_per_run_pose"] != 7 || f.Numbers["windows_per_run_depth"] != 7 {
		t.Fatalf("vlm finding: %+v", f)
	}
	if !strings.Contains(f.Message, "blocks pose and depth") || !strings.Contains(f.Message, "min_rate_hz 0.2") {
		t.Errorf("message %q", f.Message)
	}
	for _, f := range fs {
		if f.Accelerator == "dla" && f.Severity > Info {
			t.Errorf("a finding on the DLA: %+v", f)
		}
		if f.Accelerator == "" {
			t.Errorf("finding without its accelerator: %+v", f)
		}
	}
	var dla, gpu Finding
	for _, f := range fs {
		if f.Code == CodeUtilization {
			switch f.Accelerator {
			case "dla":
				dla = f
			case "gpu":
				gpu = f
			}
		}
	}
	if dla.Numbers["slots"] != 2 || dla.Numbers["u_protected_high"] != 0.485 || gpu.Numbers["slots"] != 1 || gpu.Numbers["u_all"] != 0.655 {
		t.Errorf("utilization: dla %v, gpu %v", dla.Numbers, gpu.Numbers)
	}
	if r, ok := find(fs, CodeResponseTime, "detector"); !ok || r.Accelerator != "dla" || r.Numbers["blocking_ms"] != 0 {
		t.Errorf("detector's response time: %+v (nothing on the DLA blocks it)", r)
	}
}

// As one pool of 3 slots (the config before accelerators), the VLM's corun:
// false makes it block the protected detector: the finding the accelerators
// remove.
func TestScenarioDAsOnePool(t *testing.T) {
	c := loadScenario(t, "d.yaml")
	c.Accelerators, c.Backend.Slots = nil, 3
	models := map[string]config.Model{}
	for n, m := range c.Models {
		m.On = ""
		models[n] = m
	}
	c.Models = models
	fs := Analyze(c)
	if _, ok := find(fs, CodeLongJobBlocks, "detector"); !ok {
		t.Fatalf("one pool: no %s for the detector: %v", CodeLongJobBlocks, codes(fs, Warning))
	}
}

// A model on an accelerator the config does not declare is a CONFIG_INVALID
// finding with its line and fix.
func TestUndeclaredAccelerator(t *testing.T) {
	_, err := config.Parse("jetson.yaml", []byte(`
accelerators: {gpu: 1, dla: 2}
models:
  detector: {exec_ms: 12, on: npu}
streams:
  - {name: detector, model: detector, class: protected, period_ms: 33, max_age_ms: 50}
`))
	fs := ConfigFindings(err)
	if len(fs) != 1 || fs[0].Line != 4 || !strings.Contains(fs[0].Message, `"npu" is not a declared accelerator (declared: gpu, dla)`) {
		t.Fatalf("findings %+v", fs)
	}
}

// Scenario D without min_rate_hz: the VLM waits for pose and depth on the
// GPU (high streams: admission guards a best_effort job against them) and
// never starts; doctor says so, names them, and gives remedies that fit.
func TestScenarioDStarvation(t *testing.T) {
	c := edit(t, "d.yaml", ", min_rate_hz: 0.2}", "}")
	fs := Analyze(c)
	f, ok := find(fs, CodeStreamStarves, "vlm")
	if !ok {
		t.Fatalf("no %s for vlm: %v", CodeStreamStarves, codes(fs, Warning))
	}
	if f.Severity != Warning || f.Accelerator != "gpu" || !slices.Equal(f.Blockers, []string{"pose", "depth"}) {
		t.Fatalf("finding %+v", f)
	}
	// pose leaves (33 − 5) + (66 − 5) = 89 ms, depth (33 − 10) + (100 − 10) = 113 ms.
	if f.Numbers["window_ms"] != 89 || f.Numbers["exec_ms"] != 200 || !strings.Contains(f.Formula, "(33 − 5) + (66 − 5) = 89 ms < C = 200 ms") {
		t.Errorf("numbers %v, formula %q", f.Numbers, f.Formula)
	}
	rem := strings.Join(f.Remedy, "\n")
	// The budget fits: pose and depth need 15/33 of the GPU, 55 % is left,
	// and a run of 200 ms makes ⌈(200 + 5 − 66)/33⌉ = 5 pose and
	// ⌈(200 + 10 − 100)/33⌉ = 4 depth results late.
	for _, want := range []string{"min_rate_hz: 0.1 on vlm", "leave 55% of the accelerator", "≤ 5 pose results late", "≤ 4 depth results late", "a model faster than 89 ms"} {
		if !strings.Contains(rem, want) {
			t.Errorf("remedies lack %q:\n%s", want, rem)
		}
	}
	if strings.Contains(rem, "own slot") {
		t.Errorf("a slot offered to a corun: false model:\n%s", rem)
	}
	// The budget in the scenario removes the finding.
	if _, ok := find(Analyze(loadScenario(t, "d.yaml")), CodeStreamStarves, ""); ok {
		t.Error("starvation reported with min_rate_hz 0.2")
	}
}

// A high stream longer than what a protected one leaves starves too, and
// another accelerator with room is offered.
func TestHighStarvesMovesElsewhere(t *testing.T) {
	c, err := config.Parse("h.yaml", []byte(`
accelerators: {gpu: 1, dla0: 1}
models:
  det: {exec_ms: 20, on: gpu}
  seg: {exec_ms: 60, on: gpu}
  lane: {exec_ms: 5, on: dla0}
streams:
  - {name: det, model: det, class: protected, period_ms: 33, max_age_ms: 40}
  - {name: seg, model: seg, class: high, period_ms: 200, max_age_ms: 400}
  - {name: lane, model: lane, class: high, period_ms: 50, max_age_ms: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := find(Analyze(c), CodeStreamStarves, "seg")
	if !ok {
		t.Fatal("high stream seg (60 ms) beside det leaving (33 − 20) + (40 − 20) = 33 ms: no starvation reported")
	}
	if !slices.Equal(f.Blockers, []string{"det"}) || f.Numbers["window_ms"] != 33 {
		t.Errorf("%+v", f)
	}
	rem := strings.Join(f.Remedy, "\n")
	if !strings.Contains(rem, "run seg on dla0 (on: dla0), if seg is built for it: dla0 is at 10% of its 1 slot, with seg at 40%") {
		t.Errorf("no move to dla0:\n%s", rem)
	}
	if !strings.Contains(rem, "class: best_effort, min_rate_hz: 0.5 on seg") {
		t.Errorf("a budget needs class best_effort (config allows min_rate_hz there only):\n%s", rem)
	}
}
