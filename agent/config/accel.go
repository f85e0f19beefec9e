package config

import (
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

// Accelerator is one declared accelerator.
type Accelerator struct {
	Name  string
	Slots int
	Line  int // 0 for the backend.slots shorthand
}

// accelInfo is what locate learns about accelerators: declaration order and
// lines (the map loses both), and whether backend.slots was given.
type accelInfo struct {
	order      []string
	lines      map[string]int
	line       int // of the accelerators key
	slotsGiven bool
	onSeq      []*Error // on: given a list
}

func (a *accelInfo) locate(file string, doc *yaml.Node) {
	a.lines = map[string]int{}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		switch k.Value {
		case "accelerators":
			a.line = k.Line
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

// AcceleratorList returns the accelerators in declaration order; for the
// backend.slots shorthand one accelerator named "" with backend.slots.
func (c *Config) AcceleratorList() []Accelerator {
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

// AcceleratorOf returns the accelerator model runs on: its on:, the only one
// declared, or "" for the shorthand.
func (c *Config) AcceleratorOf(model string) string {
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
	if len(c.Accelerators) == 0 {
		return c.Backend.Slots, nil
	}
	for _, a := range c.AcceleratorList() {
		accels = append(accels, sched.AcceleratorSpec{Name: a.Name, Slots: a.Slots})
	}
	return 0, accels
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
	if len(c.Accelerators) > 0 {
		if c.accel.slotsGiven {
			bad(c.accel.line, "backend.slots", "both backend.slots and accelerators are set: backend.slots is the shorthand for one accelerator; drop it (the slots are given per accelerator)")
		}
		for _, a := range list {
			if !validAccelName(a.Name) {
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
		switch {
		case m.On != "" && len(c.Accelerators) == 0:
			bad(m.Line, key+".on", "%q names an accelerator, but none are declared: declare them in place of backend.slots, e.g. accelerators: {%s: 1}", m.On, m.On)
		case m.On != "" && !has(names, m.On):
			bad(m.Line, key+".on", "%q is not a declared accelerator (declared: %s): fix the name or add it under accelerators with its slots", m.On, declared)
		case m.On == "" && len(c.Accelerators) > 1:
			bad(m.Line, key+".on", "missing: with accelerators %s declared every model names the one it runs on (on: %s)", declared, names[0])
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
