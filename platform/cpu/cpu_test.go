package cpu

import (
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func TestFixtures(t *testing.T) {
	tests := []struct {
		machine  string
		clusters []string
		advice   []string // GovernorAdvice per cluster, "" = fine
		clock    string
		clockOK  bool
		offline  []int
	}{
		{
			// 4 cores with SMT under intel_pstate, whose "powersave" is its dynamic
			// HWP policy; cluster_id numbers L2 modules and must not split the cores.
			machine:  "laptop-x86",
			clusters: []string{"cpu0-7 (4.70 GHz, powersave)"},
			advice:   []string{""},
			clock:    "tsc", clockOK: true,
		},
		{
			// DynamIQ phone: one cluster_id for all, three core kinds by capacity;
			// cpu2 is offline (hotplugged out by the vendor power policy).
			machine: "phone-arm64",
			clusters: []string{
				"little cpu0-1,3 (capacity 261, 1.80 GHz, schedutil)",
				"mid cpu4-6 (capacity 871, 2.42 GHz, schedutil)",
				"big cpu7 (capacity 1024, 2.84 GHz, schedutil)",
			},
			advice: []string{"", "", ""},
			clock:  "arch_sys_counter", clockOK: true,
			offline: []int{2},
		},
		{
			// Orin NX: 8 alike A78AE cores in two clusters, jetson_clocks active.
			machine: "jetson-orin",
			clusters: []string{
				"cpu0-3 (capacity 1024, 1.98 GHz, schedutil, pinned at max)",
				"cpu4-7 (capacity 1024, 1.98 GHz, schedutil, pinned at max)",
			},
			advice: []string{"", ""},
			clock:  "arch_sys_counter", clockOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.machine, func(t *testing.T) {
			root := os.DirFS("testdata/" + tt.machine)
			topo, err := ReadTopology(root)
			if err != nil {
				t.Fatal(err)
			}
			var got, adv []string
			for _, c := range topo.Clusters {
				got = append(got, c.String())
				adv = append(adv, GovernorAdvice(c))
			}
			if !slices.Equal(got, tt.clusters) {
				t.Errorf("clusters:\n got %q\nwant %q", got, tt.clusters)
			}
			if !slices.Equal(topo.Offline, tt.offline) {
				t.Errorf("offline %v, want %v", topo.Offline, tt.offline)
			}
			if !slices.Equal(adv, tt.advice) {
				t.Errorf("advice %q, want %q", adv, tt.advice)
			}
			cs, err := ReadClocksource(root)
			if err != nil {
				t.Fatal(err)
			}
			if cs.Current != tt.clock || (cs.Advice() == "") != tt.clockOK {
				t.Errorf("clocksource %+v advice %q", cs, cs.Advice())
			}
		})
	}
}

// mapFS copies a fixture into memory so a test can change a file or two.
func mapFS(t *testing.T, dir string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	root := os.DirFS(dir)
	err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, p)
		m[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPowersaveWarns(t *testing.T) {
	m := mapFS(t, "testdata/phone-arm64")
	for _, cpu := range []string{"4", "5", "6"} {
		m["sys/devices/system/cpu/cpu"+cpu+"/cpufreq/scaling_governor"] = &fstest.MapFile{Data: []byte("powersave\n")}
	}
	topo, err := ReadTopology(m)
	if err != nil {
		t.Fatal(err)
	}
	mid := topo.Clusters[1]
	if a := GovernorAdvice(mid); !strings.Contains(a, "powersave pins cpu4-6") || !strings.Contains(a, "schedutil") {
		t.Errorf("mid cluster %v: advice %q", mid, a)
	}
	if a := GovernorAdvice(topo.Clusters[0]); a != "" {
		t.Errorf("little cluster: %q", a)
	}
}

func TestDegenerateSysfs(t *testing.T) {
	t.Run("vm without cpufreq", func(t *testing.T) {
		m := fstest.MapFS{
			"sys/devices/system/cpu/online":                         {Data: []byte("0-1\n")},
			"sys/devices/system/cpu/cpu0/cpu_capacity":              {Data: []byte("1024\n")},
			"sys/devices/system/cpu/cpu0/topology/cluster_id":       {Data: []byte("65535\n")},
			"sys/devices/system/cpu/cpu1/topology/cluster_id":       {Data: []byte("65535\n")},
			"sys/devices/system/cpu/cpu1/cpu_capacity":              {Data: []byte("garbage\n")},
			"sys/devices/system/clocksource/clocksource0/available": {Data: []byte("x")},
		}
		topo, err := ReadTopology(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(topo.CPUs) != 2 || topo.CPUs[0].ClusterID != -1 || topo.CPUs[1].Capacity != 0 {
			t.Errorf("%+v", topo.CPUs)
		}
		if len(topo.Clusters) != 2 || topo.Clusters[0].Kind != "little" || topo.Clusters[1].Kind != "big" {
			t.Errorf("%+v", topo.Clusters)
		}
		if _, err := ReadClocksource(m); err == nil {
			t.Error("missing current_clocksource: want an error")
		}
	})
	t.Run("no online file", func(t *testing.T) {
		m := fstest.MapFS{"sys/devices/system/cpu/cpu3/cpu_capacity": {Data: []byte("512")}, "sys/devices/system/cpu/cpufreq/x": {}}
		topo, err := ReadTopology(m)
		if err != nil || len(topo.CPUs) != 1 || topo.CPUs[0].ID != 3 {
			t.Errorf("%+v %v", topo, err)
		}
	})
	t.Run("no sysfs", func(t *testing.T) {
		if _, err := ReadTopology(fstest.MapFS{}); err == nil {
			t.Error("want an error")
		}
	})
	t.Run("slow clock", func(t *testing.T) {
		cs := Clocksource{Current: "hpet", Available: []string{"hpet", "tsc"}}
		if a := cs.Advice(); !strings.Contains(a, "tsc is available") {
			t.Errorf("%q", a)
		}
		if _, err := ParseClocksource([]byte("\n")); err == nil {
			t.Error("empty: want an error")
		}
	})
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"0-3,5,7-8\n", []int{0, 1, 2, 3, 5, 7, 8}, true},
		{"0", []int{0}, true},
		{"", nil, false},
		{"3-1", nil, false},
		{"a", nil, false},
		{"-1", nil, false},
		{"0-99999999", nil, false},
	}
	for _, tt := range tests {
		got, err := ParseList([]byte(tt.in))
		if (err == nil) != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("ParseList(%q) = %v, %v", tt.in, got, err)
		}
		if tt.ok && FormatList(got) != strings.TrimSpace(tt.in) {
			t.Errorf("FormatList(%v) = %q", got, FormatList(got))
		}
	}
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{"0-3,5", "0", "1-1,2-4", ",", "9-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		defer fuzztest.Bound(t)()
		ids, err := ParseList([]byte(s))
		if err != nil {
			return
		}
		if len(ids) == 0 {
			t.Fatal("no error and no cpus")
		}
		sorted := slices.IsSorted(ids) && len(slices.Compact(slices.Clone(ids))) == len(ids)
		if back, err := ParseList([]byte(FormatList(ids))); sorted && (err != nil || !slices.Equal(back, ids)) {
			t.Fatalf("round trip %v -> %q -> %v %v", ids, FormatList(ids), back, err)
		}
	})
}

// TestThisMachine reads the real sysfs. It must work wherever Linux exposes
// /sys/devices/system/cpu, including under qemu-user (which shows the host's).
func TestThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sysfs: not Linux")
	}
	topo, err := ReadTopology(Root())
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.CPUs) == 0 || len(topo.Clusters) == 0 {
		t.Fatalf("%+v", topo)
	}
	for _, c := range topo.Clusters {
		t.Logf("%v", c)
	}
	cs, err := ReadClocksource(Root())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clocksource %+v %q", cs, cs.Advice())
}
