package android

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vig-edge/vig/internal/fuzztest"
	"github.com/vig-edge/vig/platform/toolexec/toolexectest"
)

var fixtureRunner = toolexectest.FixtureRunner

func TestCheckFixtures(t *testing.T) {
	tests := []struct {
		dir                                 string
		doze, wake, thermal, harden         string
		dozeAdv, wakeAdv, thermAdv, hardAdv bool
	}{
		{"testdata/phone-awake", "ACTIVE", "Awake", "0 (NONE)", "1", false, false, false, true},
		{"testdata/phone-doze", "IDLE", "Asleep", "3 (SEVERE)", "0", true, true, true, false},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.dir), func(t *testing.T) {
			s := Check(context.Background(), os.DirFS(tt.dir), fixtureRunner(tt.dir))
			for _, c := range []struct {
				name  string
				r     Reading
				value string
				adv   bool
			}{
				{"doze", s.Doze, tt.doze, tt.dozeAdv},
				{"wakefulness", s.Wakefulness, tt.wake, tt.wakeAdv},
				{"thermal", s.Thermal, tt.thermal, tt.thermAdv},
				{"perf_harden", s.PerfHarden, tt.harden, tt.hardAdv},
			} {
				if c.r.Err != nil || c.r.Value != c.value || (c.r.Advice != "") != c.adv {
					t.Errorf("%s: %+v, want value %q advice %v", c.name, c.r, c.value, c.adv)
				}
			}
		})
	}
}

func TestDetect(t *testing.T) {
	none := func(string) string { return "" }
	if ok, why := Detect(os.DirFS("testdata/phone-awake"), none); !ok || !strings.Contains(why, "linker64") {
		t.Errorf("phone: %v %q", ok, why)
	}
	if ok, why := Detect(fstest.MapFS{}, func(k string) string {
		if k == "ANDROID_ROOT" {
			return "/system"
		}
		return ""
	}); !ok || why != "ANDROID_ROOT=/system" {
		t.Errorf("env: %v %q", ok, why)
	}
	if ok, _ := Detect(os.DirFS("testdata/phone-doze"), none); ok {
		t.Error("no linker, no env: not Android")
	}
}

func TestThermalFallback(t *testing.T) {
	// No dumpsys thermalservice: the zones give the hottest sensor.
	dir := "testdata/phone-awake"
	run := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if len(args) > 0 && args[0] == "thermalservice" {
			return nil, errors.New("dumpsys thermalservice: Permission Denial")
		}
		return fixtureRunner(dir)(ctx, name, args...)
	}
	s := Check(context.Background(), os.DirFS(dir), run)
	if s.Thermal.Err != nil || s.Thermal.Value != "hottest zone cpu-1-0-usr at 44.8 °C" || s.Thermal.Advice != "" {
		t.Errorf("%+v", s.Thermal)
	}
	hot := fstest.MapFS{
		"sys/class/thermal/thermal_zone0/temp": {Data: []byte("86500\n")},
		"sys/class/thermal/thermal_zone0/type": {Data: []byte("cpu\n")},
		"sys/class/thermal/thermal_zone1/temp": {Data: []byte("EIO\n")},
	}
	if r := ThermalZonesReading(hot); r.Advice == "" || !strings.Contains(r.Value, "86.5") {
		t.Errorf("hot: %+v", r)
	}
	if r := ThermalZonesReading(fstest.MapFS{"sys/class/thermal/cooling_device0/type": {}}); !errors.Is(r.Err, errors.ErrUnsupported) {
		t.Errorf("no zones: %+v", r)
	}
	s = Check(context.Background(), fstest.MapFS{}, run)
	if s.Thermal.Err == nil || !strings.Contains(s.Thermal.Err.Error(), "Permission Denial") {
		t.Errorf("both sources failing must say why: %v", s.Thermal.Err)
	}
}

func TestMalformed(t *testing.T) {
	tests := []struct {
		name string
		r    Reading
	}{
		{"doze empty", DozeReading(nil)},
		{"doze chatter", DozeReading([]byte("Unknown command: get deep\nusage"))},
		{"power without field", WakefulnessReading([]byte("POWER MANAGER\n"))},
		{"thermal garbage", ThermalServiceReading([]byte("Thermal Status: hot\n"))},
		{"thermal out of range", ThermalServiceReading([]byte("Thermal Status: 9\n"))},
		{"thermal missing", ThermalServiceReading([]byte("HAL Ready: true\n"))},
		{"perf_harden garbage", PerfHardenReading([]byte("maybe\n"))},
	}
	for _, tt := range tests {
		if tt.r.Err == nil {
			t.Errorf("%s: no error: %+v", tt.name, tt.r)
		}
	}
	if r := DozeReading([]byte("INACTIVE\n")); r.Advice == "" || r.Err != nil {
		t.Errorf("INACTIVE: %+v", r)
	}
	if r := PerfHardenReading([]byte("\n")); r.Value != "unset" || r.Advice != "" {
		t.Errorf("unset: %+v", r)
	}
}

func FuzzReadings(f *testing.F) {
	for _, p := range []string{"phone-awake/cmd/dumpsys_power", "phone-awake/cmd/dumpsys_thermalservice", "phone-doze/cmd/dumpsys_deviceidle_get_deep"} {
		b, err := os.ReadFile("testdata/" + p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		for _, r := range []Reading{DozeReading(b), WakefulnessReading(b), ThermalServiceReading(b), PerfHardenReading(b)} {
			if r.Err == nil && r.Value == "" {
				t.Fatalf("no error and no value: %+v", r)
			}
			if r.Err != nil && (r.Value != "" || r.Advice != "") {
				t.Fatalf("error with a value: %+v", r)
			}
		}
	})
}

func TestExecMissingTool(t *testing.T) {
	_, err := Exec(context.Background(), "vig-no-such-tool-here")
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("missing tool: %v, want ErrUnsupported", err)
	}
}
