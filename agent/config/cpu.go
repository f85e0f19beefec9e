package config

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/vig-edge/vig/platform/cpu"
)

// CPU places vig's threads and tunes the Go runtime for the device (section cpu:).
// Every control is applied at start by vig serve and read back; what it achieved
// is logged, exported as vig_cpu_* metrics and checked by vig doctor.
type CPU struct {
	// HotPath was "shared" (a goroutine per connection on Go's netpoller) or
	// "dedicated" (vig's own event loop on one locked OS thread). Only shared
	// remains: the dedicated loop cost more CPU and context switches per request
	// in every measured row (docs/architecture.md, "Placing vig on the CPUs"), so the key may be omitted
	// or say shared; dedicated is refused with the numbers.
	HotPath string `yaml:"hot_path"`
	// Pin and UclampMin placed and clamped the dedicated hot thread; they went
	// with it and are refused with the fix (process_cpus places every thread).
	Pin string `yaml:"pin"`
	// ProcessCPUs restricts every thread of vig to a CPU list ("" = all); GOMAXPROCS
	// is then set to the number of CPUs granted.
	ProcessCPUs string `yaml:"process_cpus"`
	UclampMin   *int   `yaml:"uclamp_min"`
	GC          GC     `yaml:"gc"`

	lines map[string]int // key (hot_path, gc.gogc, …) → line, for errors
}

// GC tunes Go's garbage collector (debug.SetMemoryLimit, debug.SetGCPercent).
type GC struct {
	// MemoryLimitMiB is the soft heap limit: past it the collector runs more
	// often rather than let the heap grow towards the low-memory killer. -1: no
	// limit. Absent: DefaultMemoryLimitMiB, unless GOMEMLIMIT is set.
	MemoryLimitMiB *int `yaml:"memory_limit_mib"`
	// GOGC is the heap growth between collections in percent; -1 turns the
	// proportional trigger off (then only the memory limit triggers a collection).
	// Absent: DefaultGOGC, unless GOGC is set.
	GOGC *int `yaml:"gogc"`
}

// The cpu: section's values and defaults.
const (
	HotPathShared = "shared"
	PinNone       = "none"

	DefaultHotPath        = HotPathShared
	DefaultMemoryLimitMiB = 512
	DefaultGOGC           = 100
)

// dedicatedCost is what the removed hot_path: dedicated cost against shared, in
// the last side-by-side run (vig bench datapath --quick --no-pin, 0 B–6.2 MB, gRPC
// over TCP and the memfd ring; bench/results/2026-12-01-vm-dedicated-removed).
const dedicatedCost = "cost 1.1–1.4× the CPU and 1.5–2.8× the context switches per request of shared in every measured row"

// Line returns the line of a key of the cpu: section ("pin", "gc.gogc"), or 0.
func (c CPU) Line(key string) int { return c.lines[key] }

// ProcessCPUList returns the process_cpus list, or nil for all CPUs.
func (c CPU) ProcessCPUList() []int {
	if c.ProcessCPUs == "" {
		return nil
	}
	ids, _ := cpu.ParseList([]byte(c.ProcessCPUs)) // validated
	return ids
}

func (c *CPU) locate(n *yaml.Node) {
	c.lines = map[string]int{"cpu": n.Line}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		c.lines[k.Value] = k.Line
		if k.Value == "gc" {
			for j := 0; j+1 < len(v.Content); j += 2 {
				c.lines["gc."+v.Content[j].Value] = v.Content[j].Line
			}
		}
	}
}

func (c *CPU) applyDefaults() {
	setDefault(&c.HotPath, DefaultHotPath)
	setDefault(&c.Pin, PinNone)
}

// validate checks the cpu: section; bad reports one problem.
func (c *CPU) validate(bad func(line int, key, format string, args ...any)) {
	at := func(key string) (int, string) { return c.Line(key), "cpu." + key }
	switch c.HotPath {
	case HotPathShared:
	case "dedicated":
		l, k := at("hot_path")
		bad(l, k, "dedicated was removed: its event loop on one locked OS thread %s; remove the key (shared, the Go netpoller's goroutine per connection, is the only hot path)", dedicatedCost)
	default:
		l, k := at("hot_path")
		bad(l, k, "%q: the only hot path is shared (dedicated was removed); remove the key or set shared", c.HotPath)
	}
	if c.Pin != PinNone {
		l, k := at("pin")
		bad(l, k, "pinned the dedicated hot thread, which was removed with hot_path: dedicated; remove the key, and restrict the whole process with process_cpus (e.g. process_cpus: 4-7) if vig should run on certain CPUs")
	}
	if c.ProcessCPUs != "" {
		if _, err := cpu.ParseList([]byte(c.ProcessCPUs)); err != nil {
			l, k := at("process_cpus")
			bad(l, k, "%q is not a CPU list such as 0-3 or 4,6 (%v); leave it out for all CPUs", c.ProcessCPUs, err)
		}
	}
	if c.UclampMin != nil {
		l, k := at("uclamp_min")
		bad(l, k, "clamped the dedicated hot thread, which was removed with hot_path: dedicated; remove the key")
	}
	if v := c.GC.MemoryLimitMiB; v != nil && *v != -1 && *v < 16 {
		l, k := at("gc.memory_limit_mib")
		bad(l, k, "%d MiB: give a soft heap limit of at least 16 MiB (vig holds frames of several MB), or -1 for none", *v)
	}
	if v := c.GC.GOGC; v != nil {
		l, k := at("gc.gogc")
		switch {
		case *v != -1 && *v < 10:
			bad(l, k, "%d: below 10 the collector runs almost constantly; use 50–200, or -1 (off) with a memory_limit_mib", *v)
		case *v == -1 && c.GC.MemoryLimitMiB != nil && *c.GC.MemoryLimitMiB == -1:
			bad(l, k, "-1 turns the proportional collector off and memory_limit_mib is -1 too: nothing would ever trigger a collection; set a memory_limit_mib")
		}
	}
}

// String describes the section in one line for logs.
func (c CPU) String() string {
	parts := []string{"hot_path " + c.HotPath}
	if c.ProcessCPUs != "" {
		parts = append(parts, "process_cpus "+c.ProcessCPUs)
	}
	return strings.Join(parts, ", ")
}
