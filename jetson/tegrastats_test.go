package jetson

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func TestParseTegrastats(t *testing.T) {
	read := func(p string) []byte {
		b, err := os.ReadFile("testdata/" + p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	on := func(p, mhz int) CPULoad { return CPULoad{Online: true, Percent: p, MHz: mhz} }
	tests := []struct {
		name string
		in   []byte
		want Tegrastats
		load string
		adv  bool
	}{
		{"orin-nx", read("orin-nx/cmd/tegrastats"), Tegrastats{RAMUsedMB: 2448, RAMTotalMB: 15656,
			CPUs:       []CPULoad{on(12, 1984), on(8, 1984), on(5, 1984), on(3, 1984), on(9, 1984), on(2, 1984), on(0, 1984), on(1, 1984)},
			EMCPercent: 3, EMCMHz: 3199, GR3DPercent: 14, GR3DMHz: []int{918, 918}},
			"CPU 5 % avg over 8/8 online cores, EMC 3 %@3199 MHz, GR3D 14 %, RAM 2448/15656 MB", false},
		{"orin-nano busy", read("orin-nano/cmd/tegrastats"), Tegrastats{RAMUsedMB: 6120, RAMTotalMB: 7620,
			CPUs:       []CPULoad{on(91, 1510), on(88, 1510), on(93, 1510), on(90, 1510), {}, {}},
			EMCPercent: 86, EMCMHz: 2133, GR3DPercent: 70, GR3DMHz: []int{624}},
			"CPU 90 % avg over 4/6 online cores, EMC 86 %@2133 MHz, GR3D 70 %, RAM 6120/7620 MB", true},
		{"nano jetpack 4", read("tegrastats/nano-jp4"), Tegrastats{RAMUsedMB: 1530, RAMTotalMB: 3964,
			CPUs:       []CPULoad{on(11, 1479), on(4, 1479), on(7, 1479), on(4, 1479)},
			EMCPercent: 3, EMCMHz: 1600, GR3DPercent: 0, GR3DMHz: []int{921}},
			"CPU 6 % avg over 4/4 online cores, EMC 3 %@1600 MHz, GR3D 0 %, RAM 1530/3964 MB", false},
		{"jetpack 6 without EMC", read("tegrastats/orin-nano-jp6-no-emc"), Tegrastats{RAMUsedMB: 3011, RAMTotalMB: 7620,
			CPUs:       []CPULoad{on(2, 729), on(1, 729), on(0, 729), on(3, 729), on(1, 729), on(0, 729)},
			EMCPercent: -1, EMCMHz: -1, GR3DPercent: 0},
			"CPU 1 % avg over 6/6 online cores, GR3D 0 %, RAM 3011/7620 MB", false},
	}
	for _, tt := range tests {
		got, err := ParseTegrastats(tt.in)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
		r := LoadReading(got)
		if r.Value != tt.load || (r.Advice != "") != tt.adv {
			t.Errorf("%s: reading %+v, want %q (advice %v)", tt.name, r, tt.load, tt.adv)
		}
	}
	for _, bad := range []string{
		"", "RAM 1/2MB", "CPU [", "CPU [12%@1510,abc]", "CPU [101%@1510]", "CPU [12@1510]",
		"CPU [12%@x]", "CPU [] ", "CPU [1%@1] EMC_FREQ 3%@fast", "CPU [1%@1] GR3D_FREQ 0%@[305,x]",
		"RAM 9/2MB CPU [1%@1]", "CPU@45C GPU@40C",
	} {
		if got, err := ParseTegrastats([]byte(bad)); err == nil {
			t.Errorf("ParseTegrastats(%q) = %+v, want an error", bad, got)
		}
	}
}

// withTegrastats answers TegrastatsScript with the fixture dir/cmd/tegrastats.
func withTegrastats(dir string) Runner {
	run := fixtureRunner(dir)
	return func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == "sh" && len(args) == 2 && args[1] == TegrastatsScript {
			return run(ctx, "tegrastats")
		}
		return run(ctx, name, args...)
	}
}

func TestCheckLoad(t *testing.T) {
	s := Check(context.Background(), os.DirFS("testdata/orin-nano"), withTegrastats("testdata/orin-nano"))
	if s.Load.Err != nil || !strings.HasPrefix(s.Load.Value, "CPU 90 %") || !strings.Contains(s.Load.Advice, "memory bus") {
		t.Errorf("orin-nano load: %+v", s.Load)
	}
	// No tegrastats: not supported here, so doctor skips the check with the reason.
	s = Check(context.Background(), os.DirFS("testdata/orin-nano"), fixtureRunner("testdata/orin-nano"))
	if !errors.Is(s.Load.Err, errors.ErrUnsupported) {
		t.Errorf("without tegrastats: %+v", s.Load)
	}
}

// The script really prints one line of a tool that never exits, and reports a
// missing tool as unsupported.
func TestTegrastatsScript(t *testing.T) {
	dir := t.TempDir()
	fake := "#!/bin/sh\nwhile :; do echo 'RAM 1/2MB CPU [5%@729,off] EMC_FREQ 1%@204 GR3D_FREQ 0%@[0]'; sleep 0.01; done\n"
	if err := os.WriteFile(dir+"/tegrastats", []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	r := tegrastatsReading(context.Background(), Exec)
	if r.Err != nil || r.Value != "CPU 5 % avg over 1/2 online cores, EMC 1 %@204 MHz, GR3D 0 %, RAM 1/2 MB" {
		t.Errorf("fake tegrastats: %+v", r)
	}
	t.Setenv("PATH", t.TempDir()+":/usr/bin:/bin")
	if r := tegrastatsReading(context.Background(), Exec); !errors.Is(r.Err, errors.ErrUnsupported) {
		t.Errorf("no tegrastats: %+v", r)
	}
}

func FuzzParseTegrastats(f *testing.F) {
	for _, p := range []string{"orin-nx/cmd/tegrastats", "orin-nano/cmd/tegrastats", "tegrastats/nano-jp4", "tegrastats/orin-nano-jp6-no-emc"} {
		b, err := os.ReadFile("testdata/" + p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		ts, err := ParseTegrastats(b)
		if err != nil {
			return
		}
		for _, c := range ts.CPUs {
			if c.Percent < 0 || c.Percent > 100 || (!c.Online && c.Percent != 0) {
				t.Fatalf("cpu %+v", c)
			}
		}
		if ts.EMCPercent > 100 || ts.GR3DPercent > 100 || ts.RAMUsedMB > ts.RAMTotalMB {
			t.Fatalf("%+v", ts)
		}
		if r := LoadReading(ts); r.Value == "" || r.Err != nil {
			t.Fatalf("reading %+v", r)
		}
	})
}
