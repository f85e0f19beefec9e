package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vig-edge/vig/platform/cpu"
)

// CPUState is what vig's CPU controls achieved at start, as read back from the
// kernel and the runtime (cmd/vig fills it; nothing here asks the OS).
type CPUState struct {
	// ProcessCPUs is the mask every thread of vig reads back.
	ProcessCPUs []int
	// MemoryLimitBytes and GOGC are the collector's settings read back
	// (math.MaxInt64: no limit; -1: proportional trigger off).
	MemoryLimitBytes int64
	GOGC             int
}

// cpuCollector exports a CPUState at scrape time.
type cpuCollector struct {
	state CPUState

	process, gomaxprocs, memLimit, gogc *prometheus.Desc
}

// CPU registers the vig_cpu_* metrics: the achieved placement (process mask,
// GOMAXPROCS as the runtime reports it at scrape time) and the collector's
// settings.
func (r *Registry) CPU(state CPUState) {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	r.reg.MustRegister(&cpuCollector{
		state:      state,
		process:    d("vig_cpu_process_cpus", "1 for the CPU mask every thread of vig reads back (process_cpus, or the inherited mask).", "cpus"),
		gomaxprocs: d("vig_cpu_gomaxprocs", "runtime.GOMAXPROCS(0) at scrape time."),
		memLimit:   d("vig_cpu_gc_memory_limit_bytes", "The Go runtime's soft memory limit (debug.SetMemoryLimit) read back."),
		gogc:       d("vig_cpu_gc_percent", "GOGC in effect (-1: proportional trigger off)."),
	})
}

func (c *cpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.process, c.gomaxprocs, c.memLimit, c.gogc} {
		ch <- d
	}
}

func (c *cpuCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	s := c.state
	if len(s.ProcessCPUs) > 0 {
		g(c.process, 1, cpu.FormatList(s.ProcessCPUs))
	}
	g(c.gomaxprocs, float64(runtime.GOMAXPROCS(0)))
	g(c.memLimit, float64(s.MemoryLimitBytes))
	g(c.gogc, float64(s.GOGC))
}
