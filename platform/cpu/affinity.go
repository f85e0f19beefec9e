package cpu

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vig-edge/vig/platform/sysinfo"
)

// Placement controls. vig's per-request path is a burst: spread over many threads
// it never keeps one core busy long enough for the cpufreq governor to raise its
// frequency, and every hand-off between threads is a context switch. These controls
// concentrate the hot path on one OS thread, restrict where it (and the process)
// may run, and ask the scheduler to treat the thread as busy (uclamp). Each one
// reads back what the kernel actually applied; none fails silently.

// UclampMax is the largest utilization clamp value (SCHED_CAPACITY_SCALE).
const UclampMax = 1024

// UclampMinKernel is the first kernel with per-task utilization clamping.
const UclampMinKernel = "5.3"

// HotOptions says how to place the hot thread.
type HotOptions struct {
	// CPUs restricts the thread to these CPUs (sched_setaffinity on the thread);
	// nil leaves its mask as it is.
	CPUs []int
	// UclampMin, 0–1024, asks the scheduler to run the thread as if it used at least
	// this share of the biggest core's capacity (schedutil then picks a frequency and
	// EAS a core to match). -1 leaves the clamp alone.
	UclampMin int
}

// ThreadReport is what a placement achieved on one thread, read back from the kernel.
type ThreadReport struct {
	TID       int   `json:"tid"`
	Requested []int `json:"requested_cpus,omitempty"` // nil: mask left alone
	CPUs      []int `json:"cpus"`                     // sched_getaffinity after the change
	// UclampMin is the clamp read back with sched_getattr, or -1 when it was not
	// set (not asked for, or it failed: see UclampErr).
	UclampMin int   `json:"uclamp_min"`
	UclampErr error `json:"-"` // why the clamp is not in effect; wraps errors.ErrUnsupported when the kernel lacks it
}

// ProcessReport is what SetProcessCPUs achieved.
type ProcessReport struct {
	Requested  []int `json:"requested_cpus"`
	CPUs       []int `json:"cpus"`       // the mask every thread reads back
	Threads    int   `json:"threads"`    // threads of the process whose mask was set
	GOMAXPROCS int   `json:"gomaxprocs"` // runtime.GOMAXPROCS(0) afterwards
}

// String describes a thread report in one line for logs.
func (r ThreadReport) String() string {
	s := fmt.Sprintf("tid %d on cpu%s", r.TID, FormatList(r.CPUs))
	switch {
	case r.UclampErr != nil:
		s += fmt.Sprintf(", uclamp_min not set: %v", r.UclampErr)
	case r.UclampMin >= 0:
		s += fmt.Sprintf(", uclamp_min %d", r.UclampMin)
	}
	return s
}

// validCPUs checks a requested mask before it reaches the kernel.
func validCPUs(what string, cpus []int) error {
	if len(cpus) == 0 {
		return fmt.Errorf("%s: empty cpu set", what)
	}
	for _, c := range cpus {
		if c < 0 || c >= maxCPUs {
			return fmt.Errorf("%s: cpu %d out of range 0–%d", what, c, maxCPUs-1)
		}
	}
	return nil
}

// maxCPUs bounds CPU numbers (the kernel's fixed cpu_set_t holds 1024).
const maxCPUs = 1024

// ResolvePin turns a pin spelling into CPUs of topo: "big", "mid", "little" (the
// clusters of that kind, online CPUs only) or a CPU list such as "4-6". On a
// machine whose cores are all alike, every kind names all online CPUs (the note
// says so). A kind the machine does not have is an error naming the kinds it has.
func ResolvePin(topo Topology, pin string) (cpus []int, note string, err error) {
	switch pin {
	case "big", "mid", "little":
	default:
		ids, err := ParseList([]byte(pin))
		if err != nil {
			return nil, "", err
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		online := topo.OnlineIDs()
		var in []int
		for _, id := range ids {
			if slices.Contains(online, id) {
				in = append(in, id)
			}
		}
		if len(in) == 0 {
			return nil, "", fmt.Errorf("cpu list %s names no online CPU (online: %s)", pin, FormatList(online))
		}
		if len(in) < len(ids) {
			note = fmt.Sprintf("cpu%s offline or absent; using cpu%s", FormatList(without(ids, in)), FormatList(in))
		}
		return in, note, nil
	}
	var kinds []string
	for _, c := range topo.Clusters {
		if c.Kind == "" {
			return topo.OnlineIDs(), fmt.Sprintf("all cores are alike: %q means every online CPU", pin), nil
		}
		kinds = append(kinds, c.Kind)
		if c.Kind == pin {
			cpus = append(cpus, c.CPUs...)
		}
	}
	if len(cpus) == 0 {
		return nil, "", fmt.Errorf("no %s cluster on this device (it has %v)", pin, kinds)
	}
	slices.Sort(cpus)
	return cpus, "", nil
}

func without(all, keep []int) []int {
	var out []int
	for _, id := range all {
		if !slices.Contains(keep, id) {
			out = append(out, id)
		}
	}
	return out
}

// uclampByVersion refuses kernel releases older than UclampMinKernel. An
// unparsable release is given the benefit of the doubt: the syscall then decides.
func uclampByVersion(release string) error {
	if ma, mi, ok := sysinfo.ParseVersion(release); ok && !(ma > 5 || ma == 5 && mi >= 3) {
		return errUnsupportedUclamp(release, "too old")
	}
	return nil
}

// errUnsupportedUclamp explains why utilization clamping is not available.
func errUnsupportedUclamp(release, why string) error {
	return fmt.Errorf("uclamp_min via sched_setattr: %w (kernel %s: %s; needs %s with CONFIG_UCLAMP_TASK, and schedutil to act on it)",
		errors.ErrUnsupported, release, why, UclampMinKernel)
}
