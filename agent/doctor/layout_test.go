package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/config"
)

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDetectProfile(t *testing.T) {
	for _, tt := range []struct {
		root       string
		name       string
		dla, npu   int
		recognised bool
	}{
		{"../../jetson/testdata/orin-nano", "Jetson Orin Nano 8GB", 0, 0, true},
		{"../../jetson/testdata/orin-nx", "Jetson Orin NX 16GB", 2, 0, true},
		{"../../android/testdata/phone-awake", "Android phone", 0, 1, true},
		{"testdata", "", 0, 0, false},
	} {
		p, ok := DetectProfile(os.DirFS(tt.root), func(string) string { return "" })
		if ok != tt.recognised || p.Name != tt.name || p.DLACores != tt.dla || p.NPUs != tt.npu || ok && p.Why == "" {
			t.Errorf("%s: %+v %v", tt.root, p, ok)
		}
	}
}

// dlaSlots matches a remedy's DLA pool size.
var dlaSlots = regexp.MustCompile(`(not )?accelerators: \{dla: (\d+)\}`)

// No remedy asks for more DLA cores than the device has: a DLA pool that
// cannot take the protected load gets "not accelerators: {dla: 3}: a
// Jetson AGX Orin has 2 DLA cores", never the setting itself.
func TestRemediesWithinDevice(t *testing.T) {
	// Three protected streams of 20 ms every 33 ms need 1.82 DLA slots:
	// with two cores that fits; at 25 ms every 33 ms, 2.27 do not.
	c := parse(t, `
accelerators: {gpu: 1, dla: 2}
models:
  a: {exec_ms: 25, on: dla}
  b: {exec_ms: 25, on: dla}
  c: {exec_ms: 25, on: dla}
  g: {exec_ms: 5, on: gpu}
streams:
  - {name: a, model: a, class: protected, period_ms: 33, max_age_ms: 66}
  - {name: b, model: b, class: protected, period_ms: 33, max_age_ms: 66}
  - {name: c, model: c, class: protected, period_ms: 33, max_age_ms: 66}
  - {name: g, model: g, class: high, period_ms: 33, max_age_ms: 66}
`)
	profiles := []*Profile{nil}
	for _, n := range ProfileNames() {
		p := Profiles[n]
		profiles = append(profiles, &p)
	}
	for _, p := range profiles {
		limit := maxDLACores
		name := "no profile"
		if p != nil {
			limit, name = p.DLACores, p.Name
		}
		fs := AnalyzeFor(c, p)
		if _, ok := find(fs, CodeProtectedUnsched, ""); !ok {
			t.Fatalf("%s: the DLA load is not reported: %v", name, codes(fs, Warning))
		}
		offered := false
		for _, f := range fs {
			for _, r := range f.Remedy {
				for _, m := range dlaSlots.FindAllStringSubmatch(r, -1) {
					n, _ := strconv.Atoi(m[2])
					if m[1] == "" && n > limit {
						t.Errorf("%s: remedy %q asks for %d DLA cores (device: %d)", name, r, n, limit)
					}
					offered = offered || m[1] == "not "
				}
			}
		}
		if !offered {
			t.Errorf("%s: no remedy says why more DLA cores are not the way", name)
		}
	}
	f, _ := find(AnalyzeFor(c, &[]Profile{Profiles["orin"]}[0]), CodeProtectedUnsched, "")
	if !strings.Contains(strings.Join(f.Remedy, "\n"), "not accelerators: {dla: 3}: a Jetson AGX Orin has 2 DLA cores") {
		t.Errorf("orin remedies: %q", f.Remedy)
	}
}

// Declared accelerators the device does not have are errors with the fix.
func TestAcceleratorBeyondDevice(t *testing.T) {
	orin, nx8, nano, phone := Profiles["orin"], Profiles["orin-nx-8gb"], Profiles["orin-nano"], Profiles["phone"]
	for _, tt := range []struct {
		accels, on string
		p          *Profile
		want       string // "" for no finding
	}{
		{"{gpu: 1, dla: 3}", "dla", &orin, "dla has 3 slots, but a Jetson AGX Orin has 2 DLA cores"},
		{"{gpu: 1, dla: 3}", "dla", nil, "no Jetson has more than 2 DLA cores"},
		{"{gpu: 1, dla: 2}", "dla", &orin, ""},
		{"{gpu: 1, dla: 2}", "dla", &nano, "dla: a Jetson Orin Nano 8GB has no DLA core"},
		{"{gpu: 1, dla0: 2}", "dla0", nil, "dla0 has 2 slots, but a DLA core runs one engine at a time"},
		{"{gpu: 1, dla0: 1, dla2: 1}", "dla2", &orin, "dla2: a Jetson AGX Orin has 2 DLA cores (dla0…dla1): dla2 does not exist"},
		{"{gpu: 1, dla0: 1, dla1: 1}", "dla1", &nx8, "dla1: a Jetson Orin NX 8GB has 1 DLA core (dla0): dla1 does not exist"},
		{"{gpu: 1, dla0: 1}", "dla0", &nx8, ""},
		{"{gpu: 1, dla: 2}", "dla", &nx8, "dla has 2 slots, but a Jetson Orin NX 8GB has 1 DLA core"},
		{"{gpu: 4}", "gpu", &orin, ""},
		{"{gpu: 1, npu: 2}", "npu", &phone, "npu has 2 slots, but an Android phone runs one NPU job at a time"},
		{"{gpu: 1, npu: 1}", "npu", &phone, ""},
	} {
		c := parse(t, "accelerators: "+tt.accels+"\nmodels:\n  m: {exec_ms: 5, on: "+tt.on+"}\nstreams:\n  - {name: s, model: m, class: high, period_ms: 33, max_age_ms: 66}\n")
		f, ok := find(AnalyzeFor(c, tt.p), CodeBeyondDevice, "")
		switch {
		case tt.want == "" && ok:
			t.Errorf("%s: %+v", tt.accels, f)
		case tt.want != "" && (!ok || f.Severity != Error || !strings.Contains(f.Message, tt.want) || len(f.Remedy) == 0):
			t.Errorf("%s: want %q, got %+v", tt.accels, tt.want, f)
		}
	}
}

// The layout: accelerators with slots, interference and source; each model's
// accelerator; a logical model's variants.
func TestLayoutReport(t *testing.T) {
	c := &config.Config{
		Backend:      config.Backend{Slots: 3},
		Accelerators: map[string]int{"gpu": 1, "dla0": 1, "dla1": 1},
		Models: map[string]config.Model{
			"detector_gpu":  {ExecMs: 8, On: "gpu"},
			"detector_dla0": {ExecMs: 14, On: "dla0"},
			"lane":          {ExecMs: 14, On: "dla1"},
		},
		Streams: []config.Stream{
			{Name: "det", Model: "detector_dla0", Class: config.ClassProtected, PeriodMs: 33, MaxAgeMs: 50},
			{Name: "lane", Model: "lane", Class: config.ClassHigh, PeriodMs: 33, MaxAgeMs: 66},
		},
	}
	orin := Profiles["orin"]
	r := Run(context.Background(), c, Options{Profile: &orin})
	if len(r.Accelerators) != 3 || len(r.Models) != 3 || r.Device == nil || r.Device.DLACores != 2 {
		t.Fatalf("report layout: %+v %+v %+v", r.Accelerators, r.Models, r.Device)
	}
	for _, m := range r.Models {
		if m.Accelerator != c.Models[m.Name].On || m.Source != "config" {
			t.Errorf("model %+v", m)
		}
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"device: Jetson AGX Orin (2 DLA cores, 0 NPUs)",
		"ACCELERATOR  SLOTS  INTERFERENCE  SOURCE\ndla0         1      -             config\n",
		"detector_dla0  dla0         -          config\n",
		"lane           dla1         -          config\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var back Report
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Models) != 3 || back.Accelerators[0].Source != "config" {
		t.Fatalf("json: %v %+v", err, back)
	}

	// A logical model, interference and the server as source, as a
	// derived layout reports them.
	r.Accelerators[2].Interference, r.Accelerators[2].Source = 1.3, "server"
	r.Models = append([]ModelPlacement{{Name: "detector", Variants: []string{"detector_dla0", "detector_gpu"}, Source: "config"}}, r.Models...)
	r.Models[2].Instances, r.Models[2].Source = 2, "server"
	b.Reset()
	if err := r.WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, want := range []string{
		"gpu          1      ×1.3          server\n",
		"detector       variants detector_dla0 (dla0), detector_gpu (gpu)  -          config\n",
		"detector_gpu   gpu                                                2          server\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// An interference factor that breaks a plan which holds without it is
// flagged, and only when another accelerator has work beside it.
func TestInterferenceBreaksPlan(t *testing.T) {
	c := parse(t, `
accelerators: {gpu: 1, dla0: 1}
models:
  det: {exec_ms: 28, on: gpu}
  lane: {exec_ms: 10, on: dla0}
streams:
  - {name: det, model: det, class: protected, period_ms: 33, max_age_ms: 33}
  - {name: lane, model: lane, class: high, period_ms: 33, max_age_ms: 66}
`)
	l := layoutOf(c, nil)
	if fs := analyze(c, l); len(codes(fs, Warning)) != 0 {
		t.Fatalf("without interference the plan holds: %v", codes(fs, Warning))
	}
	l.accels[0].Interference = 1.3 // gpu: 28 ms × 1.3 = 36.4 ms > 33 ms
	if l.accels[0].Name != "gpu" {
		t.Fatalf("order %+v", l.accels)
	}
	fs := analyze(c, l)
	f, ok := find(fs, CodeInterference, "")
	if !ok || f.Accelerator != "gpu" || f.Severity != Warning || f.Numbers["interference"] != 1.3 || !strings.Contains(f.Message, "PROTECTED_WORKLOAD_UNSCHEDULABLE") {
		t.Fatalf("%+v (codes %v)", f, codes(fs, Warning))
	}
	if u, _ := find(fs, CodeProtectedUnsched, ""); u.Numbers["u_protected"] != 1.103 {
		t.Errorf("utilization with the factor: %v", u.Numbers)
	}
	// Nothing runs beside the GPU: no slowdown to price.
	c.Streams = c.Streams[:1]
	if fs := analyze(c, l); len(codes(fs, Warning)) != 0 {
		t.Errorf("interference priced with the GPU alone: %v", codes(fs, Warning))
	}
}

// A stream of a logical model is analysed on the variant with room, and an
// overbooked accelerator points at a variant elsewhere.
func TestVariantsPlacedWithRoom(t *testing.T) {
	c := parse(t, `
accelerators: {gpu: 1, dla0: 1, dla1: 1}
models:
  detector: {exec_ms: 14, on: dla0}
  detector_gpu: {exec_ms: 8, on: gpu}
  detector_dla0: {exec_ms: 14, on: dla0}
  seg: {exec_ms: 10, on: dla0}
  pose: {exec_ms: 20, on: gpu}
  depth: {exec_ms: 20, on: gpu}
streams:
  - {name: seg, model: seg, class: protected, period_ms: 33, max_age_ms: 66}
  - {name: det, model: detector, class: high, period_ms: 33, max_age_ms: 66}
  - {name: pose, model: pose, class: high, period_ms: 33, max_age_ms: 66}
  - {name: depth, model: depth, class: high, period_ms: 33, max_age_ms: 66}
`)
	l := layoutOf(c, nil)
	d := l.models["detector"]
	d.Accelerator, d.Variants = "", []string{"detector_gpu", "detector_dla0"}
	l.models["detector"] = d
	at := l.place(c)
	// The GPU carries 40/33 of high work, dla0 10/33: det goes to dla0.
	if at["det"] != (placed{accel: "dla0", model: "detector_dla0"}) {
		t.Fatalf("det placed %+v", at["det"])
	}
	fs := analyze(c, l)
	f, ok := find(fs, CodeHighOverbooked, "")
	if !ok || f.Accelerator != "gpu" {
		t.Fatalf("gpu overbooked: %v", codes(fs, Warning))
	}
	if rem := strings.Join(f.Remedy, "\n"); !strings.Contains(rem, "run pose on dla1 (on: dla1), if pose is built for it: dla1 is at 0% of its 1 slot, with pose at 61%") {
		t.Errorf("no move off the GPU:\n%s", rem)
	}
}

// A stream of a logical model is pointed at its variant on another
// accelerator with room, by that variant's name and exec_ms.
func TestElsewhereNamesVariant(t *testing.T) {
	c := parse(t, `
accelerators: {gpu: 1, dla1: 1}
models:
  detector: {exec_ms: 8, on: gpu}
  detector_gpu: {exec_ms: 8, on: gpu}
  detector_dla1: {exec_ms: 14, on: dla1}
  pose: {exec_ms: 5, on: gpu}
streams:
  - {name: det, model: detector, class: protected, period_ms: 33, max_age_ms: 50}
  - {name: pose, model: pose, class: high, period_ms: 33, max_age_ms: 66}
`)
	l := layoutOf(c, nil)
	d := l.models["detector"]
	d.Accelerator, d.Variants = "", []string{"detector_gpu", "detector_dla1"}
	l.models["detector"] = d
	analyze(c, l)
	g, ok := l.group("gpu")
	if !ok {
		t.Fatal("no gpu group")
	}
	i := slices.IndexFunc(g.streams, func(s stream) bool { return s.cfg.Name == "det" })
	if i < 0 || g.streams[i].cfg.Model != "detector_gpu" || g.streams[i].logical != "detector" {
		t.Fatalf("det on the gpu: %+v", g.streams)
	}
	got := texts(g.elsewhere(g.streams[i], true))
	want := "or its variant detector_dla1 on dla1: dla1 is at 0% of its 1 slot, with det at 42%"
	if len(got) != 1 || got[0] != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A stream the layout places nowhere is said, not dropped from the analysis.
func TestStreamUnplaced(t *testing.T) {
	c := parse(t, `
accelerators: {gpu: 1, dla0: 1}
models:
  detector: {exec_ms: 8, on: gpu}
streams:
  - {name: det, model: detector, class: protected, period_ms: 33, max_age_ms: 50}
`)
	l := layoutOf(c, nil)
	d := l.models["detector"]
	d.Accelerator = "" // a logical model whose variants the layout lacks
	l.models["detector"] = d
	f, ok := find(analyze(c, l), CodeStreamUnplaced, "det")
	if !ok || f.Severity != Warning || f.Line == 0 || len(f.Remedy) == 0 {
		t.Fatalf("%+v", f)
	}
}

// A model bound to one instance runs one job at a time on a GPU of two
// slots: its streams must fit in one.
func TestInstancesOverbooked(t *testing.T) {
	c := parse(t, `
accelerators: {gpu: 2, dla0: 1}
models:
  det: {exec_ms: 20, on: gpu}
  lane: {exec_ms: 5, on: dla0}
streams:
  - {name: front, model: det, class: protected, period_ms: 33, max_age_ms: 66}
  - {name: rear, model: det, class: high, period_ms: 33, max_age_ms: 66}
  - {name: lane, model: lane, class: high, period_ms: 33, max_age_ms: 66}
`)
	l := layoutOf(c, nil)
	if _, ok := find(analyze(c, l), CodeInstancesOverbooked, ""); ok {
		t.Fatal("instances as many as the slots: nothing to report")
	}
	m := l.models["det"]
	m.Instances = 1
	l.models["det"] = m
	f, ok := find(analyze(c, l), CodeInstancesOverbooked, "")
	// 2 × 20/33 = 1.21 of one instance.
	if !ok || f.Severity != Warning || f.Accelerator != "gpu" || f.Numbers["u_model"] != 1.212 || !strings.Contains(f.Remedy[0], "instance_group count: 2") {
		t.Fatalf("%+v", f)
	}
}
