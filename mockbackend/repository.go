package mockbackend

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vig-edge/vig/agent/config"
)

// Repository describes the mock's model repository as Triton's would place its
// models on a device: per model its instance group (kind gpu or cpu, count,
// and for a TensorRT engine built for a DLA core that core), the GPU's slots
// and the interference between accelerators. It is the mock's alone (a file
// for `vig mock-backend --repository`, or its flags): vig reads the placement
// from the ModelConfig the mock then serves.
//
//	gpu_slots: 1                          # jobs the GPU runs at once (default 1)
//	interference: {gpu: 1.3, dla: 1.15}   # per accelerator; "dla": every core
//	models:
//	  detector_gpu:  {exec_ms: 8}         # KIND_GPU, count 1 (Triton's default)
//	  detector_dla0: {exec_ms: 14, dla_core: 0}
//	  pose:          {exec_ms: 5, count: 2}
//	  ocr:           {exec_ms: 30, kind: cpu, count: 4}
type Repository struct {
	GPUSlots     int                        `yaml:"gpu_slots"`
	Interference map[string]float64         `yaml:"interference"`
	Models       map[string]RepositoryModel `yaml:"models"`
}

// RepositoryModel is one model's instance group (and, optionally, its
// execution time).
type RepositoryModel struct {
	// ExecMs is the base execution time; it overrides the vig config's
	// exec_ms, and is required for a model the config does not have.
	ExecMs *float64 `yaml:"exec_ms"`
	// Kind is "gpu" (KIND_GPU, the default) or "cpu" (KIND_CPU).
	Kind string `yaml:"kind"`
	// Count is the instance group's count: executions of the model at once
	// (default 1).
	Count int `yaml:"count"`
	// DLACore binds a GPU model to that DLA core (secondary device
	// KIND_NVDLA): it runs on accelerator dla<N>, one engine at a time.
	DLACore *int `yaml:"dla_core"`
}

// ParseRepository reads a repository file (see Repository); path names it in
// errors.
func ParseRepository(path string, data []byte) (*Repository, error) {
	var r Repository
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w (want gpu_slots, interference and models: {NAME: {exec_ms, kind, count, dla_core}})", path, err)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// check validates the repository's own fields; Apply checks the rest.
func (r *Repository) check() error {
	if r.GPUSlots < 0 {
		return fmt.Errorf("gpu_slots: %d: give 1 or more (jobs the GPU runs at once)", r.GPUSlots)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Models)) {
		m := r.Models[name]
		switch {
		case m.Kind != "" && m.Kind != "gpu" && m.Kind != "cpu":
			return fmt.Errorf("models.%s.kind: %q: want gpu or cpu (a DLA engine is kind gpu with dla_core: N)", name, m.Kind)
		case m.Count < 0:
			return fmt.Errorf("models.%s.count: %d: give 1 or more", name, m.Count)
		case m.DLACore != nil && *m.DLACore < 0:
			return fmt.Errorf("models.%s.dla_core: %d: give the core's number, 0 or more", name, *m.DLACore)
		case m.DLACore != nil && m.Kind == "cpu":
			return fmt.Errorf("models.%s: a DLA engine runs from the GPU: drop kind: cpu or dla_core", name)
		case m.ExecMs != nil && !(*m.ExecMs >= 0 && *m.ExecMs <= 3.6e6):
			return fmt.Errorf("models.%s.exec_ms: %g: give milliseconds from 0 to 3600000", name, *m.ExecMs)
		}
	}
	return nil
}

// accelOf is the accelerator a repository model runs on.
func (m RepositoryModel) accelOf() string {
	switch {
	case m.DLACore != nil:
		return config.DLAName(*m.DLACore)
	case m.Kind == "cpu":
		return AccelCPU
	}
	return AccelGPU
}

// Apply places cfg's models as the repository says, replacing cfg's slots and
// accelerators by the device it implies: "gpu" with GPUSlots (default 1), one
// "dla<N>" of one slot per DLA core a model is bound to (a DLA core runs one
// engine at a time), and "cpu" with as many slots as its models' instances.
// A model of cfg the repository does not name gets Triton's default, one
// KIND_GPU instance; a model only the repository names is added (it needs
// exec_ms).
func (r *Repository) Apply(cfg *Config) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("mockbackend: repository: %w", err)
	}
	byName := map[string]int{}
	for i, m := range cfg.Models {
		byName[m.Name] = i
	}
	for _, name := range slices.Sorted(maps.Keys(r.Models)) {
		if _, ok := byName[name]; ok {
			continue
		}
		rm := r.Models[name]
		if rm.ExecMs == nil {
			return fmt.Errorf("mockbackend: repository: model %s: give its exec_ms (the vig config has no such model)", name)
		}
		byName[name] = len(cfg.Models)
		cfg.Models = append(cfg.Models, Model{Name: name})
	}
	cpu, dlas := 0, []int{}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		rm := r.Models[m.Name]
		if rm.ExecMs != nil {
			m.Exec = time.Duration(*rm.ExecMs * float64(time.Millisecond))
		}
		m.On, m.Instances = rm.accelOf(), max(rm.Count, 1)
		switch {
		case m.On == AccelCPU:
			cpu += m.Instances
		case rm.DLACore != nil && !slices.Contains(dlas, *rm.DLACore):
			dlas = append(dlas, *rm.DLACore)
		}
	}
	sort.Slice(cfg.Models, func(i, j int) bool { return cfg.Models[i].Name < cfg.Models[j].Name })
	slices.Sort(dlas)
	cfg.Slots = 0
	cfg.Accelerators = []Accelerator{{Name: AccelGPU, Slots: max(r.GPUSlots, 1)}}
	for _, n := range dlas {
		cfg.Accelerators = append(cfg.Accelerators, Accelerator{Name: config.DLAName(n), Slots: 1})
	}
	if cpu > 0 {
		cfg.Accelerators = append(cfg.Accelerators, Accelerator{Name: AccelCPU, Slots: cpu})
	}
	var names []string
	for _, a := range cfg.Accelerators {
		names = append(names, a.Name)
	}
	if _, err := interferenceOf(r.Interference, names); err != nil {
		return err
	}
	cfg.Interference = r.Interference
	return nil
}

// ParseInstance reads a model's instance group given as "gpu", "cpu",
// "dla<N>", optionally with ":COUNT" ("gpu:2", "dla0"): the form of `vig
// mock-backend --instance NAME=…`.
func ParseInstance(s string) (RepositoryModel, error) {
	const want = "want gpu, cpu or dla<N>, optionally :COUNT (e.g. gpu:2, dla0)"
	where, count, hasCount := strings.Cut(s, ":")
	var m RepositoryModel
	if hasCount {
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return m, fmt.Errorf("%q: count %q: give 1 or more; %s", s, count, want)
		}
		m.Count = n
	}
	switch n, dla := config.DLACore(where); {
	case where == AccelGPU:
	case where == AccelCPU:
		m.Kind = "cpu"
	case dla:
		m.DLACore = &n
	default:
		return m, fmt.Errorf("%q: %s", s, want)
	}
	return m, nil
}

// ParseInterference reads "gpu=1.3,dla=1.15" (or per core, "dla0=1.2"): the
// form of `vig mock-backend --interference`.
func ParseInterference(s string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || k == "" || err != nil || !(f >= 1) || f > 100 {
			return nil, fmt.Errorf("%q: want ACCELERATOR=FACTOR,… with factors from 1 to 100, e.g. gpu=1.3,dla=1.15 (dla: every DLA core; dla0: one)", part)
		}
		out[k] = f
	}
	return out, nil
}
