package config

import (
	"errors"
	"strings"
	"testing"
)

func TestCPUSection(t *testing.T) {
	c, err := Parse("cpu.yaml", []byte(`
cpu:
  hot_path: shared
  process_cpus: 0-7
  gc: {memory_limit_mib: 256, gogc: 50}
`))
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CPU
	if cc.HotPath != HotPathShared || len(cc.ProcessCPUList()) != 8 || *cc.GC.MemoryLimitMiB != 256 || *cc.GC.GOGC != 50 {
		t.Errorf("%+v", cc)
	}
	if cc.Line("process_cpus") != 4 || cc.Line("gc.gogc") != 5 {
		t.Errorf("lines: process_cpus %d gc.gogc %d", cc.Line("process_cpus"), cc.Line("gc.gogc"))
	}
	if s := cc.String(); s != "hot_path shared, process_cpus 0-7" {
		t.Errorf("String %q", s)
	}

	c, err = Parse("none.yaml", []byte("log: {level: info}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.CPU.HotPath != HotPathShared || c.CPU.Pin != PinNone || c.CPU.ProcessCPUList() != nil ||
		c.CPU.UclampMin != nil || c.CPU.GC.MemoryLimitMiB != nil || c.CPU.GC.GOGC != nil {
		t.Errorf("defaults %+v", c.CPU)
	}
}

func TestCPUErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       []string
	}{
		{"unknown key", "cpu:\n  hot_path: shared\n  pinned: big\n", 3, []string{"cpu.pinned", "known keys here: gc, hot_path, pin, process_cpus, uclamp_min"}},
		{"unknown gc key", "cpu:\n  gc:\n    limit: 3\n", 3, []string{"cpu.gc.limit", "gogc, memory_limit_mib"}},
		{"bad hot path", "cpu:\n  hot_path: pinned\n", 2, []string{"cpu.hot_path", "only hot path is shared", "remove the key"}},
		// The dedicated hot path was removed: the error says what it cost and the fix.
		{"dedicated removed", "cpu:\n  process_cpus: 0-1\n  hot_path: dedicated\n", 3, []string{"cpu.hot_path", "dedicated was removed", "× the CPU", "remove the key"}},
		{"pin removed", "cpu:\n  pin: big\n", 2, []string{"cpu.pin", "removed with hot_path: dedicated", "remove the key", "process_cpus"}},
		{"uclamp removed", "cpu:\n  uclamp_min: 100\n", 2, []string{"cpu.uclamp_min", "removed with hot_path: dedicated", "remove the key"}},
		{"bad process cpus", "cpu:\n  process_cpus: 3-1\n", 2, []string{"cpu.process_cpus", "bad range"}},
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
