package metrics

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCPUMetrics(t *testing.T) {
	r := New()
	r.CPU(CPUState{ProcessCPUs: []int{4, 5, 6, 7}, MemoryLimitBytes: 512 << 20, GOGC: 100})
	want := `
# HELP vig_cpu_gomaxprocs runtime.GOMAXPROCS(0) at scrape time.
# TYPE vig_cpu_gomaxprocs gauge
vig_cpu_gomaxprocs ` + strconv.Itoa(runtime.GOMAXPROCS(0)) + `
# HELP vig_cpu_process_cpus 1 for the CPU mask every thread of vig reads back (process_cpus, or the inherited mask).
# TYPE vig_cpu_process_cpus gauge
vig_cpu_process_cpus{cpus="4-7"} 1
# HELP vig_cpu_gc_memory_limit_bytes The Go runtime's soft memory limit (debug.SetMemoryLimit) read back.
# TYPE vig_cpu_gc_memory_limit_bytes gauge
vig_cpu_gc_memory_limit_bytes 5.36870912e+08
# HELP vig_cpu_gc_percent GOGC in effect (-1: proportional trigger off).
# TYPE vig_cpu_gc_percent gauge
vig_cpu_gc_percent 100
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "vig_cpu_gomaxprocs", "vig_cpu_process_cpus",
		"vig_cpu_gc_memory_limit_bytes", "vig_cpu_gc_percent"); err != nil {
		t.Error(err)
	}
	// The hot thread's series went with hot_path: dedicated.
	if n := testutil.CollectAndCount(r.reg, "vig_cpu_hot_thread", "vig_cpu_uclamp_min", "vig_cpu_hot_samples_total"); n != 0 {
		t.Errorf("%d hot-thread series, want none", n)
	}
}
