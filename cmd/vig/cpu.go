package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/doctor"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/platform/cpu"
)

// cpuControls is what applyCPU set up; Close undoes it.
type cpuControls struct {
	State metrics.CPUState

	undo []func() error // in the order to run them
}

// Close restores the process mask, GOMAXPROCS and the collector's settings.
func (c *cpuControls) Close() error {
	var errs []error
	for _, u := range c.undo {
		errs = append(errs, u())
	}
	c.undo = nil
	return errors.Join(errs...)
}

// cpuPlan is the cpu: section resolved against the device.
type cpuPlan struct {
	process []int    // nil: leave the process mask
	notes   []string // what was adjusted
}

// planCPU resolves the cpu: section against the topology and the mask vig was
// started with (a cpuset, taskset or the launching shell's may be narrower than
// the online CPUs).
func planCPU(c config.CPU, topo cpu.Topology, topoErr error, allowed []int) (cpuPlan, error) {
	var p cpuPlan
	resolve := func(key, spec string, within []int) ([]int, error) {
		var ids []int
		if topoErr != nil {
			if spec == "big" || spec == "mid" || spec == "little" {
				return nil, fmt.Errorf("%s %s needs the CPU topology: %w", key, spec, topoErr)
			}
			var err error
			if ids, err = cpu.ParseList([]byte(spec)); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		} else {
			var note string
			var err error
			if ids, note, err = cpu.ResolvePin(topo, spec); err != nil {
				return nil, fmt.Errorf("%s %s: %w", key, spec, err)
			}
			if note != "" {
				p.notes = append(p.notes, key+": "+note)
			}
		}
		var in []int
		for _, id := range ids {
			if slices.Contains(within, id) {
				in = append(in, id)
			}
		}
		if len(in) == 0 {
			return nil, fmt.Errorf("%s %s: none of cpu%s may be used by vig, whose mask is cpu%s (a cpuset or taskset narrows it; cat /proc/self/status | grep Cpus_allowed_list)",
				key, spec, cpu.FormatList(ids), cpu.FormatList(within))
		}
		if len(in) < len(ids) {
			p.notes = append(p.notes, fmt.Sprintf("%s %s: cpu%s outside vig's mask cpu%s; using cpu%s", key, spec,
				cpu.FormatList(without(ids, in)), cpu.FormatList(within), cpu.FormatList(in)))
		}
		return in, nil
	}
	if c.ProcessCPUs != "" {
		ids, err := resolve("process_cpus", c.ProcessCPUs, allowed)
		if err != nil {
			return p, err
		}
		p.process = ids
	}
	return p, nil
}

func without(all, drop []int) []int {
	var out []int
	for _, id := range all {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}

// applyCPU applies the cpu: section at the start of vig serve: the collector's
// settings and the process mask with GOMAXPROCS to match. Each result is read
// back, logged, and exported as vig_cpu_* metrics in reg. A placement that cannot
// be made as configured is an error (serve refuses to start with it).
func applyCPU(cfg *config.Config, log *slog.Logger, reg *metrics.Registry) (*cpuControls, error) {
	c := cfg.CPU
	ctl := &cpuControls{}
	topo, topoErr := cpu.ReadTopology(cpu.Root())
	if topoErr != nil {
		log.Warn("cpu: topology unreadable; process_cpus by core kind is unavailable", "err", topoErr)
	}

	gc := applyGC(c.GC, os.Getenv)
	ctl.undo = append(ctl.undo, gc.undo)
	ctl.State.MemoryLimitBytes, ctl.State.GOGC = gc.limit, gc.gogc
	log.Info("cpu: garbage collector", "memory_limit", limitString(gc.limit), "gogc", gc.gogc, "from", gc.from)

	allowed, err := cpu.ProcessAffinity()
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	plan, err := planCPU(c, topo, topoErr, allowed)
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("cpu: %w", err)
	}
	for _, n := range plan.notes {
		log.Warn("cpu: " + n)
	}
	ctl.State.ProcessCPUs = allowed
	if plan.process != nil {
		rep, undo, err := cpu.SetProcessCPUs(plan.process)
		if err != nil {
			ctl.Close()
			return nil, fmt.Errorf("cpu: process_cpus %s: %w", c.ProcessCPUs, err)
		}
		ctl.undo = append([]func() error{undo}, ctl.undo...)
		ctl.State.ProcessCPUs = rep.CPUs
		log.Info("cpu: process placed", "cpus", cpu.FormatList(rep.CPUs), "threads", rep.Threads, "gomaxprocs", rep.GOMAXPROCS)
	} else {
		log.Info("cpu: process mask inherited", "cpus", cpu.FormatList(allowed), "gomaxprocs", runtime.GOMAXPROCS(0))
	}
	if reg != nil {
		reg.CPU(ctl.State)
	}
	return ctl, nil
}

// gcSettings is what applyGC set, read back.
type gcSettings struct {
	limit int64  // bytes; math.MaxInt64 = none
	gogc  int    // -1 = off
	from  string // config, environment or default
	undo  func() error
}

// applyGC sets the soft memory limit and GOGC: the config's values, else the
// environment's (GOMEMLIMIT, GOGC: the runtime already applied them), else vig's
// defaults. It reads both back.
func applyGC(c config.GC, getenv func(string) string) gcSettings {
	oldLimit := debug.SetMemoryLimit(-1)
	oldGOGC := debug.SetGCPercent(-1)
	debug.SetGCPercent(oldGOGC) // SetGCPercent reads only by writing: put it back at once
	var from []string
	switch {
	case c.MemoryLimitMiB != nil && *c.MemoryLimitMiB == -1:
		debug.SetMemoryLimit(math.MaxInt64)
		from = append(from, "memory_limit_mib: config")
	case c.MemoryLimitMiB != nil:
		debug.SetMemoryLimit(int64(*c.MemoryLimitMiB) << 20)
		from = append(from, "memory_limit_mib: config")
	case getenv("GOMEMLIMIT") != "":
		from = append(from, "memory_limit_mib: GOMEMLIMIT")
	default:
		debug.SetMemoryLimit(int64(config.DefaultMemoryLimitMiB) << 20)
		from = append(from, "memory_limit_mib: default")
	}
	switch {
	case c.GOGC != nil:
		debug.SetGCPercent(*c.GOGC)
		from = append(from, "gogc: config")
	case getenv("GOGC") != "":
		from = append(from, "gogc: GOGC")
	default:
		debug.SetGCPercent(config.DefaultGOGC)
		from = append(from, "gogc: default")
	}
	s := gcSettings{limit: debug.SetMemoryLimit(-1), from: fmt.Sprint(from)}
	s.gogc = debug.SetGCPercent(-1)
	debug.SetGCPercent(s.gogc)
	s.undo = func() error {
		debug.SetMemoryLimit(oldLimit)
		debug.SetGCPercent(oldGOGC)
		return nil
	}
	return s
}

func limitString(b int64) string {
	if b == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

// cpuHost gives doctor the trial of the cpu: section.
func cpuHost(h *doctor.Host) *doctor.Host {
	h.CPUPlacement = cpuTrial
	return h
}

// cpuTrial applies the cpu: section to a scratch thread, the way applyCPU would,
// reads back what the kernel grants, and undoes it. The process itself is not
// changed: the process mask is tried on the scratch thread (the kernel checks a
// thread's mask against the same cpuset either way).
func cpuTrial(c config.CPU) doctor.CPUTrial {
	tr := doctor.CPUTrial{GOMAXPROCS: runtime.GOMAXPROCS(0)}
	var err error
	if tr.Allowed, err = cpu.ProcessAffinity(); err != nil {
		tr.Err = err
		return tr
	}
	topo, topoErr := cpu.ReadTopology(cpu.Root())
	plan, err := planCPU(c, topo, topoErr, tr.Allowed)
	tr.Notes = plan.notes
	if err != nil {
		tr.Err = err
		return tr
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if plan.process != nil {
			rep, undo, err := cpu.LockHot(cpu.HotOptions{CPUs: plan.process, UclampMin: -1})
			if err != nil {
				tr.Err = fmt.Errorf("process_cpus %s: %w", c.ProcessCPUs, err)
				return
			}
			tr.Process, tr.GOMAXPROCS = rep.CPUs, len(rep.CPUs)
			if err := undo(); err != nil {
				tr.Err = err
			}
		}
	}()
	<-done
	return tr
}
