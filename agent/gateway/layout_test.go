package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/wire"
)

// derivedSched parses yaml, resolves its layout against the server's
// instance groups, and builds the scheduler from it.
func derivedSched(t *testing.T, yaml string, groups map[string][]wire.InstanceGroup) (*sched.Scheduler, error) {
	t.Helper()
	c, err := config.Parse("d.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	srv := map[string]*wire.ModelConfig{}
	for name, g := range groups {
		srv[name] = &wire.ModelConfig{Name: name, InstanceGroups: g}
	}
	if _, err := c.Resolve(srv); err != nil {
		t.Fatal(err)
	}
	sc, err := gateway.SchedConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return sched.New(sc)
}

// mostAtOnce submits one frame of each stream at once, then completes each
// dispatched job as it is dispatched, and reports the most jobs that ran at
// the same time.
func mostAtOnce(t *testing.T, s *sched.Scheduler, streams []string, model map[string]string) int {
	t.Helper()
	now := sched.Time(time.Second)
	var acts []sched.Action
	running := map[uint64]bool{}
	most := 0
	note := func() {
		for _, a := range acts {
			if a.Kind == sched.Dispatch {
				running[a.Token] = true
			}
		}
		most = max(most, len(running))
		acts = acts[:0]
	}
	for i, st := range streams {
		acts = s.Arrive(now, sched.Request{Token: uint64(i + 1), Stream: st, Model: model[st], Capture: now}, acts)
		note()
	}
	for len(running) > 0 {
		for tok := range running {
			now += sched.Time(2 * time.Millisecond)
			delete(running, tok)
			acts = s.Complete(now, tok, true, acts)
			note()
			break
		}
	}
	return most
}

const twoOnDLA0 = `
models:
  lane: {exec_ms: 10}
  seg: {exec_ms: 10}
  det: {exec_ms: 10}
streams:
  - {name: lane, model: lane, class: high, period_ms: 100, max_age_ms: 200}
  - {name: seg, model: seg, class: high, period_ms: 100, max_age_ms: 200}
  - {name: det, model: det, class: high, period_ms: 100, max_age_ms: 200}
`

// Two engines built for DLA core 0 run one after the other on it (NVIDIA:
// several models on one core run in sequential order). Derived from the
// server, dla0 has one slot, so vig never runs them at once; the DLA pool of
// today's syntax (dla: 2) runs them together, which is what this catches.
func TestDerivedDLACoreRunsOneAtATime(t *testing.T) {
	dla0 := wire.InstanceGroup{Kind: wire.KindGPU, Count: 1, SecondaryDevices: []wire.SecondaryDevice{{Kind: wire.KindNVDLA, DeviceID: 0}}}
	groups := map[string][]wire.InstanceGroup{"lane": {dla0}, "seg": {dla0}, "det": {{Kind: wire.KindGPU, Count: 1}}}
	model := map[string]string{"lane": "lane", "seg": "seg"}
	s, err := derivedSched(t, twoOnDLA0, groups)
	if err != nil {
		t.Fatal(err)
	}
	if n := mostAtOnce(t, s, []string{"lane", "seg"}, model); n != 1 {
		t.Fatalf("derived layout: %d engines of DLA core 0 ran at once, want 1", n)
	}
	// Today's pool: the same two engines counted as parallel.
	pool, err := config.Parse("p.yaml", []byte(strings.Replace(twoOnDLA0, "models:\n  lane: {exec_ms: 10}\n  seg: {exec_ms: 10}\n  det: {exec_ms: 10}",
		"accelerators: {gpu: 1, dla: 2}\nmodels:\n  lane: {exec_ms: 10, on: dla}\n  seg: {exec_ms: 10, on: dla}\n  det: {exec_ms: 10, on: gpu}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := gateway.SchedConfig(pool)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := sched.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	if n := mostAtOnce(t, ps, []string{"lane", "seg"}, model); n != 2 {
		t.Fatalf("the dla: 2 pool ran %d at once: this test no longer shows what the derived layout fixes", n)
	}
}

// A model with one instance on a GPU of two slots never runs twice at once;
// one with two instances does.
func TestDerivedCountOneRunsOnce(t *testing.T) {
	y := `
backend: {slots: 2}
models:
  one: {exec_ms: 10}
  two: {exec_ms: 10}
streams:
  - {name: a1, model: one, class: high, period_ms: 100, max_age_ms: 200}
  - {name: b1, model: one, class: high, period_ms: 100, max_age_ms: 200}
  - {name: a2, model: two, class: high, period_ms: 100, max_age_ms: 200}
  - {name: b2, model: two, class: high, period_ms: 100, max_age_ms: 200}
`
	s, err := derivedSched(t, y, map[string][]wire.InstanceGroup{"one": {{Kind: wire.KindGPU, Count: 1}}, "two": {{Kind: wire.KindGPU, Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	model := map[string]string{"a1": "one", "b1": "one", "a2": "two", "b2": "two"}
	if n := mostAtOnce(t, s, []string{"a1", "b1"}, model); n != 1 {
		t.Fatalf("a count-1 model ran %d at once", n)
	}
	if n := mostAtOnce(t, s, []string{"a2", "b2"}, model); n != 2 {
		t.Fatalf("a count-2 model on a GPU of 2 slots ran %d at once, want 2", n)
	}
}

// SchedConfig carries the resolved layout, instances, variants and
// interference to the scheduler.
func TestSchedConfigLayout(t *testing.T) {
	c, err := config.Parse("o.yaml", []byte(`
backend: {slots: 2}
interference: {gpu: 1.3, dla0: 1.15}
models:
  detector: {variants: [detector_gpu, detector_dla0]}
  detector_gpu: {exec_ms: 8}
  detector_dla0: {exec_ms: 14}
streams:
  - {name: cam, model: detector, class: protected, period_ms: 50, max_age_ms: 50}
`))
	if err != nil {
		t.Fatal(err)
	}
	dla0 := wire.InstanceGroup{Kind: wire.KindGPU, Count: 1, SecondaryDevices: []wire.SecondaryDevice{{Kind: wire.KindNVDLA, DeviceID: 0}}}
	if _, err := c.Resolve(map[string]*wire.ModelConfig{"detector_gpu": {InstanceGroups: []wire.InstanceGroup{{Kind: wire.KindGPU, Count: 1}}},
		"detector_dla0": {InstanceGroups: []wire.InstanceGroup{dla0}}}); err != nil {
		t.Fatal(err)
	}
	sc, err := gateway.SchedConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	want := []sched.AcceleratorSpec{{Name: "gpu", Slots: 2, Interference: 1.3}, {Name: "dla0", Slots: 1, Interference: 1.15}}
	if sc.Slots != 0 || len(sc.Accelerators) != 2 || sc.Accelerators[0] != want[0] || sc.Accelerators[1] != want[1] {
		t.Fatalf("accelerators %d %+v, want %+v", sc.Slots, sc.Accelerators, want)
	}
	byName := map[string]sched.ModelSpec{}
	for _, m := range sc.Models {
		byName[m.Name] = m
	}
	if d := byName["detector"]; strings.Join(d.Variants, ",") != "detector_gpu,detector_dla0" || d.Exec != 0 || d.Accelerator != "" {
		t.Errorf("logical model %+v", d)
	}
	if g := byName["detector_gpu"]; g.Accelerator != "gpu" || g.Instances != 1 {
		t.Errorf("detector_gpu %+v: want gpu, 1 instance (below the GPU's 2 slots)", g)
	}
	if d := byName["detector_dla0"]; d.Accelerator != "dla0" || d.Instances != 1 {
		t.Errorf("detector_dla0 %+v: want dla0, 1 instance (as the server says; its core's one slot bounds it anyway)", d)
	}
}
