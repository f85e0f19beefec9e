package mockbackend

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// orin is a Jetson-Orin-shaped repository: detectors built for the GPU and
// each DLA core, lane on DLA0, segment on DLA1, pose with two GPU instances.
func orin(t *testing.T) Config {
	t.Helper()
	r, err := ParseRepository("orin.yaml", []byte(`
gpu_slots: 2
interference: {gpu: 1.3, dla: 1.15}
models:
  detector_gpu: {exec_ms: 2}
  detector_dla0: {exec_ms: 3, dla_core: 0}
  detector_dla1: {exec_ms: 3, dla_core: 1}
  lane_dla0: {exec_ms: 3, dla_core: 0}
  segment_dla1: {exec_ms: 3, dla_core: 1}
  pose: {exec_ms: 2, count: 2}
  ocr: {exec_ms: 1, kind: cpu, count: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	var cfg Config
	if err := r.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The repository implies the device: the GPU with its slots, one slot per
// DLA core a model is bound to, the CPU with its models' instances.
func TestRepositoryApply(t *testing.T) {
	cfg := orin(t)
	want := []Accelerator{{"gpu", 2}, {"dla0", 1}, {"dla1", 1}, {"cpu", 3}}
	if !slices.Equal(cfg.Accelerators, want) || cfg.Slots != 0 {
		t.Fatalf("accelerators %v (slots %d), want %v", cfg.Accelerators, cfg.Slots, want)
	}
	on := map[string]string{}
	for _, m := range cfg.Models {
		on[m.Name] = m.On
		if m.Name == "pose" && (m.Instances != 2 || m.Exec != 2*time.Millisecond) {
			t.Errorf("pose: %+v", m)
		}
	}
	if on["detector_dla1"] != "dla1" || on["lane_dla0"] != "dla0" || on["detector_gpu"] != "gpu" || on["ocr"] != "cpu" {
		t.Errorf("placement %v", on)
	}
	if cfg.Interference["dla"] != 1.15 {
		t.Errorf("interference %v", cfg.Interference)
	}
	// A model of the vig config the repository does not name: one KIND_GPU
	// instance, its own exec_ms.
	cfg = Config{Models: []Model{{Name: "vlm", Exec: 200 * time.Millisecond}}, Slots: 4}
	r := &Repository{Models: map[string]RepositoryModel{"d": {ExecMs: ptr(3.0), DLACore: ptr(1)}}}
	if err := r.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Slots != 0 || len(cfg.Models) != 2 || cfg.Models[1] != (Model{Name: "vlm", Exec: 200 * time.Millisecond, On: "gpu", Instances: 1}) ||
		!slices.Equal(cfg.Accelerators, []Accelerator{{"gpu", 1}, {"dla1", 1}}) {
		t.Errorf("models %+v, accelerators %v", cfg.Models, cfg.Accelerators)
	}
}

func TestRepositoryErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"models: {a: {kind: tpu}}", `models.a.kind: "tpu": want gpu or cpu`},
		{"models: {a: {count: -1}}", "models.a.count: -1"},
		{"models: {a: {dla_core: -1}}", "models.a.dla_core: -1"},
		{"models: {a: {dla_core: 0, kind: cpu}}", "drop kind: cpu or dla_core"},
		{"models: {a: {exec_ms: -2}}", "models.a.exec_ms: -2"},
		{"gpu_slots: -1", "gpu_slots: -1"},
		{"models: {a: {dla: 0}}", "field dla not found"},
	} {
		if _, err := ParseRepository("r.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "r.yaml: ") {
			t.Errorf("%s: err %v, want %q", tc.yaml, err, tc.want)
		}
	}
	r := &Repository{Models: map[string]RepositoryModel{"x": {}}}
	if err := r.Apply(&Config{}); err == nil || !strings.Contains(err.Error(), "model x: give its exec_ms") {
		t.Errorf("model without exec_ms: %v", err)
	}
	for _, tc := range []struct {
		f    map[string]float64
		want string
	}{
		{map[string]float64{"gpu": 0.9}, "gpu=0.9: give a factor of 1 or more"},
		{map[string]float64{"npu": 1.2}, "interference npu: no such accelerator"},
		{map[string]float64{"gpu": math.Inf(1)}, "give a factor of 1 or more"},
	} {
		cfg := orin(t)
		cfg.Interference, cfg.Spin = tc.f, -1
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.f, err, tc.want)
		}
	}
	if _, err := New(Config{Interference: map[string]float64{"gpu": 1.3}, Spin: -1}); err == nil || !strings.Contains(err.Error(), "give Config.Accelerators (e.g. gpu and dla0) and each Model.On, or drop Config.Interference") {
		t.Errorf("interference without accelerators: %v", err)
	}
	if _, err := New(Config{Models: []Model{{Name: "m", Instances: -1}}, Spin: -1}); err == nil || !strings.Contains(err.Error(), "instances -1") {
		t.Errorf("negative instances: %v", err)
	}
}

func TestParseInstanceAndInterference(t *testing.T) {
	for in, want := range map[string]string{"gpu": "gpu/1", "gpu:2": "gpu/2", "cpu:4": "cpu/4", "dla0": "dla0/1", "dla1:2": "dla1/2"} {
		m, err := ParseInstance(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := m.accelOf() + "/" + string(rune('0'+max(m.Count, 1))); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{"tpu", "gpu:0", "dla", "dla01", "gpu:x", ""} {
		if _, err := ParseInstance(in); err == nil || !strings.Contains(err.Error(), "want gpu, cpu or dla<N>") {
			t.Errorf("%q: err %v", in, err)
		}
	}
	f, err := ParseInterference("gpu=1.3,dla=1.15,dla1=1.2")
	if err != nil || len(f) != 3 || f["gpu"] != 1.3 || f["dla1"] != 1.2 {
		t.Errorf("%v %v", f, err)
	}
	for _, in := range []string{"gpu", "gpu=0.5", "=1.2", "gpu=x", "gpu=1.3,"} {
		if _, err := ParseInterference(in); err == nil || !strings.Contains(err.Error(), "want ACCELERATOR=FACTOR") {
			t.Errorf("%q: err %v", in, err)
		}
	}
	got, err := interferenceOf(map[string]float64{"gpu": 1.3, "dla": 1.15, "dla1": 1.2}, []string{"gpu", "dla0", "dla1", "cpu"})
	if err != nil || !slices.Equal(got, []float64{1.3, 1.15, 1.2, 1}) {
		t.Errorf("factors %v %v", got, err)
	}
}

// The ModelConfig served names each model's placement as Triton's would, and
// parses back with wire.ParseModelConfig.
func TestModelConfigInstanceGroups(t *testing.T) {
	_, c, _ := serve(t, "127.0.0.1:0", orin(t))
	for model, want := range map[string]wire.InstanceGroup{
		"detector_gpu":  {Name: "detector_gpu", Kind: wire.KindGPU, Count: 1, GPUs: []int32{0}},
		"detector_dla1": {Name: "detector_dla1", Kind: wire.KindGPU, Count: 1, GPUs: []int32{0}, SecondaryDevices: []wire.SecondaryDevice{{Kind: wire.KindNVDLA, DeviceID: 1}}},
		"lane_dla0":     {Name: "lane_dla0", Kind: wire.KindGPU, Count: 1, GPUs: []int32{0}, SecondaryDevices: []wire.SecondaryDevice{{Kind: wire.KindNVDLA, DeviceID: 0}}},
		"pose":          {Name: "pose", Kind: wire.KindGPU, Count: 2, GPUs: []int32{0}},
		"ocr":           {Name: "ocr", Kind: wire.KindCPU, Count: 3},
	} {
		resp, err := c.ModelConfig(context.Background(), &inference.ModelConfigRequest{Name: model})
		if err != nil {
			t.Fatal(err)
		}
		mc, err := wire.ParseModelConfig(resp.Config)
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		if len(mc.InstanceGroups) != 1 || !igEqual(mc.InstanceGroups[0], want) || mc.Name != model {
			t.Errorf("%s: instance groups %+v, want %+v", model, mc.InstanceGroups, want)
		}
	}
}

// A model without a count runs as many at once as its accelerator's slots,
// and its instance group says so: a governor reading it must not run the
// model one at a time on `vig mock-backend --slots 3`.
func TestModelConfigCountIsSlotsWithoutInstances(t *testing.T) {
	_, c, _ := serve(t, "127.0.0.1:0", Config{Slots: 3, Models: []Model{{Name: "det", Exec: time.Millisecond}}})
	resp, err := c.ModelConfig(context.Background(), &inference.ModelConfigRequest{Name: "det"})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := wire.ParseModelConfig(resp.Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(mc.InstanceGroups) != 1 || mc.InstanceGroups[0].Count != 3 {
		t.Errorf("instance groups %+v, want count 3 (the slots)", mc.InstanceGroups)
	}
}

func igEqual(a, b wire.InstanceGroup) bool {
	return a.Name == b.Name && a.Kind == b.Kind && a.Count == b.Count && slices.Equal(a.GPUs, b.GPUs) && slices.Equal(a.SecondaryDevices, b.SecondaryDevices)
}

// burst sends n requests of each model at once and waits for the answers.
func burst(t *testing.T, c inference.GRPCInferenceServiceClient, n int, models ...string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n*len(models))
	for _, m := range models {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.ModelInfer(context.Background(), rawRequest(m, FrameID(m, uint64(i)), []byte{byte(i)}))
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// overlaps reports whether two jobs ran at the same time on their timelines.
func overlaps(a, b Job) bool { return a.Start.Before(b.End) && b.Start.Before(a.End) }

// Two engines bound to one DLA core never run at once: a DLA core runs one
// engine at a time, however many models are bound to it.
func TestDLACoreRunsOneEngineAtATime(t *testing.T) {
	cfg := orin(t)
	cfg.Timeline, cfg.Interference = true, nil
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	burst(t, c, 6, "detector_dla0", "lane_dla0", "detector_dla1", "segment_dla1")
	jobs := r.Timeline()
	if len(jobs) != 24 {
		t.Fatalf("%d jobs, want 24", len(jobs))
	}
	for i, a := range jobs {
		if want := a.Model[strings.LastIndexByte(a.Model, '_')+1:]; a.Accelerator != want {
			t.Errorf("%s ran on %s", a.ID, a.Accelerator)
		}
		for _, b := range jobs[i+1:] {
			if a.Accelerator == b.Accelerator && overlaps(a, b) {
				t.Errorf("%s and %s ran at once on %s", a.ID, b.ID, a.Accelerator)
			}
		}
	}
}

// A model of count 1 never runs twice at once, even on a GPU of two slots;
// one of count 2 may, and a request whose model has every instance busy lets
// another model's request behind it run.
func TestInstanceCountBoundsModel(t *testing.T) {
	cfg := Config{Accelerators: []Accelerator{{"gpu", 2}}, Timeline: true, Spin: -1, Models: []Model{
		{Name: "one", Exec: 100 * time.Millisecond, On: "gpu", Instances: 1},
		{Name: "two", Exec: 20 * time.Millisecond, On: "gpu", Instances: 2},
	}}
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	gpu := r.pools[0]
	done := make(chan error, 3)
	send := func(model string, frame uint64) {
		go func() {
			_, err := c.ModelInfer(context.Background(), rawRequest(model, FrameID(model, frame), []byte{1}))
			done <- err
		}()
	}
	started := func(n int) {
		for gpu.running.Load() != int64(n) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	send("one", 0)
	started(1)
	send("one", 1)
	waitQueued(t, gpu, 1) // the second "one" waits with a slot free
	send("two", 0)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	byID := map[string]Job{}
	for _, j := range r.Timeline() {
		byID[j.ID] = j
	}
	one0, one1, two0 := byID[FrameID("one", 0)], byID[FrameID("one", 1)], byID[FrameID("two", 0)]
	if overlaps(one0, one1) {
		t.Errorf("model one (count 1) ran twice at once: %v–%v and %v–%v", one0.Start, one0.End, one1.Start, one1.End)
	}
	if !two0.Start.Before(one1.Start) || !overlaps(one0, two0) {
		t.Errorf("two#0 (queued behind one#1) did not run on the free slot first: two %v, one#1 %v", two0.Start, one1.Start)
	}
	// Many at once: count 1 never overlaps itself; count 2 fills both slots.
	burst(t, c, 5, "one", "two")
	var ones []Job
	for _, j := range r.Timeline() {
		if j.Model == "one" {
			ones = append(ones, j)
		}
	}
	for i, a := range ones {
		for _, b := range ones[i+1:] {
			if overlaps(a, b) {
				t.Errorf("%s and %s of a count-1 model ran at once", a.ID, b.ID)
			}
		}
	}
	if gpu.maxRunning.Load() > 2 {
		t.Errorf("%d executions at once on 2 slots", gpu.maxRunning.Load())
	}
}

// A job that starts while another accelerator runs one takes × its
// accelerator's factor; one that starts on an idle device does not, nor does
// a job already running when another starts.
func TestInterferenceSlowsCoRunningStarts(t *testing.T) {
	s := Config{Accelerators: []Accelerator{{"gpu", 1}, {"dla0", 1}}, Interference: map[string]float64{"gpu": 1.5, "dla": 1.25}, Spin: -1}
	srv, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	gpu, dla := srv.pools[0], srv.pools[1]
	ms := time.Millisecond
	t0 := time.Now()
	get := func(p *slots, at time.Time, exec time.Duration) grant {
		g, err := p.acquireWork(context.Background(), at, work{rows: 1, exec: exec})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g1 := get(gpu, t0, 10*ms) // alone: 10 ms
	d1 := get(dla, t0.Add(2*ms), 10*ms)
	if g1.end.Sub(g1.start) != 10*ms || g1.exec.factor != 1 {
		t.Errorf("first job on an idle device took %v (factor %v), want 10ms", g1.end.Sub(g1.start), g1.exec.factor)
	}
	if d1.start != t0.Add(2*ms) || d1.end.Sub(d1.start) != 12500*time.Microsecond || d1.exec.factor != 1.25 {
		t.Errorf("DLA job started while the GPU ran took %v (factor %v), want 12.5ms", d1.end.Sub(d1.start), d1.exec.factor)
	}
	gpu.release(g1.slot, g1.end)
	dla.release(d1.slot, d1.end)
	// The GPU's next job starts at 20 ms, after the DLA's ended (14.5 ms).
	g2 := get(gpu, t0.Add(20*ms), 10*ms)
	if g2.exec.factor != 1 {
		t.Errorf("GPU job on an idle device slowed by %v", g2.exec.factor)
	}
	// The DLA's next starts at 25 ms, inside the GPU's 20–30 ms.
	d2 := get(dla, t0.Add(25*ms), 8*ms)
	if d2.end.Sub(d2.start) != 10*ms {
		t.Errorf("DLA job took %v, want 8 ms × 1.25", d2.end.Sub(d2.start))
	}
	gpu.release(g2.slot, g2.end)
	// A GPU job given back unrun (its request cancelled or timed out as the
	// slot was granted) ends at its start: it slows nothing.
	g3 := get(gpu, t0.Add(40*ms), 50*ms)
	gpu.release(g3.slot, g3.start)
	dla.release(d2.slot, d2.end)
	d3 := get(dla, t0.Add(45*ms), 8*ms)
	if d3.exec.factor != 1 {
		t.Errorf("DLA job slowed by a GPU job that never ran (factor %v)", d3.exec.factor)
	}
	dla.release(d3.slot, d3.end)
}

// End to end: every job took its frame's time, × its accelerator's factor when
// it was slowed, and a slowed job started while another accelerator's job ran
// on the timeline. (That every co-running start is slowed is
// TestInterferenceSlowsCoRunningStarts': here a job granted a moment after it
// queued may have a start before another accelerator's grant.)
func TestInterferenceOnTimeline(t *testing.T) {
	cfg := orin(t)
	cfg.Timeline = true
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	burst(t, c, 4, "detector_gpu", "detector_dla0", "segment_dla1", "pose")
	jobs := r.Timeline()
	exec := map[string]time.Duration{}
	factor := map[string]float64{"gpu": 1.3, "dla0": 1.15, "dla1": 1.15}
	for _, m := range cfg.Models {
		exec[m.Name] = m.Exec
	}
	slowed := 0
	for _, j := range jobs {
		co := false
		for _, o := range jobs {
			if o.Accelerator != j.Accelerator && !j.Start.Before(o.Start) && j.Start.Before(o.End) {
				co = true
			}
		}
		want := ExecTime(cfg.Seed, j.Stream, j.Frame, exec[j.Model])
		if j.Interference != 1 {
			if j.Interference != factor[j.Accelerator] || !co {
				t.Errorf("%s on %s: factor %v, co-running at start %v", j.ID, j.Accelerator, j.Interference, co)
			}
			want = time.Duration(math.Round(float64(want) * j.Interference))
			slowed++
		}
		if got := j.End.Sub(j.Start); got != want {
			t.Errorf("%s on %s: took %v (factor %v), want %v", j.ID, j.Accelerator, got, j.Interference, want)
		}
	}
	if slowed == 0 || slowed == len(jobs) {
		t.Errorf("%d of %d jobs slowed: the burst should start some alone and some beside another accelerator", slowed, len(jobs))
	}
}

// The embedded backend serves a config's per-core layout as Triton's
// instance groups: on: dla1 is an engine on DLA core 1, on: cpu KIND_CPU;
// scenario D's pooled "dla" stays KIND_GPU as before.
func TestFromConfigPerCore(t *testing.T) {
	c, err := config.Parse("percore.yaml", []byte(`
accelerators: {gpu: 1, dla0: 1, dla1: 1, cpu: 2, dla: 2}
models:
  det: {exec_ms: 14, on: dla1}
  ocr: {exec_ms: 3, on: cpu}
  pose: {exec_ms: 5, on: gpu}
  seg: {exec_ms: 5, on: dla}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"det": "KIND_GPU nvdla 1", "ocr": "KIND_CPU", "pose": "KIND_GPU", "seg": "KIND_GPU"}
	for _, m := range FromConfig(c).Models {
		mc, err := wire.ParseModelConfig(wire.AppendModelConfig(nil, ModelConfigOf(m)))
		if err != nil || len(mc.InstanceGroups) != 1 {
			t.Fatalf("%s: %+v %v", m.Name, mc, err)
		}
		g := mc.InstanceGroups[0]
		got := g.Kind.String()
		for _, d := range g.SecondaryDevices {
			got += fmt.Sprintf(" nvdla %d", d.DeviceID)
		}
		if got != want[m.Name] || g.Count != 1 {
			t.Errorf("%s: %s x%d, want %s x1", m.Name, got, g.Count, want[m.Name])
		}
	}
}
