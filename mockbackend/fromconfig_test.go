package mockbackend

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// embedded parses an embedded-backend config and serves what FromConfig
// makes of it, recording the timeline.
func embedded(t *testing.T, yaml string) (Config, *Running, inference.GRPCInferenceServiceClient) {
	t.Helper()
	c, err := config.Parse("embedded.yaml", []byte("backend: {address: \"127.0.0.1:0\", embedded: true}\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg := FromConfig(c)
	cfg.Timeline = true
	r, cl, _ := serve(t, "127.0.0.1:0", cfg)
	return cfg, r, cl
}

// The embedded mock runs a model's instances as the config gives them: with
// instances: 2 two jobs of the model run at once on a GPU of two slots, with
// instances: 1 never, and its ModelConfig says the count vig schedules by.
func TestFromConfigInstances(t *testing.T) {
	for _, n := range []int{1, 2} {
		_, r, c := embedded(t, "accelerators: {gpu: 2}\nmodels:\n  m: {exec_ms: 100, instances: "+string(rune('0'+n))+"}\n")
		burst(t, c, 4, "m")
		jobs := r.Timeline()
		if len(jobs) != 4 {
			t.Fatalf("instances %d: %d jobs, want 4", n, len(jobs))
		}
		overlap := false
		for i, a := range jobs {
			for _, b := range jobs[i+1:] {
				overlap = overlap || overlaps(a, b)
			}
		}
		if got := r.pools[0].maxRunning.Load(); overlap != (n == 2) || got != int64(n) {
			t.Errorf("instances %d: jobs of m ran at once: %v; at most %d at once", n, overlap, got)
		}
		resp, err := c.ModelConfig(context.Background(), &inference.ModelConfigRequest{Name: "m"})
		if err != nil {
			t.Fatal(err)
		}
		mc, err := wire.ParseModelConfig(resp.Config)
		if err != nil || len(mc.InstanceGroups) != 1 || mc.InstanceGroups[0].Count != int32(n) {
			t.Errorf("instances %d: instance groups %+v %v", n, mc.InstanceGroups, err)
		}
	}
}

// The embedded mock slows co-running jobs by the config's interference: a
// job that starts while the other accelerator runs one takes its length ×
// its accelerator's factor; without interference: no job is slowed.
func TestFromConfigInterference(t *testing.T) {
	const layout = "accelerators: {gpu: 1, dla0: 1}\nmodels:\n  g: {exec_ms: 20, on: gpu}\n  d: {exec_ms: 20, on: dla0}\n"
	for _, factors := range []map[string]float64{{"gpu": 1.5, "dla0": 1.25}, nil} {
		y := layout
		if factors != nil {
			y += "interference: {gpu: 1.5, dla0: 1.25}\n"
		}
		cfg, r, c := embedded(t, y)
		burst(t, c, 4, "g", "d")
		slowed := 0
		for _, j := range r.Timeline() {
			want := ExecTime(cfg.Seed, j.Stream, j.Frame, 20*time.Millisecond)
			if j.Interference != 1 {
				if j.Interference != factors[j.Accelerator] {
					t.Errorf("%s on %s: factor %v, want %v", j.ID, j.Accelerator, j.Interference, factors[j.Accelerator])
				}
				want = time.Duration(math.Round(float64(want) * j.Interference))
				slowed++
			}
			if got := j.End.Sub(j.Start); got != want {
				t.Errorf("%s on %s: took %v (factor %v), want %v", j.ID, j.Accelerator, got, j.Interference, want)
			}
		}
		if (slowed > 0) != (factors != nil) {
			t.Errorf("interference %v: %d jobs slowed", factors, slowed)
		}
	}
}

// With the backend.slots shorthand there is one accelerator: interference
// has nothing to slow, and the embedded mock starts without it.
func TestFromConfigInterferenceOneAccelerator(t *testing.T) {
	cfg, _, _ := embedded(t, "interference: {gpu: 1.3}\nmodels:\n  m: {exec_ms: 5}\n")
	if cfg.Interference != nil || len(cfg.Accelerators) != 0 {
		t.Errorf("shorthand: interference %v, accelerators %v", cfg.Interference, cfg.Accelerators)
	}
	if _, err := New(Config{Interference: map[string]float64{"gpu": 1.3}, Spin: -1}); err == nil || !strings.Contains(err.Error(), "drop Config.Interference") {
		t.Errorf("interference without accelerators: %v", err)
	}
}
