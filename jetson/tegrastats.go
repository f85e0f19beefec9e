package jetson

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Tegrastats is one line of tegrastats: RAM, CPU [%@MHz,…], EMC_FREQ and GR3D_FREQ.
type Tegrastats struct {
	RAMUsedMB, RAMTotalMB int
	CPUs                  []CPULoad
	// EMC (external memory controller) load and frequency: a memory bus near
	// saturation slows every inference, whatever the GPU load says. -1: absent.
	EMCPercent, EMCMHz int
	// GR3D is the GPU. GR3DMHz holds one frequency per GPC on Orin ("0%@[305,305]");
	// empty when tegrastats printed none. GR3DPercent is -1 when absent.
	GR3DPercent int
	GR3DMHz     []int
}

// CPULoad is one core's entry in tegrastats' CPU list.
type CPULoad struct {
	Online  bool
	Percent int
	MHz     int // 0 when not printed
}

// ParseTegrastats parses one tegrastats line, as printed by JetPack 4 (Nano, TX2:
// "GR3D_FREQ 0%@921"), 5 and 6 (Orin: "GR3D_FREQ 0%@[305,305]", cores "off").
// The CPU list is required; RAM, EMC and GR3D are optional (older L4T lacks EMC
// on some boards).
func ParseTegrastats(line []byte) (Tegrastats, error) {
	s, _, _ := strings.Cut(string(line), "\n")
	t := Tegrastats{EMCPercent: -1, EMCMHz: -1, GR3DPercent: -1}
	f := strings.Fields(s)
	sawCPU := false
	for i := 0; i+1 < len(f); i++ {
		v := f[i+1]
		var err error
		switch f[i] {
		case "RAM":
			used, total, ok := strings.Cut(strings.TrimSuffix(v, "MB"), "/")
			if t.RAMUsedMB, err = strconv.Atoi(used); err == nil && ok {
				t.RAMTotalMB, err = strconv.Atoi(total)
			}
			if err != nil || !ok || t.RAMUsedMB < 0 || t.RAMTotalMB < t.RAMUsedMB {
				return Tegrastats{}, fmt.Errorf("tegrastats: RAM %q is not used/totalMB", v)
			}
		case "CPU":
			if !strings.HasPrefix(v, "[") || !strings.HasSuffix(v, "]") {
				continue // "CPU@47.5C" is a temperature; the load list is bracketed
			}
			if t.CPUs, err = parseCPUList(v[1 : len(v)-1]); err != nil {
				return Tegrastats{}, err
			}
			sawCPU = true
		case "EMC_FREQ":
			if t.EMCPercent, t.EMCMHz, err = percentAt(v); err != nil {
				return Tegrastats{}, fmt.Errorf("tegrastats: EMC_FREQ %w", err)
			}
		case "GR3D_FREQ":
			pct, freq, _ := strings.Cut(v, "@")
			if t.GR3DPercent, err = percent(pct); err != nil {
				return Tegrastats{}, fmt.Errorf("tegrastats: GR3D_FREQ %w", err)
			}
			if freq != "" {
				for _, m := range strings.Split(strings.Trim(freq, "[]"), ",") {
					mhz, err := strconv.Atoi(m)
					if err != nil || mhz < 0 {
						return Tegrastats{}, fmt.Errorf("tegrastats: GR3D_FREQ frequency %q", freq)
					}
					t.GR3DMHz = append(t.GR3DMHz, mhz)
				}
			}
		}
	}
	if !sawCPU {
		return Tegrastats{}, errors.New("tegrastats: no CPU [...] list in the line")
	}
	return t, nil
}

func parseCPUList(s string) ([]CPULoad, error) {
	var cpus []CPULoad
	for _, e := range strings.Split(s, ",") {
		if e == "off" {
			cpus = append(cpus, CPULoad{})
			continue
		}
		pct, mhz, err := percentAt(e)
		if err != nil {
			return nil, fmt.Errorf("tegrastats: CPU entry %w", err)
		}
		cpus = append(cpus, CPULoad{Online: true, Percent: pct, MHz: max(mhz, 0)})
	}
	return cpus, nil
}

// percentAt parses "12%@1510" (and "12%", "12%@-"); the frequency is -1 when absent.
func percentAt(s string) (int, int, error) {
	pct, freq, hasFreq := strings.Cut(s, "@")
	p, err := percent(pct)
	if err != nil {
		return 0, 0, err
	}
	if !hasFreq || freq == "-" {
		return p, -1, nil
	}
	mhz, err := strconv.Atoi(freq)
	if err != nil || mhz < 0 {
		return 0, 0, fmt.Errorf("%q: frequency is not MHz", s)
	}
	return p, mhz, nil
}

func percent(s string) (int, error) {
	v, ok := strings.CutSuffix(s, "%")
	n, err := strconv.Atoi(v)
	if !ok || err != nil || n < 0 || n > 100 {
		return 0, fmt.Errorf("%q is not a percentage", s)
	}
	return n, nil
}

// Loads from which the load reading warns.
const (
	busyEMCPercent = 80 // memory bandwidth nearly saturated
	busyCPUPercent = 80 // average over online cores
)

// LoadReading summarises a tegrastats line for doctor.
func LoadReading(t Tegrastats) Reading {
	online, sum := 0, 0
	for _, c := range t.CPUs {
		if c.Online {
			online++
			sum += c.Percent
		}
	}
	avg := 0
	if online > 0 {
		avg = sum / online
	}
	parts := []string{fmt.Sprintf("CPU %d %% avg over %d/%d online cores", avg, online, len(t.CPUs))}
	if t.EMCPercent >= 0 {
		p := fmt.Sprintf("EMC %d %%", t.EMCPercent)
		if t.EMCMHz >= 0 {
			p += fmt.Sprintf("@%d MHz", t.EMCMHz)
		}
		parts = append(parts, p)
	}
	if t.GR3DPercent >= 0 {
		parts = append(parts, fmt.Sprintf("GR3D %d %%", t.GR3DPercent))
	}
	if t.RAMTotalMB > 0 {
		parts = append(parts, fmt.Sprintf("RAM %d/%d MB", t.RAMUsedMB, t.RAMTotalMB))
	}
	r := Reading{Value: strings.Join(parts, ", ")}
	var adv []string
	if t.EMCPercent >= busyEMCPercent {
		adv = append(adv, "the memory bus is nearly saturated before vig starts: CPU and GPU share it, so execution times exceed their priors; find the other load in tegrastats or lower the camera resolution")
	}
	if avg >= busyCPUPercent {
		adv = append(adv, "the CPU cores are busy before vig starts: pre- and post-processing will queue behind that load")
	}
	r.Advice = strings.Join(adv, "; ")
	return r
}

// TegrastatsScript prints one tegrastats line and exits (tegrastats itself runs
// until killed; head ends it with SIGPIPE on its next line). Exit 127: not installed.
const TegrastatsScript = "command -v tegrastats >&2 || exit 127; tegrastats --interval 100 | head -n 1"

// tegrastatsReading runs TegrastatsScript through run and parses its line.
func tegrastatsReading(ctx context.Context, run Runner) Reading {
	out, err := run(ctx, "sh", "-c", TegrastatsScript)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 127:
		return Reading{Err: fmt.Errorf("tegrastats: %w (not installed here; it ships with L4T)", errors.ErrUnsupported)}
	case err != nil:
		return Reading{Err: err}
	}
	t, err := ParseTegrastats(out)
	if err != nil {
		return Reading{Err: err}
	}
	return LoadReading(t)
}
