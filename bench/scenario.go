package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vig-edge/vig/agent/config"
)

// DefaultScenarioDir is where the docs/benchmarks.md workloads live in the repository.
const DefaultScenarioDir = "examples/scenarios"

// DefaultWireScenarios are the docs/benchmarks.md workloads the wire benchmark runs:
// A–C on one accelerator, D on a GPU and two DLA cores.
var DefaultWireScenarios = []string{"a", "b", "c", "d"}

// LoadScenarios reads <dir>/<name>.yaml for each name ("a", "b", "c") and names
// each scenario by its upper-case letter.
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
		out = append(out, Scenario{Name: strings.ToUpper(n), Config: cfg})
	}
	return out, nil
}
