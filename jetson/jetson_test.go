package jetson

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

func TestFixtures(t *testing.T) {
	tests := []struct {
		dir, detect, mode, clocks, gpu string
		clocksAdv, gpuAdv              bool
	}{
		{
			dir: "testdata/orin-nx", detect: "L4T R36.3.0 (/etc/nv_tegra_release)", mode: "MAXN (mode 0)",
			clocks: "active (8/8 CPUs pinned at max, GPU pinned)",
			gpu:    "12.3 % (/sys/devices/platform/bus@0/17000000.gpu/load)",
		},
		{
			dir: "testdata/orin-nano", detect: "device tree: nvidia,tegra234", mode: "15W (mode 0)",
			clocks: "inactive (0/6 CPUs pinned at max, GPU not pinned)", clocksAdv: true,
			gpu: "68.7 % (/sys/class/devfreq/17000000.gpu/load)", gpuAdv: true,
		},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.dir), func(t *testing.T) {
			root := os.DirFS(tt.dir)
			ok, why := Detect(root)
			if !ok || why != tt.detect {
				t.Errorf("Detect = %v %q, want %q", ok, why, tt.detect)
			}
			s := Check(context.Background(), root, fixtureRunner(tt.dir))
			if s.PowerMode.Err != nil || s.PowerMode.Value != tt.mode {
				t.Errorf("power mode %+v, want %q", s.PowerMode, tt.mode)
			}
			if s.Clocks.Err != nil || s.Clocks.Value != tt.clocks || (s.Clocks.Advice != "") != tt.clocksAdv {
				t.Errorf("clocks %+v, want %q", s.Clocks, tt.clocks)
			}
			if s.GPULoad.Err != nil || s.GPULoad.Value != tt.gpu || (s.GPULoad.Advice != "") != tt.gpuAdv {
				t.Errorf("gpu %+v, want %q", s.GPULoad, tt.gpu)
			}
		})
	}
}

// Without root, jetson_clocks --show fails and the cpufreq limits answer.
func TestClocksWithoutRoot(t *testing.T) {
	noRoot := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == JetsonClocks {
			return nil, errors.New("jetson_clocks --show: exit status 1: Error: Run this script(/usr/bin/jetson_clocks) as a root user")
		}
		return nil, errors.ErrUnsupported
	}
	for dir, want := range map[string]string{"testdata/orin-nx": "active", "testdata/orin-nano": "inactive"} {
		s := Check(context.Background(), os.DirFS(dir), noRoot)
		if s.Clocks.Err != nil || !strings.HasPrefix(s.Clocks.Value, want+" ") || !strings.Contains(s.Clocks.Value, "sysfs") {
			t.Errorf("%s: %+v, want %s", dir, s.Clocks, want)
		}
	}
	s := Check(context.Background(), fstest.MapFS{}, noRoot)
	if s.Clocks.Err == nil || !strings.Contains(s.Clocks.Err.Error(), "root user") {
		t.Errorf("no sysfs: %+v", s.Clocks)
	}
	if !errors.Is(s.GPULoad.Err, errors.ErrUnsupported) || !errors.Is(s.PowerMode.Err, errors.ErrUnsupported) {
		t.Errorf("not a Jetson: %+v %+v", s.GPULoad, s.PowerMode)
	}
}

func TestNotJetson(t *testing.T) {
	if ok, _ := Detect(fstest.MapFS{"proc/device-tree/compatible": {Data: []byte("qcom,sm8150\x00qcom,msmnile\x00")}}); ok {
		t.Error("a Qualcomm phone is not a Jetson")
	}
	if ok, _ := Detect(fstest.MapFS{}); ok {
		t.Error("empty root is not a Jetson")
	}
}

func TestParsers(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{{"123\n", 123, true}, {"0", 0, true}, {"1000", 1000, true}, {"87@306000000Hz", 87, true}, {"1001", 0, false}, {"-1", 0, false}, {"", 0, false}} {
		got, err := ParseGPULoad([]byte(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseGPULoad(%q) = %d, %v", tt.in, got, err)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref", "R35.4.1"},
		{"# R32 (release)", "R32"},
		{"garbage", ""},
	} {
		if got := ParseRelease([]byte(tt.in)); got != tt.want {
			t.Errorf("ParseRelease(%q) = %q", tt.in, got)
		}
	}
	if _, err := ParseNvpmodel([]byte("NV Power Mode:\n")); err == nil {
		t.Error("empty mode name: want an error")
	}
	if m, err := ParseNvpmodel([]byte("NV Power Mode: 30W_ALL\n")); err != nil || m.String() != "30W_ALL" {
		t.Errorf("no id: %v %v", m, err)
	}
	if r := ClocksReading([]byte("SOC family:tegra234\n")); r.Err == nil {
		t.Error("no cpu lines: want an error")
	}
}

func FuzzParsers(f *testing.F) {
	for _, p := range []string{"orin-nx/cmd/jetson_clocks_--show", "orin-nano/cmd/nvpmodel_-q", "orin-nx/etc/nv_tegra_release"} {
		b, err := os.ReadFile("testdata/" + p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		r := ClocksReading(b)
		if (r.Err == nil) == (r.Value == "") {
			t.Fatalf("clocks: %+v", r)
		}
		if m, err := ParseNvpmodel(b); err == nil && m.Name == "" {
			t.Fatal("mode without a name")
		}
		if pm, err := ParseGPULoad(b); err == nil && (pm < 0 || pm > 1000) {
			t.Fatalf("load %d", pm)
		}
		_ = ParseRelease(b)
	})
}
