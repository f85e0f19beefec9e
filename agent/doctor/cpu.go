package doctor

import (
	"fmt"
	"strings"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/platform/cpu"
)

// CPUTrial is what the config's cpu: section achieves on this device, tried the
// way vig serve applies it (on a scratch thread, then undone) and read back from
// the kernel. vig serve exports the same facts for its real threads as vig_cpu_*
// metrics.
type CPUTrial struct {
	Allowed    []int // the process's mask before any change
	GOMAXPROCS int   // what vig serve would run with
	// Process is the mask the process_cpus request is granted (nil: not asked).
	Process []int
	Notes   []string // what was adjusted (offline CPUs dropped, …)
	Err     error    // the placement cannot be made as configured
}

// cpuPlacementChecks reports the cpu: section as the device grants it.
func cpuPlacementChecks(cfg *config.Config, h *Host) []Check {
	c := cfg.CPU
	if h.CPUPlacement == nil {
		return []Check{{Name: "cpu placement", Status: Skipped, Detail: "no placement probe given to doctor (Host.CPUPlacement is nil)"}}
	}
	tr := h.CPUPlacement(c)
	pl := Check{Name: "cpu placement", Status: OK}
	if tr.Err != nil {
		// Configured and not achievable: vig serve refuses to start with it.
		pl.Status, pl.Detail = Fail, fmt.Sprintf("%s: %v; fix the cpu: section (vig topology lists this device's CPUs)", c, tr.Err)
		return []Check{pl}
	}
	parts := []string{"hot_path shared: the Go scheduler places vig's work"}
	if tr.Process != nil {
		parts = append(parts, fmt.Sprintf("process on cpu%s", cpu.FormatList(tr.Process)))
	} else {
		parts = append(parts, fmt.Sprintf("process on cpu%s (inherited)", cpu.FormatList(tr.Allowed)))
	}
	parts = append(parts, fmt.Sprintf("GOMAXPROCS %d", tr.GOMAXPROCS))
	pl.Detail = strings.Join(parts, "; ")
	if len(tr.Notes) > 0 {
		pl.Status = Warn
		pl.Detail += "; " + strings.Join(tr.Notes, "; ")
	}
	return []Check{pl}
}
