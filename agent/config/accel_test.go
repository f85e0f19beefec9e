package config

import (
	"os"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/sched"
)

const jetson = `
backend: {address: "127.0.0.1:8001"}
accelerators: {gpu: 1, dla: 2}
models:
  detector: {exec_ms: 12, on: dla}
  pose: {exec_ms: 5, on: gpu}
  vlm: {exec_ms: 200, on: gpu, corun: false}
streams:
  - {name: detector, model: detector, class: protected, period_ms: 33, max_age_ms: 50}
  - {name: pose, model: pose, class: high, period_ms: 33, max_age_ms: 66}
  - {name: vlm, model: vlm, class: best_effort, period_ms: 1000, max_age_ms: 2000, min_rate_hz: 0.2}
`

func TestParseAccelerators(t *testing.T) {
	c, err := Parse("jetson.yaml", []byte(jetson))
	if err != nil {
		t.Fatal(err)
	}
	got := c.AcceleratorList()
	if len(got) != 2 || got[0] != (Accelerator{Name: "gpu", Slots: 1, Line: 3}) || got[1] != (Accelerator{Name: "dla", Slots: 2, Line: 3}) {
		t.Fatalf("accelerators %+v (want declaration order gpu, dla)", got)
	}
	if c.Backend.Slots != 3 || c.AcceleratorOf("detector") != "dla" || c.AcceleratorOf("vlm") != "gpu" {
		t.Fatalf("slots %d, detector on %q", c.Backend.Slots, c.AcceleratorOf("detector"))
	}
	slots, accels := c.SchedAccelerators()
	if slots != 0 || len(accels) != 2 || accels[1] != (sched.AcceleratorSpec{Name: "dla", Slots: 2}) {
		t.Fatalf("sched view: %d %+v", slots, accels)
	}
	// The shorthand means what it meant.
	c, err = Parse("b.yaml", []byte(scenarioB))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.AcceleratorList(); len(l) != 1 || l[0].Name != "" || l[0].Slots != 1 || c.AcceleratorOf("vlm") != "" {
		t.Fatalf("shorthand: %+v", l)
	}
	if slots, accels := c.SchedAccelerators(); slots != 1 || accels != nil {
		t.Fatalf("shorthand sched view: %d %+v", slots, accels)
	}
	// One accelerator declared: models may leave on: out.
	c, err = Parse("npu.yaml", []byte("accelerators: {npu: 2}\nmodels:\n  m: {exec_ms: 5}\n"))
	if err != nil || c.AcceleratorOf("m") != "npu" || c.Backend.Slots != 2 {
		t.Fatalf("one accelerator: %v, m on %q", err, c.AcceleratorOf("m"))
	}
}

func TestAcceleratorErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"undeclared", strings.Replace(jetson, "{exec_ms: 12, on: dla}", "{exec_ms: 12, on: npu}", 1),
			[]string{"jetson.yaml:5: models.detector.on:", `"npu" is not a declared accelerator (declared: gpu, dla)`}},
		{"both", strings.Replace(jetson, `{address: "127.0.0.1:8001"}`, `{address: "127.0.0.1:8001", slots: 3}`, 1),
			[]string{"jetson.yaml:3: backend.slots: both backend.slots and accelerators are set", "drop it"}},
		{"missing on", strings.Replace(jetson, "{exec_ms: 5, on: gpu}", "{exec_ms: 5}", 1),
			[]string{"jetson.yaml:6: models.pose.on: missing: with accelerators gpu, dla declared"}},
		{"on without accelerators", "models:\n  m: {exec_ms: 5, on: dla}\n",
			[]string{"x.yaml:2: models.m.on:", "none are declared", "accelerators: {dla: 1}"}},
		{"zero slots", strings.Replace(jetson, "dla: 2", "dla: 0", 1),
			[]string{"jetson.yaml:3: accelerators.dla: 0 slots"}},
		{"bad name", strings.Replace(jetson, "dla: 2", "DLA core: 2", 1),
			[]string{`accelerators.DLA core: "DLA core": an accelerator's name is`}},
		{"two accelerators for one model", strings.Replace(jetson, "{exec_ms: 12, on: dla}", "{exec_ms: 12, on: [dla, gpu]}", 1),
			[]string{"jetson.yaml:5: models.detector.on: a model runs on one accelerator", "detector_gpu, detector_dla"}},
		{"unknown key", strings.Replace(jetson, "on: dla}", "on: dla, core: 1}", 1),
			[]string{"jetson.yaml:5: models.detector.core: unknown key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := "jetson.yaml"
			if !strings.Contains(tc.yaml, "accelerators") && strings.Count(tc.yaml, "\n") < 4 {
				file = "x.yaml"
			}
			_, err := Parse(file, []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestJetsonExampleParses(t *testing.T) {
	data, err := os.ReadFile("../../examples/jetson-orin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("jetson-orin.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if l := c.AcceleratorList(); len(l) != 2 || l[0].Name != "gpu" || l[1].Name != "dla" || c.AcceleratorOf("detector_dla") != "dla" {
		t.Fatalf("accelerators %+v", l)
	}
}
