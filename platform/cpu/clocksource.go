package cpu

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Clocksource is the kernel's current clock source and the ones it could use.
type Clocksource struct {
	Current   string   `json:"current"`
	Available []string `json:"available,omitempty"`
}

// ReadClocksource reads the clock source from root.
func ReadClocksource(root fs.FS) (Clocksource, error) {
	b, err := fs.ReadFile(root, strings.TrimPrefix(CurrentClocksource, "/"))
	if err != nil {
		return Clocksource{}, fmt.Errorf("clocksource: %w", err)
	}
	cs, err := ParseClocksource(b)
	if err != nil {
		return Clocksource{}, err
	}
	if a, err := fs.ReadFile(root, strings.TrimPrefix(AvailableClocksource, "/")); err == nil {
		cs.Available = strings.Fields(string(a))
	}
	return cs, nil
}

// ParseClocksource parses current_clocksource.
func ParseClocksource(b []byte) (Clocksource, error) {
	f := strings.Fields(string(bytes.TrimSpace(b)))
	if len(f) != 1 {
		return Clocksource{}, errors.New("clocksource: current_clocksource holds no single name")
	}
	return Clocksource{Current: f[0]}, nil
}

// fastClocks read time in user space (the vDSO) without a system call.
var fastClocks = map[string]bool{
	"tsc": true, "kvm-clock": true, "arch_sys_counter": true, "hyperv_clocksource_tsc_page": true,
}

// Advice returns "" when clock reads are cheap, or what is wrong and what to do. vig
// reads the monotonic clock several times per request; with hpet or acpi_pm each
// read is a system call of a microsecond or more.
func (c Clocksource) Advice() string {
	if fastClocks[c.Current] {
		return ""
	}
	better := ""
	for _, a := range c.Available {
		if fastClocks[a] {
			better = fmt.Sprintf("; %s is available: echo %s > %s (as root)", a, a, CurrentClocksource)
			break
		}
	}
	return fmt.Sprintf("clock source %s has no vDSO fast path: every clock read is a system call%s", c.Current, better)
}
