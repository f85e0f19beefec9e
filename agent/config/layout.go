package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vig-edge/vig/wire"
)

// The layout: which accelerators the device has, how many jobs each runs at
// once, and on which one each model runs with how many instances. A config
// either declares it (accelerators: and on:) or lets vig derive it from the
// server's model configuration (Triton's instance_group), by these rules:
//
//   - an instance group with a secondary device KIND_NVDLA device_id N binds
//     the model to accelerator dlaN: 1 slot (a DLA core runs one engine at a
//     time, however many are built for it), 1 instance;
//   - KIND_GPU (or KIND_AUTO) binds it to gpu, with count instances; the GPU
//     runs backend.slots jobs at once, 1 when not given (a GPU without MPS);
//     vig governs one GPU;
//   - KIND_CPU binds it to cpu, with count instances; cpu's slots are the sum
//     of its models' instances;
//   - a model the server does not describe (no model configuration, no
//     instance group) keeps its on: and instances: from the config.
//
// Where the config and the server disagree, Derive says what each says,
// what vig does and how to fix it.

// Source says where an item of the layout comes from.
type Source uint8

// Sources of the layout.
const (
	FromConfig Source = iota // the config declares it (or its default)
	FromServer               // derived from the server's model configuration
)

func (s Source) String() string {
	if s == FromServer {
		return "server"
	}
	return "config"
}

// Placement is where one model runs.
type Placement struct {
	Accelerator string
	// Instances is how many jobs of the model its accelerator runs at once
	// (0: as many as the accelerator's slots).
	Instances int
	Source    Source // of Accelerator
}

// Layout is the accelerators and the placement of every model vig schedules
// (logical models have none: their variants do).
type Layout struct {
	Accelerators []Accelerator // empty: the backend.slots shorthand
	Models       map[string]Placement
	// Described is how many models the server described (instance groups read).
	Described int
}

// Disagreement is a place where the config and the server differ, or where
// the server binds a model in a way vig schedules differently.
type Disagreement struct {
	Model  string // "" for the layout as a whole
	Config string // what the config says (or vig assumes)
	Server string // what the server says
	Does   string // what vig does
	Fix    string
}

func (d Disagreement) String() string {
	var b strings.Builder
	if d.Model != "" {
		fmt.Fprintf(&b, "model %s: ", d.Model)
	}
	fmt.Fprintf(&b, "the config says %s; the server %s: %s; fix: %s", d.Config, d.Server, d.Does, d.Fix)
	return b.String()
}

// binding is what the server's configuration says of one model.
type binding struct {
	accel     string
	instances int
	described bool
	gpus      []int32
}

// bindingOf reads a model's instance groups. notes gets what vig cannot
// follow exactly.
func bindingOf(name string, mc *wire.ModelConfig, notes *[]Disagreement) binding {
	if mc == nil || len(mc.InstanceGroups) == 0 {
		return binding{}
	}
	var b binding
	var others []string
	for _, g := range mc.InstanceGroups {
		accel, n := "", max(int(g.Count), 1) // Triton's default count is 1
		for _, d := range g.SecondaryDevices {
			if d.Kind == wire.KindNVDLA {
				accel, n = DLAName(int(d.DeviceID)), 1
				break
			}
		}
		if accel == "" {
			switch g.Kind {
			case wire.KindGPU, wire.KindAuto:
				accel = "gpu"
				b.gpus = append(b.gpus, g.GPUs...)
			case wire.KindCPU:
				accel = "cpu"
			default:
				*notes = append(*notes, Disagreement{Model: name, Config: "nothing of its instances",
					Server: fmt.Sprintf("places its instances with %s (the model's backend decides)", g.Kind),
					Does:   "vig takes its place from the config (on:)", Fix: "give the model's instance_group a kind KIND_GPU or KIND_CPU, or give it on: in vig's config"})
				return binding{}
			}
		}
		switch {
		case b.accel == "":
			b.accel, b.instances = accel, n
		case accel == b.accel && accel != "gpu" && accel != "cpu":
			// more groups on one DLA core still run one at a time
		case accel == b.accel:
			b.instances += n
		default:
			others = append(others, accel)
		}
	}
	if len(others) > 0 {
		*notes = append(*notes, Disagreement{Model: name, Config: "one accelerator per model",
			Server: fmt.Sprintf("binds its instances to %s and %s", b.accel, strings.Join(others, ", ")),
			Does:   fmt.Sprintf("vig schedules it on %s only", b.accel),
			Fix: fmt.Sprintf("give each accelerator a model of its own (%s_%s, %s_%s) and make %s a logical model: %s: {variants: [...]}",
				name, b.accel, name, others[0], name, name)})
	}
	b.described = true
	return b
}

// Derive computes the layout vig runs from the config and the server's
// configuration of each model (server: model → its configuration; a model
// missing from it the server does not describe). It is pure. With the layout
// the config's own (DerivesLayout false), the server is only compared with
// it. The error says what cannot be completed, with the fix.
func Derive(c *Config, server map[string]*wire.ModelConfig) (Layout, []Disagreement, error) {
	var notes []Disagreement
	l := Layout{Models: map[string]Placement{}}
	derive := c.DerivesLayout()
	gpuSlots := c.accel.gpuSlots
	if gpuSlots == 0 { // built in code
		gpuSlots = max(c.Backend.Slots, 1)
	}
	bound := map[string]binding{}
	var missing []string
	gpuIDs := map[int32]bool{}
	for _, name := range c.ModelNames() {
		m := c.Models[name]
		if m.Logical() {
			continue
		}
		b := bindingOf(name, server[name], &notes)
		bound[name] = b
		if b.described {
			l.Described++
			for _, id := range b.gpus {
				gpuIDs[id] = true
			}
		}
	}
	if !derive {
		declared := c.AcceleratorList()
		for _, name := range c.ModelNames() {
			m := c.Models[name]
			if m.Logical() {
				continue
			}
			p := Placement{Accelerator: c.AcceleratorOf(name), Instances: m.Instances}
			l.Models[name] = p
			b := bound[name]
			if !b.described {
				continue
			}
			if p.Accelerator != b.accel {
				where := fmt.Sprintf("runs it on %q", p.Accelerator)
				if p.Accelerator == "" {
					where = fmt.Sprintf("runs it on the one accelerator of backend.slots %d", c.Backend.Slots)
				}
				notes = append(notes, Disagreement{Model: name, Config: where,
					Server: fmt.Sprintf("binds it to %s (%s)", b.accel, describe(b)),
					Does:   "vig schedules it as the config says",
					Fix:    fmt.Sprintf("remove accelerators: and every on: to take the server's layout, or declare %s: %d and give the model on: %s", b.accel, slotsOf(b.accel, gpuSlots, b), b.accel)})
				continue
			}
			slots := 0
			for _, a := range declared {
				if a.Name == p.Accelerator {
					slots = a.Slots
				}
			}
			if n := p.Instances; (n == 0 && b.instances < slots) || (n > b.instances) {
				notes = append(notes, Disagreement{Model: name, Config: fmt.Sprintf("lets vig run %d of its jobs at once", max(n, slots)),
					Server: fmt.Sprintf("runs %d instance(s) of it", b.instances), Does: "vig runs as many as the config says; the server queues the rest",
					Fix: fmt.Sprintf("set instances: %d on the model", b.instances)})
			}
		}
		l.Accelerators = nil
		if len(c.Accelerators) > 0 {
			l.Accelerators = declared
		}
		return l, notes, nil
	}

	slots := map[string]int{}
	for _, name := range c.ModelNames() {
		m := c.Models[name]
		if m.Logical() {
			continue
		}
		b := bound[name]
		var p Placement
		switch {
		case b.described:
			p = Placement{Accelerator: b.accel, Instances: b.instances, Source: FromServer}
			if m.On != "" && m.On != b.accel {
				notes = append(notes, Disagreement{Model: name, Config: "on: " + m.On, Server: "binds it to " + b.accel,
					Does: "vig runs it where the server binds it, on " + b.accel, Fix: "remove on: from the model (the server decides where it runs)"})
			}
		case m.On != "":
			p = Placement{Accelerator: m.On, Instances: m.Instances}
		default:
			missing = append(missing, name)
			continue
		}
		if m.Instances > 0 {
			p.Instances = m.Instances
		}
		if p.Accelerator == "gpu" && b.described && p.Instances > gpuSlots && m.Instances == 0 {
			notes = append(notes, Disagreement{Model: name, Config: fmt.Sprintf("the GPU runs %d job(s) at once (backend.slots)", gpuSlots),
				Server: fmt.Sprintf("runs %d instances of it on the GPU", p.Instances), Does: fmt.Sprintf("vig runs at most %d at once", gpuSlots),
				Fix: fmt.Sprintf("set backend.slots: %d if the GPU runs them side by side (MPS, or small kernels)", p.Instances)})
		}
		slots[p.Accelerator] += max(p.Instances, 1)
		l.Models[name] = p
	}
	if len(gpuIDs) > 1 {
		ids := make([]string, 0, len(gpuIDs))
		for id := range gpuIDs {
			ids = append(ids, fmt.Sprint(id))
		}
		sort.Strings(ids)
		notes = append(notes, Disagreement{Config: "one GPU", Server: "binds models to GPUs " + strings.Join(ids, ", "),
			Does: "vig governs one GPU: it schedules them all as one", Fix: "run one vig per GPU, each with the models of its GPU"})
	}
	if l.Described == 0 {
		if c.accel.fromServer {
			return l, notes, &Error{File: c.File, Line: c.accel.line, Key: "accelerators",
				Msg: fmt.Sprintf("from_server, but the server at %s describes none of the models (no instance_group read): "+
					"check backend.address and that the models are loaded, or declare the accelerators (accelerators: {gpu: 1, dla0: 1}) and give each model on:", c.Backend.Address)}
		}
		// Nothing to derive from: the backend.slots shorthand, as the config says.
		l.Models = map[string]Placement{}
		for _, name := range c.ModelNames() {
			if !c.Models[name].Logical() {
				l.Models[name] = Placement{Instances: c.Models[name].Instances}
			}
		}
		return l, notes, nil
	}
	if len(missing) > 0 {
		var errs []error
		names := make([]string, 0, len(slots))
		for n := range slots {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range missing {
			why := "no instance_group in its model configuration"
			if server[name] == nil {
				why = "it does not serve a model of that name, or has not loaded it"
			}
			errs = append(errs, &Error{File: c.File, Line: c.Models[name].Line, Key: "models." + name + ".on",
				Msg: fmt.Sprintf("the server does not say where %s runs (%s) and the config does not either: "+
					"give it on: (one of %s), or load it with an instance_group in its config.pbtxt", name, why, strings.Join(names, ", "))})
		}
		return l, notes, joinErrors(c.File, errs, 0)
	}
	for name, n := range slots {
		a := Accelerator{Name: name, Slots: n, Source: FromServer}
		switch {
		case name == "gpu":
			a.Slots = gpuSlots
		case isCore(name):
			a.Slots = 1
		}
		if !serverBound(l.Models, name) {
			a.Source = FromConfig
		}
		l.Accelerators = append(l.Accelerators, a)
	}
	sort.Slice(l.Accelerators, func(i, j int) bool {
		ri, rj := accelRank(l.Accelerators[i].Name), accelRank(l.Accelerators[j].Name)
		if ri != rj {
			return ri < rj
		}
		return l.Accelerators[i].Name < l.Accelerators[j].Name
	})
	names := make([]string, 0, len(l.Accelerators))
	for _, a := range l.Accelerators {
		names = append(names, a.Name)
	}
	if len(l.Accelerators) > MaxAccelerators {
		return l, notes, &Error{File: c.File, Key: "accelerators", Msg: fmt.Sprintf("the server's layout binds the models to %d accelerators (%s): vig governs at most %d; "+
			"split the models across vig instances, each config listing the models of at most %d accelerators, or fix the instance groups that bind models to devices the board lacks",
			len(l.Accelerators), quoteShort(strings.Join(names, ", ")), MaxAccelerators, MaxAccelerators)}
	}
	var errs []error
	for _, n := range sortedKeys(c.Interference) {
		if _, ok := slots[n]; !ok {
			errs = append(errs, &Error{File: c.File, Line: c.Line("interference." + n), Key: "interference." + n,
				Msg: fmt.Sprintf("%q is not an accelerator of the server's layout (%s): name one of them, or remove it", n, strings.Join(names, ", "))})
		}
	}
	if len(errs) > 0 {
		return l, notes, joinErrors(c.File, errs, 0)
	}
	return l, notes, nil
}

// describe says how the server binds a model, in config.pbtxt's terms.
func describe(b binding) string {
	core, dla := DLACore(b.accel)
	switch {
	case dla:
		return fmt.Sprintf("instance_group secondary_devices KIND_NVDLA device_id %d", core)
	case b.accel == "cpu":
		return fmt.Sprintf("KIND_CPU, count %d", b.instances)
	}
	return fmt.Sprintf("KIND_GPU, count %d", b.instances)
}

// slotsOf is the slots vig would give a derived accelerator.
func slotsOf(accel string, gpuSlots int, b binding) int {
	switch {
	case accel == "gpu":
		return gpuSlots
	case isCore(accel):
		return 1
	}
	return max(b.instances, 1)
}

// isCore reports whether accel is a DLA core (DLACore).
func isCore(accel string) bool {
	_, ok := DLACore(accel)
	return ok
}

// accelRank orders a derived layout: gpu, the DLA cores, cpu, the rest.
func accelRank(name string) int {
	switch {
	case name == "gpu":
		return 0
	case isCore(name):
		return 1
	case name == "cpu":
		return 2
	}
	return 3
}

func serverBound(models map[string]Placement, accel string) bool {
	for _, p := range models {
		if p.Accelerator == accel && p.Source == FromServer {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Resolve derives the layout from the server's model configuration (see
// Derive) and makes it the config's: AcceleratorList, AcceleratorOf,
// InstancesOf and SchedAccelerators answer from it from then on. It returns
// the disagreements to report. On error the config is unchanged.
func (c *Config) Resolve(server map[string]*wire.ModelConfig) ([]Disagreement, error) {
	l, notes, err := Derive(c, server)
	if err != nil {
		return notes, err
	}
	c.layout = &l
	if len(l.Accelerators) > 0 {
		total := 0
		for _, a := range l.Accelerators {
			total += a.Slots
		}
		c.Backend.Slots = total
	}
	return notes, nil
}

// LayoutFromServer reports whether the config writes accelerators: from_server
// (the layout must come from the server).
func (c *Config) LayoutFromServer() bool { return c.accel.fromServer }

// Resolved returns the layout Resolve made the config's, if it ran.
func (c *Config) Resolved() (Layout, bool) {
	if c.layout == nil {
		return Layout{}, false
	}
	return *c.layout, true
}

// PlacementOf returns where model runs and where that comes from.
func (c *Config) PlacementOf(model string) Placement {
	if l := c.layout; l != nil {
		if p, ok := l.Models[model]; ok {
			if len(l.Accelerators) == 0 {
				p.Accelerator = c.AcceleratorOf(model)
			}
			return p
		}
	}
	return Placement{Accelerator: c.AcceleratorOf(model), Instances: c.Models[model].Instances}
}

// ServedModelNames returns the configured models the server runs (every
// model but the logical ones), sorted.
func (c *Config) ServedModelNames() []string {
	var out []string
	for _, n := range c.ModelNames() {
		if !c.Models[n].Logical() {
			out = append(out, n)
		}
	}
	return out
}

// SameLayout reports whether two layouts place every model alike on the
// same accelerators, and if not, says how they differ.
func SameLayout(running, server Layout) (bool, string) {
	var diffs []string
	ra, sa := map[string]int{}, map[string]int{}
	for _, a := range running.Accelerators {
		ra[a.Name] = a.Slots
	}
	for _, a := range server.Accelerators {
		sa[a.Name] = a.Slots
	}
	for _, n := range sortedKeys(sa) {
		if s, ok := ra[n]; !ok {
			diffs = append(diffs, fmt.Sprintf("accelerator %s (%d slots) is new", n, sa[n]))
		} else if s != sa[n] {
			diffs = append(diffs, fmt.Sprintf("accelerator %s: %d slots, now %d", n, s, sa[n]))
		}
	}
	for _, n := range sortedKeys(ra) {
		if _, ok := sa[n]; !ok {
			diffs = append(diffs, fmt.Sprintf("accelerator %s is gone", n))
		}
	}
	for _, m := range sortedKeys(server.Models) {
		r, s := running.Models[m], server.Models[m]
		if r.Accelerator != s.Accelerator || r.Instances != s.Instances {
			diffs = append(diffs, fmt.Sprintf("%s: on %q with %d instance(s), now on %q with %d", m, r.Accelerator, r.Instances, s.Accelerator, s.Instances))
		}
	}
	return len(diffs) == 0, strings.Join(diffs, "; ")
}
