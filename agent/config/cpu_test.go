package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCPUSection(t *testing.T) {
	c, err := Parse("cpu.yaml", []byte(`
cpu:
  hot_path: dedicated
  pin: "4-6"
  process_cpus: 0-7
  uclamp_min: 512
  gc: {memory_limit_mib: 256, gogc: 50}
`))
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CPU
	if cc.HotPath != HotPathDedicated || !slices.Equal(cc.PinCPUs(), []int{4, 5, 6}) || len(cc.ProcessCPUList()) != 8 ||
		*cc.UclampMin != 512 || *cc.GC.MemoryLimitMiB != 256 || *cc.GC.GOGC != 50 {
		t.Errorf("%+v", cc)
	}
	if cc.Line("pin") != 4 || cc.Line("gc.gogc") != 7 {
		t.Errorf("lines: pin %d gc.gogc %d", cc.Line("pin"), cc.Line("gc.gogc"))
	}
	if s := cc.String(); s != "hot_path dedicated, pin 4-6, process_cpus 0-7, uclamp_min 512" {
		t.Errorf("String %q", s)
	}

	c, err = Parse("none.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.CPU.HotPath != HotPathShared || c.CPU.Pin != PinNone || c.CPU.PinCPUs() != nil || c.CPU.ProcessCPUList() != nil ||
		c.CPU.UclampMin != nil || c.CPU.GC.MemoryLimitMiB != nil || c.CPU.GC.GOGC != nil {
		t.Errorf("defaults %+v", c.CPU)
	}
	c, err = Parse("big.yaml", []byte("cpu: {hot_path: dedicated, pin: big, uclamp_min: 0}\n"))
	if err != nil || c.CPU.PinCPUs() != nil || *c.CPU.UclampMin != 0 {
		t.Errorf("pin big: %+v %v", c.CPU, err)
	}
}

func TestCPUErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       []string
	}{
		{"unknown key", "cpu:\n  hot_path: dedicated\n  pinned: big\n", 3, []string{"cpu.pinned", "known keys here: gc, hot_path, pin, process_cpus, uclamp_min"}},
		{"unknown gc key", "cpu:\n  gc:\n    limit: 3\n", 3, []string{"cpu.gc.limit", "gogc, memory_limit_mib"}},
		{"bad hot path", "cpu:\n  hot_path: pinned\n", 2, []string{"cpu.hot_path", "dedicated", "shared"}},
		{"bad pin", "cpu:\n  hot_path: dedicated\n  pin: huge\n", 3, []string{"cpu.pin", "none, big, mid, little", "4-7"}},
		{"pin without dedicated", "cpu:\n  hot_path: shared\n  pin: big\n", 3, []string{"cpu.pin", "set hot_path: dedicated", "process_cpus"}},
		{"bad process cpus", "cpu:\n  process_cpus: 3-1\n", 2, []string{"cpu.process_cpus", "bad range"}},
		{"pin outside process", "cpu:\n  hot_path: dedicated\n  pin: 2-3\n  process_cpus: 0-2\n", 3, []string{"cpu3 is outside process_cpus 0-2"}},
		{"uclamp range", "cpu:\n  hot_path: dedicated\n  uclamp_min: 2048\n", 3, []string{"outside 0–1024"}},
		{"uclamp without dedicated", "cpu:\n  hot_path: shared\n  uclamp_min: 100\n", 3, []string{"set hot_path: dedicated"}},
		{"uclamp wrong type", "cpu:\n  uclamp_min: high\n", 2, []string{"wrong type"}},
		{"tiny memory limit", "cpu:\n  gc:\n    memory_limit_mib: 4\n", 3, []string{"at least 16 MiB", "-1 for none"}},
		{"gogc zero", "cpu:\n  gc: {gogc: 0}\n", 2, []string{"almost constantly"}},
		{"gc never", "cpu:\n  gc:\n    memory_limit_mib: -1\n    gogc: -1\n", 4, []string{"nothing would ever trigger"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.name, []byte(tc.yaml))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *config.Error", err)
			}
			if e.Line != tc.line {
				t.Errorf("line = %d, want %d (%v)", e.Line, tc.line, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
