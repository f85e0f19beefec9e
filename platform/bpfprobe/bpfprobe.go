package bpfprobe

import (
	"fmt"
	"runtime"
	"sort"
	"time"
)

// Options configure a collector.
type Options struct {
	PID int // thread-group id of the process to profile
}

// Syscall is what one syscall number cost the target.
type Syscall struct {
	Nr      int           `json:"nr"`
	Name    string        `json:"name"`
	Count   uint64        `json:"count"`
	Total   time.Duration `json:"total_ns"`   // entry to exit, summed
	Max     time.Duration `json:"max_ns"`     // longest single call
	Blocked time.Duration `json:"blocked_ns"` // part of Total spent off-CPU (sleeping, waiting)
}

// OnCPU is the part of the syscalls' time spent running in the kernel.
func (s Syscall) OnCPU() time.Duration { return s.Total - s.Blocked }

// Bucket is one power-of-two bucket of a latency histogram: Count values
// were in [Low, High).
type Bucket struct {
	Low   time.Duration `json:"low_ns"`
	High  time.Duration `json:"high_ns"`
	Count uint64        `json:"count"`
}

// Softirq is the time softirq handlers of one vector ran.
type Softirq struct {
	Vector int    `json:"vector"`
	Name   string `json:"name"`
	// Count and Time are softirqs that ran while a thread of the target
	// was current: on loopback TCP, the receive path of the target's own
	// sends (NET_RX) runs there and is charged to it.
	Count uint64        `json:"count"`
	Time  time.Duration `json:"time_ns"`
	// SystemCount and SystemTime cover all CPUs and all processes.
	SystemCount uint64        `json:"system_count"`
	SystemTime  time.Duration `json:"system_time_ns"`
}

// Counts are the totals since the collector started.
type Counts struct {
	Syscalls []Syscall `json:"syscalls"` // sorted by Total, longest first

	RunQueueCount uint64        `json:"runqueue_count"` // times a thread waited runnable
	RunQueueTotal time.Duration `json:"runqueue_total_ns"`
	RunQueueMax   time.Duration `json:"runqueue_max_ns"`
	RunQueueHist  []Bucket      `json:"runqueue_hist"` // non-empty buckets only

	// Off-CPU time runs from a switch-out to the next switch-in, so it
	// includes the run-queue wait of a preempted or woken thread.
	OffCPUCount uint64        `json:"offcpu_count"`
	OffCPUTotal time.Duration `json:"offcpu_total_ns"`

	Voluntary   uint64 `json:"switches_voluntary"`   // switched out while blocking
	Involuntary uint64 `json:"switches_involuntary"` // switched out while runnable (preempted)

	Softirqs []Softirq `json:"softirqs"` // vectors that ran at all

	PageFaults      uint64 `json:"page_faults"`
	PageFaultsError string `json:"page_faults_error,omitempty"` // why faults were not counted

	Threads int `json:"threads"` // thread ids of the target seen

	// SyscallProbe is how syscalls were hooked: "raw_tracepoint" (Linux
	// 4.17+, cheaper) or "tracepoint" (the classic raw_syscalls events).
	SyscallProbe string `json:"syscall_probe"`
}

// SyscallTotals sums count, total and blocked time over all syscalls.
func (c *Counts) SyscallTotals() (count uint64, total, blocked time.Duration) {
	for _, s := range c.Syscalls {
		count += s.Count
		total += s.Total
		blocked += s.Blocked
	}
	return count, total, blocked
}

// Syscall returns the entry for a syscall name, if it was seen.
func (c *Counts) Syscall(name string) (Syscall, bool) {
	for _, s := range c.Syscalls {
		if s.Name == name {
			return s, true
		}
	}
	return Syscall{}, false
}

// Softirq returns the entry for a vector name such as "NET_RX".
func (c *Counts) Softirq(name string) (Softirq, bool) {
	for _, s := range c.Softirqs {
		if s.Name == name {
			return s, true
		}
	}
	return Softirq{}, false
}

// softirqNames are the vectors of include/linux/interrupt.h (stable since 4.x).
var softirqNames = [...]string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"}

// SoftirqName names a softirq vector.
func SoftirqName(vec int) string {
	if vec >= 0 && vec < len(softirqNames) {
		return softirqNames[vec]
	}
	return fmt.Sprintf("vec_%d", vec)
}

// SyscallName names syscall nr for GOARCH arch ("amd64" or "arm64");
// numbers without a name are shown as "sys_<nr>".
func SyscallName(arch string, nr int) string {
	var table []string
	switch arch {
	case "amd64":
		table = syscallsAmd64[:]
	case "arm64":
		table = syscallsArm64[:]
	}
	if nr >= 0 && nr < len(table) && table[nr] != "" {
		return table[nr]
	}
	return fmt.Sprintf("sys_%d", nr)
}

// sortSyscalls orders by total time, then count, then number.
func sortSyscalls(s []Syscall) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Total != s[j].Total {
			return s[i].Total > s[j].Total
		}
		if s[i].Count != s[j].Count {
			return s[i].Count > s[j].Count
		}
		return s[i].Nr < s[j].Nr
	})
}

// hostArch is the architecture whose syscall numbers the kernel reports
// to this process.
var hostArch = runtime.GOARCH
