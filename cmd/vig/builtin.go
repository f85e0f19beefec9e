package main

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/examples"
)

// builtinScenario returns the embedded copy of a benchmark scenario named by a
// path that does not exist here (examples/scenarios/d.yaml, d.yaml or d), so
// that vig demo and vig bench run from the binary alone; ok is false when there
// is no such scenario.
func builtinScenario(name string) (data []byte, file string, ok bool) {
	base := strings.TrimSuffix(filepath.Base(name), ".yaml") + ".yaml"
	file = path.Join("scenarios", base)
	data, err := fs.ReadFile(examples.FS, file)
	if err != nil {
		return nil, "", false
	}
	return data, "(built in) examples/" + file, true
}

// loadScenarioConfig reads a workload config from path, or, when path does not
// exist, the built-in scenario of that name. On failure it prints the problem
// and returns nil and exit code 2, as loadConfig does.
func loadScenarioConfig(p string) (*config.Config, int) {
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		if data, file, ok := builtinScenario(p); ok {
			cfg, err := config.Parse(file, data)
			if err != nil { // the embedded scenarios parse: a test holds them to it
				os.Stderr.WriteString("vig: invalid config:\n" + err.Error() + "\n")
				return nil, 2
			}
			return cfg, 0
		}
	}
	return loadConfig(p)
}

// scenarioDir returns dir when it exists, else a temporary copy of the built-in
// scenarios (and a function removing it), so vig bench runs outside the source tree.
func scenarioDir(dir string) (string, func(), error) {
	if _, err := os.Stat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "vig-scenarios-")
	if err != nil {
		return "", nil, err
	}
	done := func() { os.RemoveAll(tmp) }
	entries, err := fs.ReadDir(examples.FS, "scenarios")
	if err != nil {
		done()
		return "", nil, err
	}
	for _, e := range entries {
		data, err := fs.ReadFile(examples.FS, path.Join("scenarios", e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(tmp, e.Name()), data, 0o644)
		}
		if err != nil {
			done()
			return "", nil, err
		}
	}
	return tmp, done, nil
}
