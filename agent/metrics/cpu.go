package metrics

import (
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vig-edge/vig/platform/cpu"
)

// CPUState is what vig's CPU controls achieved at start, as read back from the
// kernel and the runtime (cmd/vig fills it; nothing here asks the OS).
type CPUState struct {
	HotPath string // dedicated | shared
	// HotTID is the dedicated hot thread's id, 0 without one; HotCPUs its mask as
	// sched_getaffinity reads it.
	HotTID  int
	HotCPUs []int
	// UclampMin is the hot thread's clamp read back, -1 when not in effect;
	// UclampRequested the configured value, -1 when none.
	UclampMin, UclampRequested int
	// ProcessCPUs is the mask every thread of vig reads back.
	ProcessCPUs []int
	// MemoryLimitBytes and GOGC are the collector's settings read back
	// (math.MaxInt64: no limit; -1: proportional trigger off).
	MemoryLimitBytes int64
	GOGC             int
}

// cpuCollector exports a CPUState and the hot thread's samples at scrape time.
type cpuCollector struct {
	state   CPUState
	samples func() cpu.SampleStats // nil: no sampler

	hot, process, gomaxprocs, uclamp, uclampReq, memLimit, gogc *prometheus.Desc
	sampleCount, share, medianMHz, samplingOn                   *prometheus.Desc
}

// CPU registers the vig_cpu_* metrics: the achieved placement (hot thread id and
// mask, process mask, GOMAXPROCS as the runtime reports it at scrape time, clamp,
// collector settings) and, from samples, where the hot thread ran (share of
// samples per cluster, median clock). samples may be nil.
func (r *Registry) CPU(state CPUState, samples func() cpu.SampleStats) {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	r.reg.MustRegister(&cpuCollector{
		state: state, samples: samples,
		hot:        d("vig_cpu_hot_thread", "1 for vig's dedicated hot thread: its thread id and the CPUs its mask reads back (sched_getaffinity).", "hot_path", "tid", "cpus"),
		process:    d("vig_cpu_process_cpus", "1 for the CPU mask every thread of vig reads back (process_cpus, or the inherited mask).", "cpus"),
		gomaxprocs: d("vig_cpu_gomaxprocs", "runtime.GOMAXPROCS(0) at scrape time."),
		uclamp:     d("vig_cpu_uclamp_min", "The hot thread's uclamp_min read back with sched_getattr; -1 when not in effect (not asked, or unsupported: see the start-up log and vig doctor)."),
		uclampReq:  d("vig_cpu_uclamp_min_requested", "uclamp_min from the config; -1 when not set."),
		memLimit:   d("vig_cpu_gc_memory_limit_bytes", "The Go runtime's soft memory limit (debug.SetMemoryLimit) read back."),
		gogc:       d("vig_cpu_gc_percent", "GOGC in effect (-1: proportional trigger off)."),
		sampleCount: d("vig_cpu_hot_samples_total",
			"Placement samples of the hot thread (getcpu) per cluster; sampling is off unless vig profile or a benchmark turns it on.", "cluster", "cpus"),
		share:      d("vig_cpu_hot_cluster_share", "Share of the hot thread's samples taken on each cluster (0–1).", "cluster", "cpus"),
		medianMHz:  d("vig_cpu_hot_freq_median_mhz", "Median scaling_cur_freq of the CPU the hot thread ran on, over its recent samples; 0 when no cpufreq is readable."),
		samplingOn: d("vig_cpu_hot_sampling_enabled", "1 while the hot thread's placement is being sampled."),
	})
}

func (c *cpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hot, c.process, c.gomaxprocs, c.uclamp, c.uclampReq, c.memLimit, c.gogc,
		c.sampleCount, c.share, c.medianMHz, c.samplingOn} {
		ch <- d
	}
}

func (c *cpuCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	s := c.state
	if s.HotTID != 0 {
		g(c.hot, 1, s.HotPath, strconv.Itoa(s.HotTID), cpu.FormatList(s.HotCPUs))
	}
	if len(s.ProcessCPUs) > 0 {
		g(c.process, 1, cpu.FormatList(s.ProcessCPUs))
	}
	g(c.gomaxprocs, float64(runtime.GOMAXPROCS(0)))
	g(c.uclamp, float64(s.UclampMin))
	g(c.uclampReq, float64(s.UclampRequested))
	g(c.memLimit, float64(s.MemoryLimitBytes))
	g(c.gogc, float64(s.GOGC))
	if c.samples == nil {
		return
	}
	st := c.samples()
	on := 0.0
	if st.Enabled {
		on = 1
	}
	g(c.samplingOn, on)
	for _, cl := range st.Clusters {
		kind := cl.Kind
		if kind == "" {
			kind = "all"
			if cl.CPUs == "other" {
				kind = "other"
			}
		}
		ch <- prometheus.MustNewConstMetric(c.sampleCount, prometheus.CounterValue, float64(cl.Samples), kind, cl.CPUs)
		g(c.share, cl.Share, kind, cl.CPUs)
	}
	g(c.medianMHz, st.MedianMHz)
}
