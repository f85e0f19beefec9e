// Package android holds vig's Android device policy: whether it is running on
// Android at all (decided at run time, never by build tag: the shipped binary is a
// static GOOS=linux one), and whether Doze, wakefulness, thermal throttling and
// security.perf_harden let it keep its freshness contracts and profile itself.
//
// Facts come from the shell tools an adb shell user may run (dumpsys, getprop) and
// from sysfs; the parsers are pure functions tested on captured outputs.
package android

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/vig-edge/vig/platform/sysinfo"
	"github.com/vig-edge/vig/platform/toolexec"
)

// Locations and tools. Variables so that tests and unusual builds can change them.
var (
	ThermalZones = "/sys/class/thermal"
	Dumpsys      = "dumpsys"
	Getprop      = "getprop"
)

// Runner runs a command and returns its standard output.
type Runner = toolexec.Runner

// Exec runs a tool with a timeout; a tool that is not installed is an error that
// wraps errors.ErrUnsupported.
func Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return toolexec.Run(ctx, 5*time.Second, name, args...)
}

// Detect reports whether this is Android and what showed it. root is the machine's
// "/"; getenv is os.Getenv on the device. The detection itself is
// platform/sysinfo's, shared with everything else that asks.
func Detect(root fs.FS, getenv func(string) string) (bool, string) {
	return sysinfo.DetectAndroid(root, getenv)
}

// Reading is one fact about the device and what it means for vig.
type Reading struct {
	Value  string // what was read, e.g. "ACTIVE", "Awake", "0 (NONE)"
	Advice string // empty when the value is fine; otherwise what goes wrong and the fix
	Err    error  // the fact could not be read; wraps errors.ErrUnsupported when it cannot be here
}

// Status is the Android-specific state doctor reports.
type Status struct {
	Doze        Reading
	Wakefulness Reading
	Thermal     Reading
	PerfHarden  Reading
}

// Check reads the device's state through run (Exec on a device) and root.
func Check(ctx context.Context, root fs.FS, run Runner) Status {
	var s Status
	if out, err := run(ctx, Dumpsys, "deviceidle", "get", "deep"); err != nil {
		s.Doze.Err = err
	} else {
		s.Doze = DozeReading(out)
	}
	if out, err := run(ctx, Dumpsys, "power"); err != nil {
		s.Wakefulness.Err = err
	} else {
		s.Wakefulness = WakefulnessReading(out)
	}
	if out, err := run(ctx, Dumpsys, "thermalservice"); err == nil {
		s.Thermal = ThermalServiceReading(out)
	} else {
		// Without the thermal service (or permission for it) the kernel's zones
		// still say how hot the device runs.
		s.Thermal = ThermalZonesReading(root)
		if s.Thermal.Err != nil {
			s.Thermal.Err = fmt.Errorf("%w; thermal zones: %w", err, s.Thermal.Err)
		}
	}
	if out, err := run(ctx, Getprop, "security.perf_harden"); err != nil {
		s.PerfHarden.Err = err
	} else {
		s.PerfHarden = PerfHardenReading(out)
	}
	return s
}

// DozeReading interprets `dumpsys deviceidle get deep`: the deep-idle state machine's
// current state (ACTIVE, INACTIVE, IDLE_PENDING, SENSING, LOCATING, IDLE,
// IDLE_MAINTENANCE, QUICK_DOZE_DELAY).
func DozeReading(out []byte) Reading {
	state := strings.TrimSpace(string(out))
	switch {
	case state == "ACTIVE":
		return Reading{Value: state}
	case state == "IDLE" || state == "IDLE_MAINTENANCE":
		return Reading{Value: state, Advice: "the device is in Doze: timers and network are deferred and periods stretch; keep it awake while serving (adb shell svc power stayon usb) or dumpsys deviceidle disable"}
	case state == "" || strings.ContainsAny(state, " \n\t"):
		return Reading{Err: fmt.Errorf("dumpsys deviceidle get deep: unexpected output %q", firstLine(state))}
	}
	return Reading{Value: state, Advice: "the device is on its way into Doze (screen off, unplugged): keep it awake while serving (adb shell svc power stayon usb)"}
}

// WakefulnessReading finds mWakefulness in `dumpsys power` (Awake, Asleep, Dreaming,
// Dozing).
func WakefulnessReading(out []byte) Reading {
	v, ok := field(out, "mWakefulness=")
	if !ok || v == "" {
		return Reading{Err: errors.New("dumpsys power: no mWakefulness line")}
	}
	if v == "Awake" {
		return Reading{Value: v}
	}
	return Reading{Value: v, Advice: "the device is not awake: the CPU may be suspended between frames; turn the screen on or adb shell svc power stayon usb"}
}

// Thermal status levels of Android's PowerManager (THERMAL_STATUS_*).
var thermalNames = []string{"NONE", "LIGHT", "MODERATE", "SEVERE", "CRITICAL", "EMERGENCY", "SHUTDOWN"}

// ThermalServiceReading finds "Thermal Status: N" in `dumpsys thermalservice`.
func ThermalServiceReading(out []byte) Reading {
	v, ok := field(out, "Thermal Status:")
	if !ok {
		return Reading{Err: errors.New("dumpsys thermalservice: no Thermal Status line")}
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n >= len(thermalNames) {
		return Reading{Err: fmt.Errorf("dumpsys thermalservice: thermal status %q", v)}
	}
	r := Reading{Value: fmt.Sprintf("%d (%s)", n, thermalNames[n])}
	if n >= 2 {
		r.Advice = fmt.Sprintf("thermal status %s: the device throttles, execution times grow and contracts sized on a cool device may not hold; let it cool, remove the case, or lower the load", thermalNames[n])
	}
	return r
}

// hotZoneMilliC is the zone temperature from which doctor warns: phones start to
// throttle their big cores around here.
const hotZoneMilliC = 80000

// ThermalZonesReading reads /sys/class/thermal/thermal_zone*/{type,temp} in root and
// reports the hottest zone.
func ThermalZonesReading(root fs.FS) Reading {
	dir := strings.TrimPrefix(ThermalZones, "/")
	ents, err := fs.ReadDir(root, dir)
	if err != nil {
		return Reading{Err: fmt.Errorf("%s: %w", ThermalZones, err)}
	}
	best, bestType := -1<<31, ""
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "thermal_zone") {
			continue
		}
		b, err := fs.ReadFile(root, dir+"/"+e.Name()+"/temp")
		if err != nil {
			continue // some zones refuse reads (sensor off); the others still count
		}
		t, err := ParseZoneTemp(b)
		if err != nil {
			continue
		}
		if t > best {
			typ, _ := fs.ReadFile(root, dir+"/"+e.Name()+"/type")
			best, bestType = t, strings.TrimSpace(string(typ))
		}
	}
	if bestType == "" && best == -1<<31 {
		return Reading{Err: fmt.Errorf("%s: %w (no readable thermal zone)", ThermalZones, errors.ErrUnsupported)}
	}
	r := Reading{Value: fmt.Sprintf("hottest zone %s at %.1f °C", bestType, float64(best)/1000)}
	if best >= hotZoneMilliC {
		r.Advice = "the device runs hot enough to throttle: execution times grow; let it cool or lower the load"
	}
	return r
}

// ParseZoneTemp parses a thermal zone's temp file (millidegrees Celsius).
func ParseZoneTemp(b []byte) (int, error) {
	t, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("thermal zone temp %q: %w", firstLine(string(b)), err)
	}
	return t, nil
}

// PerfHardenReading interprets `getprop security.perf_harden`: 1 blocks
// perf_event_open for apps and the shell, which vig's profiling mode needs.
func PerfHardenReading(out []byte) Reading {
	switch v := strings.TrimSpace(string(out)); v {
	case "", "0":
		if v == "" {
			v = "unset"
		}
		return Reading{Value: v}
	case "1":
		return Reading{Value: v, Advice: "perf_event_open is blocked, so `vig profile` falls back to /proc counters; adb shell setprop security.perf_harden 0 lifts it until reboot"}
	default:
		return Reading{Err: fmt.Errorf("getprop security.perf_harden: unexpected %q", firstLine(v))}
	}
}

// field returns the trimmed text after the first occurrence of key at the start of
// a line (after indentation).
func field(out []byte, key string) (string, bool) {
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}
