package doctor

import (
	"strings"
	"testing"
)

// Scenario D2 with its interference factors: the detector's variants placed
// where the fixed streams leave most room (DLA0 after lane: 0.98; the GPU
// after pose, depth and the VLM: 1.17), the DLA cores analysed at ×1.15.
func TestScenarioD2Interference(t *testing.T) {
	c := loadScenario(t, "d2.yaml")
	l := layoutOf(c, nil)
	for i := range l.accels {
		l.accels[i].Interference = map[string]float64{"gpu": 1.3, "dla0": 1.15, "dla1": 1.15}[l.accels[i].Name]
	}
	// As d2.server.yaml writes it: detector a logical model over three engines.
	for _, v := range []struct{ name, accel string }{{"detector_gpu", "gpu"}, {"detector_dla1", "dla1"}} {
		l.models[v.name] = ModelPlacement{Name: v.name, Accelerator: v.accel}
	}
	c.Models["detector_gpu"] = c.Models["detector_dla0"]
	m := c.Models["detector_gpu"]
	m.ExecMs, m.On = 8, "gpu"
	c.Models["detector_gpu"] = m
	c.Models["detector_dla1"] = c.Models["detector_dla0"]
	c.Models["detector"] = c.Models["detector_dla0"]
	l.models["detector"] = ModelPlacement{Name: "detector", Variants: []string{"detector_gpu", "detector_dla0", "detector_dla1"}}
	c.Streams[0].Model = "detector"

	at := l.place(c)
	if at["detector"] != (placed{accel: "dla0", model: "detector_dla0"}) {
		t.Fatalf("detector placed %+v", at["detector"])
	}
	fs := analyze(c, l)
	for _, f := range fs {
		t.Logf("%s %s %s: %s", f.Severity, f.Code, f.Stream, f.Message)
	}
	var dla0 Finding
	for _, f := range fs {
		if f.Code == CodeUtilization && f.Accelerator == "dla0" {
			dla0 = f
		}
	}
	// (14 + 14) × 1.15 / 33 = 0.976.
	if dla0.Numbers["interference"] != 1.15 || dla0.Numbers["u_protected_high"] != 0.976 || !strings.Contains(dla0.Message, "× 1.15") {
		t.Errorf("dla0 utilization %+v", dla0)
	}
	if got := codes(fs, Warning); len(got) != 1 || got[0] != CodeLongJobBlocksHigh {
		t.Errorf("warnings %v, want only the VLM's priced budget", got)
	}
}
