package cpu

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestUclampByVersion(t *testing.T) {
	for rel, ok := range map[string]bool{"4.19.157-perf": false, "5.2.21": false, "5.3.0": true, "5.10.43+": true, "6.1.0-18-arm64": true, "vendor-weird": true} {
		err := uclampByVersion(rel)
		if (err == nil) != ok {
			t.Errorf("%s: %v", rel, err)
		}
		if err != nil && (!errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "kernel "+rel+": too old") || !strings.Contains(err.Error(), "needs 5.3")) {
			t.Errorf("%s: error %q lacks the kernel, the reason or the minimum", rel, err)
		}
	}
}

func TestResolvePin(t *testing.T) {
	read := func(machine string) Topology {
		t.Helper()
		topo, err := ReadTopology(os.DirFS("testdata/" + machine))
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}
	phone, laptop, orin := read("phone-arm64"), read("laptop-x86"), read("jetson-orin")
	tests := []struct {
		name string
		topo Topology
		pin  string
		want []int
		note string // substring; "" = no note
		err  string // substring; "" = no error
	}{
		{"phone big", phone, "big", []int{7}, "", ""},
		{"phone mid", phone, "mid", []int{4, 5, 6}, "", ""},
		{"phone little skips offline cpu2", phone, "little", []int{0, 1, 3}, "", ""},
		{"phone list with offline cpu", phone, "2-4", []int{3, 4}, "cpu2 offline", ""},
		{"phone list unsorted with duplicates", phone, "7,4,7", []int{4, 7}, "", ""},
		{"phone list of offline cpus only", phone, "2", nil, "", "names no online CPU (online: 0-1,3-7)"},
		{"phone absent cpu", phone, "8-9", nil, "", "names no online CPU"},
		{"bad list", phone, "big-core", nil, "", "bad number"},
		{"laptop big is all", laptop, "big", []int{0, 1, 2, 3, 4, 5, 6, 7}, "all cores are alike", ""},
		{"orin little is all", orin, "little", []int{0, 1, 2, 3, 4, 5, 6, 7}, "all cores are alike", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, note, err := ResolvePin(tt.topo, tt.pin)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("= %v, %v; want %v", got, err, tt.want)
			}
			if (tt.note == "") != (note == "") || !strings.Contains(note, tt.note) {
				t.Errorf("note %q, want %q", note, tt.note)
			}
		})
	}
	// A two-kind machine has no mid cluster.
	two := Topology{CPUs: []CPU{{ID: 0}, {ID: 1}}, Clusters: Group([]CPU{{ID: 0, Capacity: 512}, {ID: 1, Capacity: 1024}})}
	if _, _, err := ResolvePin(two, "mid"); err == nil || !strings.Contains(err.Error(), "no mid cluster on this device (it has [little big])") {
		t.Errorf("mid on little+big: %v", err)
	}
}
