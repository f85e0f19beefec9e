package bench

import (
	"context"
	"fmt"
	"time"
)

// OverloadOptions configures the overload benchmark.
type OverloadOptions struct {
	VigBinary string
	Scenario  []byte        // scenario B's YAML
	Duration  time.Duration // per case, default 60 s
	Factor    int           // × the contracted frame rate, default 10
	Flooder   string        // the stream flooding alone in the second case, default detector
	TempDir   string
	Progress  func(format string, args ...any)
}

// OverloadCase is one overload run: every sensor at Factor × its rate, or one.
type OverloadCase struct {
	Name    string `json:"name"`
	Flooder string `json:"flooder,omitempty"` // "" = every stream
	// Memory is vig's RSS, goroutines and open fds over the samples.
	Memory  MemStats     `json:"memory"`
	Checks  LoadChecks   `json:"checks"`
	Streams []LoadStream `json:"streams"` // protected first
	Samples []Sample     `json:"samples"`
}

// OverloadResult is the overload benchmark's output.
type OverloadResult struct {
	Duration time.Duration  `json:"duration_ns"`
	Factor   int            `json:"factor"`
	Depth    int            `json:"client_depth"`
	Every    time.Duration  `json:"sample_every_ns"`
	Config   string         `json:"vig_config"` // the YAML vig ran with
	Cases    []OverloadCase `json:"cases"`
}

func (o *OverloadOptions) defaults() {
	if o.Duration <= 0 {
		o.Duration = 60 * time.Second
	}
	if o.Factor <= 0 {
		o.Factor = 10
	}
	if o.Flooder == "" {
		o.Flooder = "detector"
	}
}

// RunOverload runs scenario B's sensors at o.Factor × their contracted frame
// rate against a fresh vig child process for o.Duration, then the same with only
// o.Flooder at that rate and the others at theirs.
func RunOverload(ctx context.Context, o OverloadOptions) (*OverloadResult, error) {
	o.defaults()
	res := &OverloadResult{Duration: o.Duration, Factor: o.Factor, Depth: loadDepth, Every: time.Second}
	streams, err := scenarioStreams(o.Scenario)
	if err != nil {
		return nil, err
	}
	found := false
	for _, s := range streams {
		found = found || s == o.Flooder
	}
	if !found {
		return nil, fmt.Errorf("flooding stream %q is not in the scenario (streams: %v)", o.Flooder, streams)
	}
	for _, c := range []struct{ name, flooder string }{{"every sensor", ""}, {o.Flooder + " alone", o.Flooder}} {
		factor := map[string]int{}
		for _, s := range streams {
			if c.flooder == "" || c.flooder == s {
				factor[s] = o.Factor
			}
		}
		label := fmt.Sprintf("overload, %s at %d×", c.name, o.Factor)
		lo := loadOptions{VigBinary: o.VigBinary, Scenario: o.Scenario, Factor: factor, Duration: o.Duration, TempDir: o.TempDir,
			OnSample: func(s Sample) {
				if o.Progress != nil && (int(s.T)%10 == 0 || s.Err != "") {
					o.Progress("%s: %.0f/%.0f s, RSS %.1f MiB, %d goroutines, %d fds %s", label, s.T, o.Duration.Seconds(), mib(s.RSS), s.Goroutines, s.FDs, s.Err)
				}
			}}
		if o.Progress != nil {
			o.Progress("%s (%v)", label, o.Duration)
		}
		run, err := runLoad(ctx, lo)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		res.Config = run.ConfigYAML
		oc := OverloadCase{Name: c.name, Flooder: c.flooder, Streams: summarizeStreams(run), Samples: run.Samples}
		oc.Memory = Memory(run.Samples, o.Duration.Seconds())
		oc.Checks = checkRun(run, oc.Streams)
		res.Cases = append(res.Cases, oc)
	}
	return res, nil
}
