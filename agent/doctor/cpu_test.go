package doctor

import (
	"errors"
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
	tests := []struct {
		name  string
		cfg   string
		trial CPUTrial
		want  map[string]Status
		any   map[string]string
	}{
		{"shared default", "cpu: {}", CPUTrial{Allowed: []int{0, 1}, GOMAXPROCS: 2},
			map[string]Status{"cpu placement": OK}, map[string]string{"cpu placement": "hot_path shared: the Go scheduler places vig's work; process on cpu0-1 (inherited); GOMAXPROCS 2"}},
		{"process placed", "cpu: {process_cpus: 4-7}",
			CPUTrial{Allowed: []int{0, 1, 2, 3, 4, 5, 6, 7}, GOMAXPROCS: 4, Process: []int{4, 5, 6, 7}},
			map[string]Status{"cpu placement": OK}, map[string]string{"cpu placement": "process on cpu4-7; GOMAXPROCS 4"}},
		{"offline dropped", "cpu: {process_cpus: 2-3}",
			CPUTrial{Allowed: []int{0, 1, 3}, GOMAXPROCS: 1, Process: []int{3}, Notes: []string{"cpu2 offline or absent; using cpu3"}},
			map[string]Status{"cpu placement": Warn}, map[string]string{"cpu placement": "cpu2 offline"}},
		{"impossible", "cpu: {process_cpus: 8-9}",
			CPUTrial{Err: errors.New("process_cpus 8-9: none of cpu8-9 may be used by vig, whose mask is cpu0-1")},
			map[string]Status{"cpu placement": Fail}, map[string]string{"cpu placement": "none of cpu8-9"}},
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
			if asked.HotPath != cfg.CPU.HotPath || asked.ProcessCPUs != cfg.CPU.ProcessCPUs {
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
			if len(got) != 1 {
				t.Errorf("checks %v, want cpu placement alone", got)
			}
		})
	}
	if cs := cpuPlacementChecks(parse("cpu: {}"), &Host{}); len(cs) != 1 || cs[0].Status != Skipped {
		t.Errorf("no probe: %+v", cs)
	}
}
