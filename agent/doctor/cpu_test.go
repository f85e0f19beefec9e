package doctor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/config"
)

func TestCPUPlacementChecks(t *testing.T) {
	parse := func(y string) *config.Config {
		t.Helper()
		c, err := config.Parse("cpu.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	unsupported := fmt.Errorf("uclamp_min via sched_setattr: %w (kernel 6.1: built without CONFIG_UCLAMP_TASK)", errors.ErrUnsupported)
	tests := []struct {
		name  string
		cfg   string
		trial CPUTrial
		want  map[string]Status
		any   map[string]string
	}{
		{"shared default", "", CPUTrial{Allowed: []int{0, 1}, GOMAXPROCS: 2, UclampMin: -1},
			map[string]Status{"cpu placement": OK}, map[string]string{"cpu placement": "hot_path shared: the Go scheduler places vig's work; process on cpu0-1 (inherited); GOMAXPROCS 2"}},
		{"dedicated pinned", "cpu: {hot_path: dedicated, pin: big, process_cpus: 4-7}",
			CPUTrial{Allowed: []int{0, 1, 2, 3, 4, 5, 6, 7}, GOMAXPROCS: 4, Process: []int{4, 5, 6, 7}, HotTID: 99, Hot: []int{7}, UclampMin: -1},
			map[string]Status{"cpu placement": OK}, map[string]string{"cpu placement": "hot thread on cpu7 (read back on trial thread 99"}},
		{"uclamp unsupported", "cpu: {hot_path: dedicated, uclamp_min: 512}",
			CPUTrial{Allowed: []int{0, 1}, GOMAXPROCS: 2, HotTID: 5, Hot: []int{0, 1}, UclampMin: -1, UclampErr: unsupported},
			map[string]Status{"cpu placement": OK, "cpu uclamp_min": Warn}, map[string]string{"cpu uclamp_min": "uclamp_min 512 configured but not in effect: uclamp_min via sched_setattr: unsupported operation"}},
		{"uclamp read back", "cpu: {hot_path: dedicated, uclamp_min: 512}",
			CPUTrial{Allowed: []int{0, 1}, GOMAXPROCS: 2, HotTID: 5, Hot: []int{0, 1}, UclampMin: 512},
			map[string]Status{"cpu uclamp_min": OK}, map[string]string{"cpu uclamp_min": "512 read back"}},
		{"offline dropped", "cpu: {hot_path: dedicated, pin: 2-3}",
			CPUTrial{Allowed: []int{0, 1, 3}, GOMAXPROCS: 3, HotTID: 5, Hot: []int{3}, UclampMin: -1, Notes: []string{"cpu2 offline or absent; using cpu3"}},
			map[string]Status{"cpu placement": Warn}, map[string]string{"cpu placement": "cpu2 offline"}},
		{"impossible", "cpu: {hot_path: dedicated, pin: mid}",
			CPUTrial{Err: errors.New("pin mid: no mid cluster on this device (it has [little big])")},
			map[string]Status{"cpu placement": Fail}, map[string]string{"cpu placement": "no mid cluster"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked config.CPU
			h := &Host{CPUPlacement: func(c config.CPU) CPUTrial { asked = c; return tt.trial }}
			cfg := parse(tt.cfg)
			got := map[string]Check{}
			for _, c := range cpuPlacementChecks(cfg, h) {
				got[c.Name] = c
			}
			if asked.HotPath != cfg.CPU.HotPath || asked.Pin != cfg.CPU.Pin {
				t.Errorf("probe got %+v, config says %+v", asked, cfg.CPU)
			}
			for name, st := range tt.want {
				if got[name].Status != st {
					t.Errorf("%s: %v (%s), want %v", name, got[name].Status, got[name].Detail, st)
				}
			}
			for name, sub := range tt.any {
				if !strings.Contains(got[name].Detail, sub) {
					t.Errorf("%s: %q lacks %q", name, got[name].Detail, sub)
				}
			}
			if _, ok := got["cpu uclamp_min"]; ok != (cfg.CPU.UclampMin != nil) {
				t.Errorf("uclamp check present %v, configured %v", ok, cfg.CPU.UclampMin != nil)
			}
		})
	}
	if cs := cpuPlacementChecks(parse(""), &Host{}); len(cs) != 1 || cs[0].Status != Skipped {
		t.Errorf("no probe: %+v", cs)
	}
}
