package doctor

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/vig-edge/vig/wire"
)

// d2Server is the server of d2.repository.yaml: one engine per model, the
// DLA engines bound to their core by a KIND_NVDLA secondary device.
func d2Server() map[string]*wire.ModelConfig {
	gpu := []wire.InstanceGroup{{Kind: wire.KindGPU, Count: 1}}
	dla := func(core int64) []wire.InstanceGroup {
		return []wire.InstanceGroup{{Kind: wire.KindGPU, Count: 1, SecondaryDevices: []wire.SecondaryDevice{{Kind: wire.KindNVDLA, DeviceID: core}}}}
	}
	out := map[string]*wire.ModelConfig{}
	for name, g := range map[string][]wire.InstanceGroup{
		"detector_gpu": gpu, "detector_dla0": dla(0), "detector_dla1": dla(1),
		"lane_dla0": dla(0), "segment_dla1": dla(1), "pose": gpu, "depth": gpu, "vlm": gpu,
	} {
		out[name] = &wire.ModelConfig{Name: name, InstanceGroups: g}
	}
	return out
}

// Scenario D2 as vig reading the server: the layout derived from the
// instance groups is what doctor prints (sources, interference, the
// detector's variants), and the analysis places the detector where the
// fixed streams leave most room — DLA0 after lane, (14 + 14) × 1.15 / 33 =
// 0.976, not the GPU at 1.17 after pose, depth and the VLM.
func TestScenarioD2FromServer(t *testing.T) {
	c := loadScenario(t, "d2.server.yaml")
	if _, err := c.Resolve(d2Server()); err != nil {
		t.Fatal(err)
	}
	orin := Profiles["orin"]
	r := Run(context.Background(), c, Options{Profile: &orin})
	var b bytes.Buffer
	if err := r.WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log(out)
	for _, want := range []string{
		"gpu          1      ×1.3          server\n",
		"dla0         1      ×1.15         server\n",
		"detector       variants detector_gpu (gpu), detector_dla0 (dla0), detector_dla1 (dla1)  -          config\n",
		"lane_dla0      dla0                                                                     1          server\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	l := layoutOf(c, &orin)
	if at := l.place(c); at["detector"] != (placed{accel: "dla0", model: "detector_dla0"}) {
		t.Fatalf("detector placed %+v", at["detector"])
	}
	var dla0 Finding
	for _, f := range r.Findings {
		if f.Code == CodeUtilization && f.Accelerator == "dla0" {
			dla0 = f
		}
		if f.Code == CodeStreamUnplaced || f.Code == CodeBeyondDevice {
			t.Errorf("%+v", f)
		}
	}
	if dla0.Numbers["interference"] != 1.15 || dla0.Numbers["u_protected_high"] != 0.976 {
		t.Errorf("dla0 utilization %+v", dla0)
	}
	if got := codes(r.Findings, Warning); len(got) != 1 || got[0] != CodeLongJobBlocksHigh {
		t.Errorf("warnings %v, want only the VLM's priced budget", got)
	}
}
