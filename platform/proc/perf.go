package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vig-edge/vig/platform/sysinfo"
)

// PerfCounts are perf_event software counters summed over a process's
// threads (and the threads they spawned after the counters were opened).
type PerfCounts struct {
	TaskClock       time.Duration // time the threads were on a CPU
	ContextSwitches uint64
	CPUMigrations   uint64
	PageFaults      uint64
	// UserOnly is set when only user-mode events could be counted
	// (perf_event_paranoid=2 without CAP_PERFMON): context switches and
	// migrations happen in the kernel and then read as zero.
	UserOnly bool
	Threads  int // threads the counters were opened on
}

// ErrPerfDenied is wrapped by the errors that say perf_event_open is not
// allowed to this user; it wraps os.ErrPermission.
var ErrPerfDenied = fmt.Errorf("perf_event_open denied: %w", os.ErrPermission)

// ParanoidPath returns the path of the perf_event_paranoid sysctl.
func ParanoidPath() string { return filepath.Join(Root, "sys/kernel/perf_event_paranoid") }

// ParseParanoid parses the perf_event_paranoid sysctl (a signed integer).
func ParseParanoid(b []byte) (int, error) {
	v, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("%w: perf_event_paranoid %q", ErrMalformed, bytes.TrimSpace(b))
	}
	return v, nil
}

// Capability bits of CapEff (include/uapi/linux/capability.h).
const (
	CapSysAdmin = 21
	CapPerfmon  = 38 // Linux 5.8
	CapBPF      = 39 // Linux 5.8
)

// HasCap reports whether capability c is in the effective set capEff.
func HasCap(capEff uint64, c int) bool { return capEff&(1<<c) != 0 }

// perfPolicy decides, from the paranoid level and the caller's privilege,
// whether per-task software counters may be opened and whether they must
// exclude kernel mode. The levels (Documentation/admin-guide/perf-security.rst):
// -1 and 0 and 1 allow kernel and user measurement of one's own processes,
// 2 allows user-mode measurement only, and 3 and above (a Debian and
// Android patch; on Android it follows security.perf_harden) forbid
// unprivileged perf_event_open entirely.
func perfPolicy(level int, privileged, android bool) (userOnly bool, err error) {
	switch {
	case privileged || level <= 1:
		return false, nil
	case level == 2:
		return true, nil
	case android:
		return false, fmt.Errorf("%w: perf_event_paranoid=%d (security.perf_harden=1); "+
			"`adb shell setprop security.perf_harden 0` allows it until reboot", ErrPerfDenied, level)
	default:
		return false, fmt.Errorf("%w: perf_event_paranoid=%d forbids unprivileged use; "+
			"`sysctl kernel.perf_event_paranoid=1` or CAP_PERFMON allows it", ErrPerfDenied, level)
	}
}

// perfAccess reads the sysctl and the caller's capabilities and applies
// perfPolicy.
func perfAccess() (userOnly bool, err error) {
	b, err := os.ReadFile(ParanoidPath())
	if errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("perf events: %w (%s missing: kernel without CONFIG_PERF_EVENTS)",
			errors.ErrUnsupported, ParanoidPath())
	}
	if err != nil {
		return false, err
	}
	level, err := ParseParanoid(b)
	if err != nil {
		return false, err
	}
	self, err := ReadStatus(os.Getpid())
	if err != nil {
		return false, err
	}
	privileged := HasCap(self.CapEff, CapSysAdmin) || HasCap(self.CapEff, CapPerfmon)
	return perfPolicy(level, privileged, sysinfo.IsAndroid())
}
