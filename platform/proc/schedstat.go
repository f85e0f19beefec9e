package proc

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// SchedStat is the content of /proc/<pid>/task/<tid>/schedstat (see the
// kernel's Documentation/scheduler/sched-stats.rst): how long the thread
// ran, how long it waited runnable on a run queue, and in how many
// timeslices it ran. The file exists when the kernel has CONFIG_SCHED_INFO
// (CONFIG_SCHEDSTATS or CONFIG_TASK_DELAY_ACCT), which phone and Jetson
// kernels have.
type SchedStat struct {
	OnCPU        time.Duration // sum_exec_runtime
	RunQueueWait time.Duration // run_delay
	Timeslices   uint64        // pcount
}

// ParseSchedStat parses "<on-cpu ns> <run-queue ns> <timeslices>\n".
func ParseSchedStat(b []byte) (SchedStat, error) {
	var s SchedStat
	f := bytes.Fields(b)
	if len(f) != 3 {
		return s, fmt.Errorf("%w: schedstat: %d fields, want 3", ErrMalformed, len(f))
	}
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(string(f[i]), 10, 63)
		if err != nil {
			return s, fmt.Errorf("%w: schedstat: %q", ErrMalformed, f[i])
		}
		v[i] = n
	}
	return SchedStat{OnCPU: time.Duration(v[0]), RunQueueWait: time.Duration(v[1]), Timeslices: v[2]}, nil
}
