package config

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/wire"
)

func gpuGroup(count int32) wire.InstanceGroup {
	return wire.InstanceGroup{Kind: wire.KindGPU, Count: count}
}

func dlaGroup(core int64) wire.InstanceGroup {
	return wire.InstanceGroup{Kind: wire.KindGPU, Count: 1, SecondaryDevices: []wire.SecondaryDevice{{Kind: wire.KindNVDLA, DeviceID: core}}}
}

func served(groups map[string][]wire.InstanceGroup) map[string]*wire.ModelConfig {
	out := map[string]*wire.ModelConfig{}
	for name, g := range groups {
		out[name] = &wire.ModelConfig{Name: name, InstanceGroups: g}
	}
	return out
}

func mustParse(t *testing.T, y string) *Config {
	t.Helper()
	c, err := Parse("t.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const orinYAML = `
interference: {gpu: 1.3, dla0: 1.15, dla1: 1.15}
models:
  detector: {variants: [detector_gpu, detector_dla0, detector_dla1]}
  detector_gpu: {exec_ms: 8}
  detector_dla0: {exec_ms: 14}
  detector_dla1: {exec_ms: 14}
  lane: {exec_ms: 14}
streams:
  - {name: cam, model: detector, class: protected, period_ms: 50, max_age_ms: 50}
  - {name: lane, model: lane, class: high, period_ms: 50, max_age_ms: 100}
`

// The Jetson Orin shape: a GPU engine (count 1) and one engine per DLA core
// give gpu:1, dla0:1, dla1:1, each model where the server binds it.
func TestDeriveOrin(t *testing.T) {
	c := mustParse(t, orinYAML)
	if !c.DerivesLayout() {
		t.Fatal("no accelerators and no on: must derive the layout")
	}
	srv := served(map[string][]wire.InstanceGroup{
		"detector_gpu":  {gpuGroup(1)},
		"detector_dla0": {dlaGroup(0)},
		"detector_dla1": {dlaGroup(1)},
		"lane":          {dlaGroup(0)},
	})
	notes, err := c.Resolve(srv)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 {
		t.Errorf("notes %v", notes)
	}
	got := c.AcceleratorList()
	want := []Accelerator{{Name: "gpu", Slots: 1, Source: FromServer}, {Name: "dla0", Slots: 1, Source: FromServer}, {Name: "dla1", Slots: 1, Source: FromServer}}
	if len(got) != len(want) {
		t.Fatalf("accelerators %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("accelerator %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for model, accel := range map[string]string{"detector_gpu": "gpu", "detector_dla0": "dla0", "detector_dla1": "dla1", "lane": "dla0", "detector": ""} {
		if a := c.AcceleratorOf(model); a != accel {
			t.Errorf("%s on %q, want %q", model, a, accel)
		}
	}
	if p := c.PlacementOf("lane"); p.Source != FromServer || p.Instances != 1 {
		t.Errorf("lane placement %+v", p)
	}
	slots, accels := c.SchedAccelerators()
	if slots != 0 || len(accels) != 3 || accels[0] != (sched.AcceleratorSpec{Name: "gpu", Slots: 1, Interference: 1.3}) ||
		accels[2] != (sched.AcceleratorSpec{Name: "dla1", Slots: 1, Interference: 1.15}) {
		t.Errorf("sched view %d %+v", slots, accels)
	}
	if c.Backend.Slots != 3 {
		t.Errorf("backend.slots after Resolve %d, want the total 3", c.Backend.Slots)
	}
}

func TestDeriveRules(t *testing.T) {
	base := "models:\n  a: {exec_ms: 5}\n  b: {exec_ms: 5}\n"
	for _, tc := range []struct {
		name    string
		yaml    string
		groups  map[string][]wire.InstanceGroup
		accels  string // name=slots/source, in order
		inst    map[string]int
		notes   []string // substrings, one per note
		errLike string
	}{
		{name: "two engines on one DLA core share its one slot", yaml: base,
			groups: map[string][]wire.InstanceGroup{"a": {dlaGroup(0)}, "b": {dlaGroup(0)}},
			accels: "dla0=1/server", inst: map[string]int{"a": 1, "b": 1}},
		{name: "GPU count 2 with the default slot", yaml: base,
			groups: map[string][]wire.InstanceGroup{"a": {gpuGroup(2)}, "b": {gpuGroup(1)}},
			accels: "gpu=1/server", inst: map[string]int{"a": 2, "b": 1}, notes: []string{"set backend.slots: 2"}},
		{name: "backend.slots is the GPU's", yaml: "backend: {slots: 2}\n" + base,
			groups: map[string][]wire.InstanceGroup{"a": {gpuGroup(2)}, "b": {gpuGroup(1)}},
			accels: "gpu=2/server", inst: map[string]int{"a": 2, "b": 1}},
		{name: "cpu slots are the sum of instances", yaml: base,
			groups: map[string][]wire.InstanceGroup{"a": {{Kind: wire.KindCPU, Count: 3}}, "b": {{Kind: wire.KindCPU}}},
			accels: "cpu=4/server", inst: map[string]int{"a": 3, "b": 1}},
		{name: "instances overrides the server's count", yaml: "models:\n  a: {exec_ms: 5, instances: 1}\n  b: {exec_ms: 5}\n",
			groups: map[string][]wire.InstanceGroup{"a": {{Kind: wire.KindCPU, Count: 3}}, "b": {gpuGroup(1)}},
			accels: "gpu=1/server,cpu=1/server", inst: map[string]int{"a": 1, "b": 1}},
		{name: "one model on two accelerators", yaml: base,
			groups: map[string][]wire.InstanceGroup{"a": {gpuGroup(1), dlaGroup(1)}, "b": {dlaGroup(0)}},
			accels: "gpu=1/server,dla0=1/server", inst: map[string]int{"a": 1, "b": 1}, notes: []string{"make a a logical model"}},
		{name: "several GPUs", yaml: base,
			groups: map[string][]wire.InstanceGroup{"a": {{Kind: wire.KindGPU, Count: 1, GPUs: []int32{0}}}, "b": {{Kind: wire.KindGPU, Count: 1, GPUs: []int32{1}}}},
			accels: "gpu=1/server", inst: map[string]int{"a": 1, "b": 1}, notes: []string{"vig governs one GPU"}},
		{name: "nothing described: the shorthand", yaml: "backend: {slots: 3}\n" + base,
			groups: map[string][]wire.InstanceGroup{}, accels: "=3/config", inst: map[string]int{"a": 0, "b": 0}},
		{name: "from_server, nothing described", yaml: "accelerators: from_server\n" + base,
			groups: map[string][]wire.InstanceGroup{}, errLike: "describes none of the models"},
		{name: "a model left undescribed", yaml: base,
			groups: map[string][]wire.InstanceGroup{"a": {gpuGroup(1)}}, errLike: "models.b.on: the server does not say where b runs"},
		{name: "from_server with on: for the undescribed", yaml: "accelerators: from_server\nmodels:\n  a: {exec_ms: 5}\n  b: {exec_ms: 5, on: npu}\n",
			groups: map[string][]wire.InstanceGroup{"a": {gpuGroup(1)}}, accels: "gpu=1/server,npu=1/config", inst: map[string]int{"a": 1, "b": 0}},
		{name: "from_server, on: against the server", yaml: "accelerators: from_server\nmodels:\n  a: {exec_ms: 5, on: gpu}\n  b: {exec_ms: 5}\n",
			groups: map[string][]wire.InstanceGroup{"a": {dlaGroup(1)}, "b": {gpuGroup(1)}}, accels: "gpu=1/server,dla1=1/server",
			inst: map[string]int{"a": 1, "b": 1}, notes: []string{"remove on: from the model"}},
		{name: "interference naming no derived accelerator", yaml: "interference: {dla1: 1.2}\n" + base,
			groups: map[string][]wire.InstanceGroup{"a": {gpuGroup(1)}, "b": {dlaGroup(0)}}, errLike: `interference.dla1: "dla1" is not an accelerator of the server's layout (gpu, dla0)`},
		{name: "declared layout: the server binds elsewhere", yaml: "accelerators: {gpu: 1, dla: 2}\nmodels:\n  a: {exec_ms: 5, on: dla}\n  b: {exec_ms: 5, on: gpu}\n",
			groups: map[string][]wire.InstanceGroup{"a": {dlaGroup(0)}, "b": {gpuGroup(1)}}, accels: "gpu=1/config,dla=2/config",
			inst: map[string]int{"a": 0, "b": 0}, notes: []string{`model a: the config says runs it on "dla"; the server binds it to dla0 (instance_group secondary_devices KIND_NVDLA device_id 0): vig schedules it as the config says; fix: remove accelerators: and every on: to take the server's layout, or declare dla0: 1 and give the model on: dla0`}},
		{name: "declared layout: more jobs than instances", yaml: "accelerators: {gpu: 2}\nmodels:\n  a: {exec_ms: 5, on: gpu}\n  b: {exec_ms: 5, on: gpu, instances: 2}\n",
			groups: map[string][]wire.InstanceGroup{"a": {gpuGroup(1)}, "b": {gpuGroup(2)}}, accels: "gpu=2/config",
			inst: map[string]int{"a": 0, "b": 2}, notes: []string{"model a: the config says lets vig run 2 of its jobs at once; the server runs 1 instance(s) of it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.yaml)
			notes, err := c.Resolve(served(tc.groups))
			if tc.errLike != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errLike) {
					t.Fatalf("error %v, want one saying %q", err, tc.errLike)
				}
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("error %T is no *Error", err)
				}
				if _, ok := c.Resolved(); ok {
					t.Fatal("a failed Resolve must leave the config as it was")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range c.AcceleratorList() {
				got = append(got, a.Name+"="+strconv.Itoa(a.Slots)+"/"+a.Source.String())
			}
			if g := strings.Join(got, ","); g != tc.accels {
				t.Errorf("accelerators %s, want %s", g, tc.accels)
			}
			for m, n := range tc.inst {
				if got := c.InstancesOf(m); got != n {
					t.Errorf("%s: %d instances, want %d", m, got, n)
				}
			}
			if len(notes) != len(tc.notes) {
				t.Fatalf("notes %q, want %d like %q", notes, len(tc.notes), tc.notes)
			}
			for i, want := range tc.notes {
				if !strings.Contains(notes[i].String(), want) {
					t.Errorf("note %q lacks %q", notes[i], want)
				}
			}
		})
	}
}

func TestSameLayout(t *testing.T) {
	c := mustParse(t, "models:\n  a: {exec_ms: 5}\n  b: {exec_ms: 5}\n")
	one, _, err := Derive(c, served(map[string][]wire.InstanceGroup{"a": {dlaGroup(0)}, "b": {dlaGroup(1)}}))
	if err != nil {
		t.Fatal(err)
	}
	two, _, err := Derive(c, served(map[string][]wire.InstanceGroup{"a": {dlaGroup(0)}, "b": {dlaGroup(0)}}))
	if err != nil {
		t.Fatal(err)
	}
	if same, why := SameLayout(one, one); !same {
		t.Fatalf("a layout differs from itself: %s", why)
	}
	same, why := SameLayout(one, two)
	if same || !strings.Contains(why, "accelerator dla1 is gone") || !strings.Contains(why, `b: on "dla1" with 1 instance(s), now on "dla0" with 1`) {
		t.Fatalf("same %v: %q", same, why)
	}
}

func TestParseLayoutKeys(t *testing.T) {
	ok := []string{
		"accelerators: from_server\nmodels: {a: {exec_ms: 5}}\n",
		"accelerators: from_server\nbackend: {slots: 2}\nmodels: {a: {exec_ms: 5, instances: 2}}\n",
		"interference: {gpu: 1.3}\nmodels: {a: {exec_ms: 5}}\n",
		"accelerators: {gpu: 1, dla0: 1}\ninterference: {gpu: 1.3, dla0: 1}\nmodels: {a: {exec_ms: 5, on: gpu}, b: {exec_ms: 5, on: dla0}, l: {variants: [a, b]}}\n" +
			"streams: [{name: s, model: l, class: protected, period_ms: 50, max_age_ms: 6}]\n",
	}
	for _, y := range ok {
		if _, err := Parse("t.yaml", []byte(y)); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
	for _, tc := range []struct{ yaml, want string }{
		{"accelerators: gpu\nmodels: {a: {exec_ms: 5}}\n", `t.yaml:1: accelerators: "gpu": write accelerators: from_server`},
		{"accelerators: from_server\nbackend: {address: 'ring:@npu'}\nmodels: {a: {exec_ms: 5}}\n", "a ring: runtime does not describe its models"},
		{"accelerators: from_server\nbackend: {embedded: true}\nmodels: {a: {exec_ms: 5}}\n", "from_server, but the embedded mock serves the config's own models"},
		{"interference: {gpu: 0.5}\nmodels: {a: {exec_ms: 5}}\n", "interference.gpu: 0.5: a factor from 1"},
		{"interference: {gpu: 11}\nmodels: {a: {exec_ms: 5}}\n", "interference.gpu: 11: a factor from 1"},
		{"accelerators: {gpu: 1}\ninterference: {dla: 1.2}\nmodels: {a: {exec_ms: 5}}\n", `interference.dla: "dla" is not a declared accelerator (declared: gpu)`},
		{"models: {a: {exec_ms: 5, instances: -1}}\n", "models.a.instances: -1"},
		{"models: {a: {exec_ms: 5}, l: {variants: [a], exec_ms: 3}}\n", "models.l.exec_ms: l is a logical model (variants)"},
		{"models: {a: {exec_ms: 5}, l: {variants: [a, x]}}\n", `models.l.variants[1]: unknown model "x"`},
		{"models: {a: {exec_ms: 5}, l: {variants: [a, a]}}\n", `models.l.variants[1]: "a" is listed twice`},
		{"models: {a: {exec_ms: 5}, l: {variants: [a]}, m: {variants: [l]}}\n", `models.m.variants[0]: "l" is itself a logical model`},
		{"models: {a: {exec_ms: 5}, l: {variants: [a]}}\nstreams: [{name: s, model: l, class: high, period_ms: 50, max_age_ms: 4}]\n",
			"max_age_ms: 4 ms is below the execution time of l (5 ms)"},
	} {
		_, err := Parse("t.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// examples/jetson-orin-triton.yaml against the repository it describes:
// gpu, dla0, dla1, each engine on its core.
func TestJetsonTritonExampleDerives(t *testing.T) {
	data, err := os.ReadFile("../../examples/jetson-orin-triton.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, string(data))
	notes, err := c.Resolve(served(map[string][]wire.InstanceGroup{
		"detector_gpu": {gpuGroup(1)}, "pose": {gpuGroup(1)}, "depth": {gpuGroup(1)}, "vlm": {gpuGroup(1)},
		"detector_dla0": {dlaGroup(0)}, "lane_dla0": {dlaGroup(0)},
		"detector_dla1": {dlaGroup(1)}, "segment_dla1": {dlaGroup(1)},
	}))
	if err != nil || len(notes) != 0 {
		t.Fatalf("%v %v", err, notes)
	}
	var got []string
	for _, a := range c.AcceleratorList() {
		got = append(got, a.Name+"="+strconv.Itoa(a.Slots))
	}
	if strings.Join(got, ",") != "gpu=1,dla0=1,dla1=1" || c.AcceleratorOf("lane_dla0") != "dla0" || c.AcceleratorOf("segment_dla1") != "dla1" {
		t.Fatalf("accelerators %v", got)
	}
}
