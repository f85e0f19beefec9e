package doctor

import (
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
