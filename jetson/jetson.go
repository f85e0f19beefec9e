// Package jetson holds vig's NVIDIA Jetson device policy: whether this is a Jetson
// (decided at run time from /etc/nv_tegra_release or the device tree), which
// board it is and how many DLA cores it has (Boards, BoardOf), which nvpmodel
// power mode it runs, whether jetson_clocks pins the clocks, and how busy
// the GPU, the memory bus and the cores are (tegrastats). Execution-time priors
// (exec_ms) only hold in the power mode, clock setup and load they were measured
// in, so doctor reports them all, and Collector exports them as metrics.
//
// It also holds vig's systemd integration (systemd/*.service, install.sh, and the
// sd_notify sender in notify.go): Jetsons run vig as a service.
//
// The parsers are pure functions over the tools' outputs and sysfs files, tested on
// captured fixtures.
package jetson

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/vig-edge/vig/platform/toolexec"

	"github.com/vig-edge/vig/platform/cpu"
)

// Locations and tools. Variables so that tests and other boards can change them.
var (
	TegraRelease         = "/etc/nv_tegra_release"
	DeviceTreeCompatible = "/proc/device-tree/compatible"
	// GPULoadPaths are probed in order; the first that exists holds the GPU load in
	// per mille (Xavier and older, Orin, JetPack 6 devfreq).
	GPULoadPaths = []string{
		"/sys/devices/gpu.0/load",
		"/sys/devices/platform/gpu.0/load",
		"/sys/devices/platform/bus@0/17000000.gpu/load",
		"/sys/class/devfreq/17000000.gpu/load",
	}
	Nvpmodel     = "nvpmodel"
	JetsonClocks = "jetson_clocks"
)

// Runner runs a command and returns its standard output.
type Runner = toolexec.Runner

// Exec runs a tool with a timeout; a tool that is not installed is an error that
// wraps errors.ErrUnsupported.
func Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return toolexec.Run(ctx, 10*time.Second, name, args...)
}

func rel(p string) string { return strings.TrimPrefix(p, "/") }

// Detect reports whether root is a Jetson and what showed it.
func Detect(root fs.FS) (bool, string) {
	if b, err := fs.ReadFile(root, rel(TegraRelease)); err == nil {
		if r := ParseRelease(b); r != "" {
			return true, "L4T " + r + " (" + TegraRelease + ")"
		}
		return true, TegraRelease + " exists"
	}
	if b, err := fs.ReadFile(root, rel(DeviceTreeCompatible)); err == nil {
		for _, c := range bytes.Split(b, []byte{0}) {
			if bytes.HasPrefix(c, []byte("nvidia,tegra")) {
				return true, "device tree: " + string(c)
			}
		}
	}
	return false, "no " + TegraRelease + " and no nvidia,tegra in " + DeviceTreeCompatible
}

// ParseRelease turns the first line of nv_tegra_release ("# R36 (release),
// REVISION: 3.0, …") into "R36.3.0"; "" when it is not in that form.
func ParseRelease(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	s := strings.TrimSpace(strings.TrimPrefix(string(line), "#"))
	major, rest, ok := strings.Cut(s, " ")
	if !ok || !strings.HasPrefix(major, "R") {
		return ""
	}
	_, rev, ok := strings.Cut(rest, "REVISION:")
	if !ok {
		return major
	}
	rev, _, _ = strings.Cut(strings.TrimSpace(rev), ",")
	return major + "." + strings.TrimSpace(rev)
}

// Reading is one fact about the board and what it means for vig.
type Reading struct {
	Value  string // what was read
	Advice string // empty when fine; otherwise what goes wrong and the fix
	Err    error  // could not be read; wraps errors.ErrUnsupported when it cannot be here
}

// Status is the Jetson-specific state doctor reports.
type Status struct {
	PowerMode Reading // nvpmodel -q
	Clocks    Reading // jetson_clocks
	GPULoad   Reading
	Load      Reading // tegrastats: CPU, EMC, GR3D
}

// Check reads the board's state through run (Exec on a device) and root.
func Check(ctx context.Context, root fs.FS, run Runner) Status {
	var s Status
	if out, err := run(ctx, Nvpmodel, "-q"); err != nil {
		s.PowerMode.Err = err
	} else if m, err := ParseNvpmodel(out); err != nil {
		s.PowerMode.Err = err
	} else {
		s.PowerMode.Value = m.String()
	}
	if out, err := run(ctx, JetsonClocks, "--show"); err == nil {
		s.Clocks = ClocksReading(out)
	} else {
		// jetson_clocks --show needs root; the CPU frequency limits in sysfs
		// answer the main question without it.
		s.Clocks = pinnedFromSysfs(root, err)
	}
	s.GPULoad = GPULoadReading(root)
	s.Load = tegrastatsReading(ctx, run)
	return s
}

// Mode is an nvpmodel power mode.
type Mode struct {
	Name string
	ID   int // -1 when nvpmodel did not print it
}

func (m Mode) String() string {
	if m.ID < 0 {
		return m.Name
	}
	return fmt.Sprintf("%s (mode %d)", m.Name, m.ID)
}

// ParseNvpmodel parses `nvpmodel -q`: "NV Power Mode: MAXN" and the mode id on the
// next line (a "NV Fan Mode" line may come first).
func ParseNvpmodel(out []byte) (Mode, error) {
	lines := strings.Split(string(out), "\n")
	for k, l := range lines {
		name, ok := strings.CutPrefix(strings.TrimSpace(l), "NV Power Mode:")
		if !ok {
			continue
		}
		m := Mode{Name: strings.TrimSpace(name), ID: -1}
		if m.Name == "" {
			break
		}
		if k+1 < len(lines) {
			if id, err := strconv.Atoi(strings.TrimSpace(lines[k+1])); err == nil && id >= 0 {
				m.ID = id
			}
		}
		return m, nil
	}
	return Mode{}, errors.New("nvpmodel -q: no \"NV Power Mode:\" line")
}

// ClocksReading interprets `jetson_clocks --show`: the clocks are pinned when every
// online CPU and the GPU run with MinFreq equal to MaxFreq.
func ClocksReading(out []byte) Reading {
	var cpus, pinned int
	gpu := ""
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		kv := fieldsKV(l)
		switch {
		case strings.HasPrefix(l, "cpu") && strings.Contains(l, ":"):
			if kv["Online"] == "0" {
				continue
			}
			cpus++
			if kv["MinFreq"] != "" && kv["MinFreq"] == kv["MaxFreq"] {
				pinned++
			}
		case strings.HasPrefix(l, "GPU "):
			gpu = "not pinned"
			if kv["MinFreq"] != "" && kv["MinFreq"] == kv["MaxFreq"] {
				gpu = "pinned"
			}
		}
	}
	if cpus == 0 {
		return Reading{Err: errors.New("jetson_clocks --show: no cpu lines")}
	}
	r := Reading{Value: fmt.Sprintf("%d/%d CPUs pinned at max", pinned, cpus)}
	if gpu != "" {
		r.Value += ", GPU " + gpu
	}
	if pinned == cpus && gpu != "not pinned" {
		r.Value = "active (" + r.Value + ")"
		return r
	}
	r.Value = "inactive (" + r.Value + ")"
	r.Advice = "clocks scale with load, so execution times vary with what else runs: sudo jetson_clocks pins them at the mode's maximum (sudo jetson_clocks --restore undoes it)"
	return r
}

func fieldsKV(l string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(l) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// pinnedFromSysfs answers the jetson_clocks question from cpufreq limits when the
// tool cannot run (it needs root).
func pinnedFromSysfs(root fs.FS, toolErr error) Reading {
	topo, err := cpu.ReadTopology(root)
	if err != nil || len(topo.CPUs) == 0 || topo.CPUs[0].MaxFreqKHz == 0 {
		return Reading{Err: fmt.Errorf("%w; no cpufreq limits in sysfs either", toolErr)}
	}
	for _, c := range topo.Clusters {
		if !c.Pinned {
			return Reading{
				Value:  "inactive (cpu" + cpu.FormatList(c.CPUs) + " scaling_min_freq below max; from sysfs, jetson_clocks --show needs root)",
				Advice: "clocks scale with load, so execution times vary with what else runs: sudo jetson_clocks pins them at the mode's maximum",
			}
		}
	}
	return Reading{Value: "active (all CPUs pinned at max, from sysfs; GPU not checked: jetson_clocks --show needs root)"}
}

// busyGPUPermille is the GPU load from which doctor warns that something else is
// using the accelerator vig governs.
const busyGPUPermille = 500

// GPULoadReading reads the GPU load from the first of GPULoadPaths that exists.
func GPULoadReading(root fs.FS) Reading {
	pm, p, err := gpuLoad(root)
	if err != nil {
		return Reading{Err: err}
	}
	r := Reading{Value: fmt.Sprintf("%.1f %% (%s)", float64(pm)/10, p)}
	if pm >= busyGPUPermille {
		r.Advice = "the GPU is already busy before vig starts: another process shares the accelerator, so execution times will exceed their priors (check tegrastats, GR3D_FREQ)"
	}
	return r
}

// gpuLoad returns the GPU load in per mille and the file it came from: the first
// of GPULoadPaths that exists.
func gpuLoad(root fs.FS) (int, string, error) {
	for _, p := range GPULoadPaths {
		b, err := fs.ReadFile(root, rel(p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, p, fmt.Errorf("%s: %w", p, err)
		}
		pm, err := ParseGPULoad(b)
		if err != nil {
			return 0, p, fmt.Errorf("%s: %w", p, err)
		}
		return pm, p, nil
	}
	return 0, "", fmt.Errorf("GPU load: %w (none of %s)", errors.ErrUnsupported, strings.Join(GPULoadPaths, ", "))
}

// ParseGPULoad parses a GPU load file: per mille, optionally followed by
// "@<freq>Hz" as some devfreq drivers print it.
func ParseGPULoad(b []byte) (int, error) {
	s := strings.TrimSpace(string(b))
	s, _, _ = strings.Cut(s, "@")
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > 1000 {
		return 0, fmt.Errorf("GPU load %q is not per mille", strings.TrimSpace(string(b)))
	}
	return v, nil
}
