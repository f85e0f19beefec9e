package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/vig-edge/vig/agent/sched"
)

// A device with more than one kind of accelerator (a Jetson's GPU and DLA
// cores, a phone's NPU and GPU) declares them with their slots, and each model
// names the one it runs on:
//
//	accelerators: {gpu: 1, dla: 2}
//	models:
//	  detector: {exec_ms: 12, on: dla}
//	  vlm: {exec_ms: 200, on: gpu, corun: false}   # alone on the GPU; the DLAs go on
//
// backend.slots: N is the shorthand for one accelerator of N slots, and means
// what it always meant; it and accelerators exclude each other. With
// accelerators declared, Backend.Slots reads as their total after Parse.
//
// Without accelerators and without any model's on: (or with `accelerators:
// from_server`), the layout is the server's: Resolve derives it from the
// models' instance groups (layout.go), and the methods below then answer
// from it. interference: {gpu: 1.3, dla0: 1.15} names accelerators of
// whichever layout holds.

// AcceleratorsFromServer is the value of `accelerators:` that asks for the
// server's layout.
const AcceleratorsFromServer = "from_server"

// Accelerator is one declared accelerator.
type Accelerator struct {
	Name   string
	Slots  int
	Line   int    // 0 for the backend.slots shorthand and a derived one
	Source Source // where the layout comes from: the config or the server
}

// accelInfo is what locate learns about accelerators: declaration order and
// lines (the map loses both), and whether backend.slots was given.
type accelInfo struct {
	order      []string
	lines      map[string]int
	line       int // of the accelerators key
	slotsGiven bool
	gpuSlots   int      // backend.slots as written, else 1: a derived GPU's slots
	fromServer bool     // accelerators: from_server
	onSeq      []*Error // on: given a list; accelerators: a scalar other than from_server
}

func (a *accelInfo) locate(file string, doc *yaml.Node) {
	a.lines = map[string]int{}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		switch k.Value {
		case "accelerators":
			a.line = k.Line
			if v.Kind == yaml.ScalarNode && v.ShortTag() != "!!null" {
				if v.Value == AcceleratorsFromServer {
					a.fromServer = true
				} else {
					a.onSeq = append(a.onSeq, &Error{File: file, Line: k.Line, Key: "accelerators",
						Msg: fmt.Sprintf("%q: write accelerators: from_server (vig reads the layout from the server's instance groups), "+
							"a mapping of names to slots, e.g. {gpu: 1, dla0: 1, dla1: 1}, or leave the key out", quoteShort(v.Value))})
				}
				// The decoder sees no such key: the layout is derived (Resolve).
				doc.Content = append(doc.Content[:i:i], doc.Content[i+2:]...)
				i -= 2
				continue
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				a.order = append(a.order, v.Content[j].Value)
				a.lines[v.Content[j].Value] = v.Content[j].Line
			}
		case "models":
			// A model compiled for two accelerators is two models to vig:
			// say so before the decoder reports a type error.
			for j := 0; j+1 < len(v.Content); j += 2 {
				m := v.Content[j+1]
				for n := 0; n+1 < len(m.Content); n += 2 {
					if m.Content[n].Value == "on" && m.Content[n+1].Kind == yaml.SequenceNode {
						a.onSeq = append(a.onSeq, &Error{File: file, Line: m.Content[n].Line, Key: "models." + v.Content[j].Value + ".on",
							Msg: "a model runs on one accelerator; build one model per accelerator (e.g. " + v.Content[j].Value + "_gpu, " +
								v.Content[j].Value + "_dla) and give each stream one of them"})
					}
				}
			}
		}
	}
}

// AcceleratorList returns the accelerators in declaration order, or, once
// Resolve derived them, the layout's (gpu, dla0, dla1, …, cpu); for the
// backend.slots shorthand one accelerator named "" with backend.slots.
func (c *Config) AcceleratorList() []Accelerator {
	if l := c.layout; l != nil && len(l.Accelerators) > 0 {
		return slices.Clone(l.Accelerators)
	}
	if len(c.Accelerators) == 0 {
		return []Accelerator{{Slots: c.Backend.Slots}}
	}
	names := c.accel.order
	if len(names) != len(c.Accelerators) { // built in code, not parsed
		names = names[:0:0]
		for n := range c.Accelerators {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	out := make([]Accelerator, 0, len(names))
	for _, n := range names {
		out = append(out, Accelerator{Name: n, Slots: c.Accelerators[n], Line: c.accel.lines[n]})
	}
	return out
}

// AcceleratorOf returns the accelerator model runs on: where the resolved
// layout places it, else its on:, the only one declared, or "" for the
// shorthand (and for a logical model: its variants have theirs).
func (c *Config) AcceleratorOf(model string) string {
	if l := c.layout; l != nil && len(l.Accelerators) > 0 {
		return l.Models[model].Accelerator
	}
	if c.Models[model].Logical() {
		return ""
	}
	if on := c.Models[model].On; on != "" {
		return on
	}
	if len(c.Accelerators) == 1 {
		for n := range c.Accelerators {
			return n
		}
	}
	return ""
}

// SchedAccelerators returns the scheduler's view: backend.slots for the
// shorthand, else no slots and the accelerators (with ModelSpec.Accelerator
// from AcceleratorOf).
func (c *Config) SchedAccelerators() (slots int, accels []sched.AcceleratorSpec) {
	list := c.AcceleratorList()
	if len(list) == 1 && list[0].Name == "" {
		return list[0].Slots, nil
	}
	for _, a := range list {
		accels = append(accels, sched.AcceleratorSpec{Name: a.Name, Slots: a.Slots, Interference: c.Interference[a.Name]})
	}
	return 0, accels
}

// InstancesOf returns how many jobs of model its accelerator runs at once:
// the resolved layout's count (the server's, or instances: overriding it),
// else instances:; 0 when none is given (the accelerator's slots bound it).
func (c *Config) InstancesOf(model string) int {
	if l := c.layout; l != nil && len(l.Accelerators) > 0 {
		return l.Models[model].Instances
	}
	return c.Models[model].Instances
}

// DerivesLayout reports whether the accelerators and each model's place
// come from the server (accelerators: from_server, or neither accelerators
// nor any model's on:); a backend that describes none of the models then
// leaves the backend.slots shorthand.
func (c *Config) DerivesLayout() bool {
	if c.accel.fromServer {
		return true
	}
	if len(c.Accelerators) > 0 {
		return false
	}
	for _, m := range c.Models {
		if m.On != "" {
			return false
		}
	}
	return true
}

func validAccelName(n string) bool {
	if n == "" || len(n) > 32 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// validateAccelerators checks the declaration and every model's placement.
func (c *Config) validateAccelerators(bad func(line int, key, format string, args ...any)) {
	list := c.AcceleratorList()
	var names []string
	for _, a := range list {
		names = append(names, a.Name)
	}
	declared := strings.Join(names, ", ")
	if c.accel.fromServer {
		if len(c.Accelerators) > 0 {
			bad(c.accel.line, "accelerators", "written twice: from_server and a mapping; keep one")
		}
		if c.Backend.Embedded {
			bad(c.accel.line, "accelerators", "from_server, but the embedded mock serves the config's own models: declare the accelerators (accelerators: {gpu: 1, dla0: 1}) with on:, or run `vig mock-backend --repository FILE` as the server")
		}
		if _, ring := c.Backend.RingBackend(); ring {
			bad(c.accel.line, "accelerators", "from_server, but a ring: runtime does not describe its models: declare the accelerators, e.g. accelerators: {npu: 1}, and give each model on:")
		}
	}
	c.validateInterference(bad, names)
	if len(c.Accelerators) > 0 {
		if c.accel.slotsGiven {
			bad(c.accel.line, "backend.slots", "both backend.slots and accelerators are set: backend.slots is the shorthand for one accelerator; drop it (the slots are given per accelerator)")
		}
		for _, a := range list {
			if !badDLA(bad, a.Line, "accelerators."+a.Name, a.Name) && !validAccelName(a.Name) {
				bad(a.Line, "accelerators."+a.Name, "%q: an accelerator's name is 1–32 lower-case letters, digits, _ or - (e.g. gpu, dla, npu)", a.Name)
			}
			if a.Slots < 1 || a.Slots > 256 {
				bad(a.Line, "accelerators."+a.Name, "%d slots: an accelerator runs 1 to 256 jobs at once (a DLA core or a GPU without MPS: 1)", a.Slots)
			}
		}
	}
	for _, name := range c.ModelNames() {
		m := c.Models[name]
		key := "models." + name
		if m.Instances < 0 || m.Instances > 256 {
			bad(m.Line, key+".instances", "%d: give how many jobs of the model its accelerator runs at once, 1 to 256 (the count of its instance_group there), or leave it out to take the server's", m.Instances)
		}
		switch {
		case m.Logical():
			continue // validateVariants
		case badDLA(bad, m.Line, key+".on", m.On):
		case m.On != "" && c.accel.fromServer:
			if !validAccelName(m.On) {
				bad(m.Line, key+".on", "%q: an accelerator's name is 1–32 lower-case letters, digits, _ or - (e.g. gpu, dla0, npu)", m.On)
			}
		case m.On != "" && len(c.Accelerators) == 0:
			bad(m.Line, key+".on", "%q names an accelerator, but none are declared: declare them in place of backend.slots, e.g. accelerators: {%s: 1}", m.On, m.On)
		case m.On != "" && !has(names, m.On):
			bad(m.Line, key+".on", "%q is not a declared accelerator (declared: %s): fix the name or add it under accelerators with its slots", m.On, declared)
		case m.On == "" && len(c.Accelerators) > 1:
			bad(m.Line, key+".on", "missing: with accelerators %s declared every model names the one it runs on (on: %s)", declared, names[0])
		}
	}
}

// validateInterference checks interference: factors 1 to 10, each naming a
// declared accelerator (a derived layout's names are checked by Resolve).
func (c *Config) validateInterference(bad func(line int, key, format string, args ...any), declared []string) {
	names := make([]string, 0, len(c.Interference))
	for n := range c.Interference {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := c.Interference[n]
		key := "interference." + n
		switch {
		case !(f >= 1 && f <= 10):
			bad(0, key, "%g: a factor from 1 (no slowdown) to 10 by which a job on %s takes longer while another accelerator runs one, e.g. %s: 1.3", f, n, n)
		case badDLA(bad, 0, key, n):
		case !validAccelName(n):
			bad(0, key, "%q: an accelerator's name is 1–32 lower-case letters, digits, _ or - (e.g. gpu, dla0)", n)
		case len(c.Accelerators) > 0 && !has(declared, n):
			bad(0, key, "%q is not a declared accelerator (declared: %s): name one of them", n, strings.Join(declared, ", "))
		case len(c.Accelerators) == 0 && !c.DerivesLayout():
			bad(0, key, "%q: interference is per accelerator, and none are declared: declare them (accelerators: {gpu: 1, dla0: 1}) or let vig derive them from the server", n)
		}
	}
}

func has(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// accelTotal is the slots of every declared accelerator together.
func (c *Config) accelTotal() int {
	n := 0
	for _, s := range c.Accelerators {
		n += max(s, 0)
	}
	return n
}
