package metrics

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vig-edge/vig/platform/cpu"
)

func TestCPUMetrics(t *testing.T) {
	r := New()
	stats := cpu.SampleStats{Enabled: true, Samples: 10, MedianMHz: 910, Clusters: []cpu.ClusterSamples{
		{Kind: "mid", CPUs: "4-6", Samples: 8, Share: 0.8}, {Kind: "big", CPUs: "7", Samples: 2, Share: 0.2}}}
	r.CPU(CPUState{HotPath: "dedicated", HotTID: 4242, HotCPUs: []int{7}, UclampMin: -1, UclampRequested: 512,
		ProcessCPUs: []int{4, 5, 6, 7}, MemoryLimitBytes: 512 << 20, GOGC: 100}, func() cpu.SampleStats { return stats })
	want := `
# HELP vig_cpu_gomaxprocs runtime.GOMAXPROCS(0) at scrape time.
# TYPE vig_cpu_gomaxprocs gauge
vig_cpu_gomaxprocs ` + strconv.Itoa(runtime.GOMAXPROCS(0)) + `
# HELP vig_cpu_hot_thread 1 for vig's dedicated hot thread: its thread id and the CPUs its mask reads back (sched_getaffinity).
# TYPE vig_cpu_hot_thread gauge
vig_cpu_hot_thread{cpus="7",hot_path="dedicated",tid="4242"} 1
# HELP vig_cpu_process_cpus 1 for the CPU mask every thread of vig reads back (process_cpus, or the inherited mask).
# TYPE vig_cpu_process_cpus gauge
vig_cpu_process_cpus{cpus="4-7"} 1
# HELP vig_cpu_uclamp_min The hot thread's uclamp_min read back with sched_getattr; -1 when not in effect (not asked, or unsupported: see the start-up log and vig doctor).
# TYPE vig_cpu_uclamp_min gauge
vig_cpu_uclamp_min -1
# HELP vig_cpu_uclamp_min_requested uclamp_min from the config; -1 when not set.
# TYPE vig_cpu_uclamp_min_requested gauge
vig_cpu_uclamp_min_requested 512
# HELP vig_cpu_hot_cluster_share Share of the hot thread's samples taken on each cluster (0–1).
# TYPE vig_cpu_hot_cluster_share gauge
vig_cpu_hot_cluster_share{cluster="big",cpus="7"} 0.2
vig_cpu_hot_cluster_share{cluster="mid",cpus="4-6"} 0.8
# HELP vig_cpu_hot_freq_median_mhz Median scaling_cur_freq of the CPU the hot thread ran on, over its recent samples; 0 when no cpufreq is readable.
# TYPE vig_cpu_hot_freq_median_mhz gauge
vig_cpu_hot_freq_median_mhz 910
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "vig_cpu_gomaxprocs", "vig_cpu_hot_thread", "vig_cpu_process_cpus",
		"vig_cpu_uclamp_min", "vig_cpu_uclamp_min_requested", "vig_cpu_hot_cluster_share", "vig_cpu_hot_freq_median_mhz"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(r.reg, "vig_cpu_hot_samples_total", "vig_cpu_gc_memory_limit_bytes", "vig_cpu_gc_percent", "vig_cpu_hot_sampling_enabled"); n != 2+1+1+1 {
		t.Errorf("%d series, want 5", n)
	}
	// Shared hot path, no sampler: no hot-thread series, no sample series.
	r = New()
	r.CPU(CPUState{HotPath: "shared", UclampMin: -1, UclampRequested: -1, ProcessCPUs: []int{0, 1}}, nil)
	if n := testutil.CollectAndCount(r.reg, "vig_cpu_hot_thread", "vig_cpu_hot_samples_total", "vig_cpu_hot_freq_median_mhz"); n != 0 {
		t.Errorf("shared: %d hot-thread series", n)
	}
}
