package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/mockbackend"
)

// DefaultScenarioDir is where the docs/benchmarks.md workloads live in the repository.
const DefaultScenarioDir = "examples/scenarios"

// DefaultWireScenarios are the docs/benchmarks.md workloads the wire benchmark runs:
// A–C on one accelerator, D on a GPU and two DLA cores, D2 on them as Triton
// binds models (per-core engines, variants, interference), E and E-linear with
// six cameras on one batched detector.
var DefaultWireScenarios = []string{"a", "b", "c", "d", "d2", "e", "e-linear"}

// LoadScenarios reads <dir>/<name>.yaml for each name ("a", "b", "e-linear"),
// and the sensors' phases from <dir>/<name>.sensors.yaml when there is one, and
// names each scenario by its name with the first letter upper-case ("A",
// "E-linear"). <name>.repository.yaml, when there is one, is the mock
// backend's model repository (Scenario.Repository); <name>.server.yaml the
// config of vig reading the server (Scenario.Server): one that does not parse
// keeps its error for that policy, and the other policies run.
func LoadScenarios(dir string, names []string) ([]Scenario, error) {
	var out []Scenario
	for _, n := range names {
		path := filepath.Join(dir, n+".yaml")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("scenario %s: %w (run from the repository root, or pass --scenarios DIR)", n, err)
		}
		if err != nil {
			return nil, err
		}
		cfg, err := config.Parse(path, b)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", n, err)
		}
		sc := Scenario{Name: strings.ToUpper(n[:1]) + n[1:], Config: cfg}
		spath := filepath.Join(dir, n+".sensors.yaml")
		switch b, err := os.ReadFile(spath); {
		case err == nil:
			if sc.Phases, err = parsePhases(spath, b, cfg); err != nil {
				return nil, fmt.Errorf("scenario %s: %w", n, err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		rpath := filepath.Join(dir, n+".repository.yaml")
		switch b, err := os.ReadFile(rpath); {
		case err == nil:
			if sc.Repository, err = mockbackend.ParseRepository(rpath, b); err != nil {
				return nil, fmt.Errorf("scenario %s: %w", n, err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		vpath := filepath.Join(dir, n+".server.yaml")
		switch b, err := os.ReadFile(vpath); {
		case err == nil:
			sc.HasServer = true
			if sc.Server, err = config.Parse(vpath, b); err != nil {
				sc.Server, sc.ServerErr = nil, err
			} else if err := sameStreams(sc.Config, sc.Server); err != nil {
				return nil, fmt.Errorf("scenario %s: %s: %w", n, vpath, err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// sameStreams checks that the config of vig reading the server has the
// scenario's streams, in the same order: the same sensors drive both.
func sameStreams(a, b *config.Config) error {
	var an, bn []string
	for _, s := range a.Streams {
		an = append(an, s.Name)
	}
	for _, s := range b.Streams {
		bn = append(bn, s.Name)
	}
	if !slices.Equal(an, bn) {
		return fmt.Errorf("streams %v, want the scenario's %v in that order", bn, an)
	}
	return nil
}

// sensorsFile is <scenario>.sensors.yaml: what the benchmark's sensors do that is
// no part of vig's configuration. phase_ms is each stream's first capture after
// the run's start (ms), for every stream of the scenario.
type sensorsFile struct {
	PhaseMs map[string]float64 `yaml:"phase_ms"`
}

// parsePhases reads a sensors file against the scenario's streams.
func parsePhases(path string, b []byte, cfg *config.Config) (map[string]time.Duration, error) {
	var f sensorsFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w (want phase_ms: {stream: ms, …})", path, err)
	}
	out := map[string]time.Duration{}
	for _, s := range cfg.Streams {
		ms, ok := f.PhaseMs[s.Name]
		if !ok {
			return nil, fmt.Errorf("%s: phase_ms: no phase for stream %s (give every stream's)", path, s.Name)
		}
		frame := s.FrameInterval()
		if frame <= 0 {
			frame = s.Period()
		}
		d := time.Duration(ms * float64(time.Millisecond))
		if !(ms >= 0) || d >= frame {
			return nil, fmt.Errorf("%s: phase_ms.%s: %g: give a phase from 0 to below the stream's frame interval (%v)", path, s.Name, ms, frame)
		}
		out[s.Name] = d
	}
	for name := range f.PhaseMs {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("%s: phase_ms.%s: the scenario has no such stream", path, name)
		}
	}
	return out, nil
}
