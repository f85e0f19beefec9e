package config

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/vig-edge/vig/platform/cpu"
)

// CPU places vig's threads and tunes the Go runtime for the device (section cpu:).
// Every control is applied at start by vig serve and read back; what it achieved
// is logged, exported as vig_cpu_* metrics and checked by vig doctor.
type CPU struct {
	// HotPath "shared" (the default) gives every connection a goroutine on Go's
	// netpoller and leaves placement to Go. "dedicated" reads every hot connection
	// on one event loop of vig's own, on one locked OS thread that pin and
	// uclamp_min place: per request a wait, a read and a write on each side, no
	// hand-off between threads.
	HotPath string `yaml:"hot_path"`
	// Pin restricts the hot thread: "none", a core kind ("big", "mid", "little",
	// from the device's topology) or a CPU list such as "4-6". Needs hot_path: dedicated.
	Pin string `yaml:"pin"`
	// ProcessCPUs restricts every thread of vig to a CPU list ("" = all); GOMAXPROCS
	// is then set to the number of CPUs granted.
	ProcessCPUs string `yaml:"process_cpus"`
	// UclampMin (0–1024) asks the kernel to run the hot thread as if it used at
	// least this much of the biggest core's capacity (sched_setattr,
	// SCHED_FLAG_UTIL_CLAMP_MIN; Linux 5.3+ with CONFIG_UCLAMP_TASK, best effort).
	// Absent: not set. Needs hot_path: dedicated.
	UclampMin *int `yaml:"uclamp_min"`
	GC        GC   `yaml:"gc"`

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
	HotPathDedicated = "dedicated"
	HotPathShared    = "shared"
	PinNone          = "none"

	DefaultHotPath        = HotPathShared
	DefaultMemoryLimitMiB = 512
	DefaultGOGC           = 100
)

// Line returns the line of a key of the cpu: section ("pin", "gc.gogc"), or 0.
func (c CPU) Line(key string) int { return c.lines[key] }

// PinCPUs returns the CPU list of an explicit pin, or nil for none or a core kind.
func (c CPU) PinCPUs() []int {
	if c.Pin == PinNone || isKind(c.Pin) {
		return nil
	}
	ids, _ := cpu.ParseList([]byte(c.Pin)) // validated
	return ids
}

// ProcessCPUList returns the process_cpus list, or nil for all CPUs.
func (c CPU) ProcessCPUList() []int {
	if c.ProcessCPUs == "" {
		return nil
	}
	ids, _ := cpu.ParseList([]byte(c.ProcessCPUs)) // validated
	return ids
}

func isKind(s string) bool { return s == "big" || s == "mid" || s == "little" }

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
	if !oneOf(c.HotPath, HotPathDedicated, HotPathShared) {
		l, k := at("hot_path")
		bad(l, k, "%q is not one of dedicated (per-request work on one locked OS thread), shared", c.HotPath)
	}
	var pin []int
	if c.Pin != PinNone && !isKind(c.Pin) {
		ids, err := cpu.ParseList([]byte(c.Pin))
		if err != nil {
			l, k := at("pin")
			bad(l, k, "%q is neither none, big, mid, little nor a CPU list such as 4-7 (%v)", c.Pin, err)
		}
		pin = ids
	}
	if c.Pin != PinNone && c.HotPath != HotPathDedicated {
		l, k := at("pin")
		bad(l, k, "pins the dedicated hot thread, but hot_path is %s: set hot_path: dedicated, or restrict the whole process with process_cpus", c.HotPath)
	}
	var proc []int
	if c.ProcessCPUs != "" {
		ids, err := cpu.ParseList([]byte(c.ProcessCPUs))
		if err != nil {
			l, k := at("process_cpus")
			bad(l, k, "%q is not a CPU list such as 0-3 or 4,6 (%v); leave it out for all CPUs", c.ProcessCPUs, err)
		}
		proc = ids
	}
	if len(pin) > 0 && len(proc) > 0 {
		var outside []int
		for _, id := range pin {
			if !slices.Contains(proc, id) {
				outside = append(outside, id)
			}
		}
		if len(outside) > 0 {
			slices.Sort(outside)
			l, k := at("pin")
			bad(l, k, "cpu%s is outside process_cpus %s: the hot thread can only run where the process may; pin within %s", cpu.FormatList(slices.Compact(outside)), c.ProcessCPUs, c.ProcessCPUs)
		}
	}
	if c.UclampMin != nil {
		l, k := at("uclamp_min")
		switch {
		case *c.UclampMin < 0 || *c.UclampMin > cpu.UclampMax:
			bad(l, k, "%d is outside 0–1024 (1024 = the biggest core's full capacity; 512 asks for about half)", *c.UclampMin)
		case c.HotPath != HotPathDedicated:
			bad(l, k, "clamps the dedicated hot thread, but hot_path is %s: set hot_path: dedicated", c.HotPath)
		}
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
	parts := []string{"hot_path " + c.HotPath, "pin " + c.Pin}
	if c.ProcessCPUs != "" {
		parts = append(parts, "process_cpus "+c.ProcessCPUs)
	}
	if c.UclampMin != nil {
		parts = append(parts, fmt.Sprintf("uclamp_min %d", *c.UclampMin))
	}
	return strings.Join(parts, ", ")
}
