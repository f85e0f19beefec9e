package jetson

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func TestBoardOf(t *testing.T) {
	dt := func(entries string) fstest.MapFS {
		return fstest.MapFS{rel(DeviceTreeCompatible): {Data: []byte(entries)}}
	}
	for _, tt := range []struct {
		name         string
		root         fstest.MapFS
		board, entry string
		dla          int
		ok           bool
	}{
		{"agx orin", dt("nvidia,p3737-0000+p3701-0005\x00nvidia,p3701-0005\x00nvidia,tegra234\x00"), "Jetson AGX Orin", "nvidia,p3701-0005", 2, true},
		{"orin nx 8gb", dt("nvidia,p3767-0001\x00nvidia,tegra234\x00"), "Jetson Orin NX 8GB", "nvidia,p3767-0001", 1, true},
		{"orin nano 4gb", dt("nvidia,p3767-0004\x00nvidia,tegra234\x00"), "Jetson Orin Nano 4GB", "nvidia,p3767-0004", 0, true},
		{"agx xavier", dt("nvidia,p2972-0000\x00nvidia,p2888-0001\x00nvidia,tegra194\x00"), "Jetson AGX Xavier", "nvidia,p2888-0001", 2, true},
		{"unknown orin module: the SoC", dt("nvidia,p9999-0000\x00nvidia,tegra234"), "Jetson Orin", "nvidia,tegra234", 2, true},
		{"not a p3767 prefix", dt("nvidia,p3767-00001\x00"), "", "", 0, false},
		{"not a jetson", dt("raspberrypi,4-model-b\x00brcm,bcm2711\x00"), "", "", 0, false},
		{"no device tree", fstest.MapFS{}, "", "", 0, false},
	} {
		b, entry, ok := BoardOf(tt.root)
		if b.Name != tt.board || entry != tt.entry || b.DLACores != tt.dla || ok != tt.ok {
			t.Errorf("%s: %+v %q %v; want %s %q with %d DLA cores, %v", tt.name, b, entry, ok, tt.board, tt.entry, tt.dla, tt.ok)
		}
	}
	for dir, want := range map[string]string{"testdata/orin-nx": "Jetson Orin NX 16GB", "testdata/orin-nano": "Jetson Orin Nano 8GB"} {
		if b, _, ok := BoardOf(os.DirFS(dir)); !ok || b.Name != want {
			t.Errorf("%s: %+v %v, want %s", dir, b, ok, want)
		}
	}
}

// Short names are unique, every board has its compatible string, and no
// Jetson has more than two DLA cores.
func TestBoardsTable(t *testing.T) {
	short := map[string]bool{}
	for _, b := range Boards {
		if b.Short != "" && short[b.Short] {
			t.Errorf("short name %q twice", b.Short)
		}
		short[b.Short] = true
		if b.DLACores < 0 || b.Compatible == "" {
			t.Errorf("%+v: want 0 or more DLA cores and a compatible string", b)
		}
	}
	if MaxDLACores() != 2 {
		t.Errorf("MaxDLACores %d: no Jetson has more than 2", MaxDLACores())
	}
}

// Whatever the device tree holds, a board found is named by one of its
// entries.
func FuzzBoardOf(f *testing.F) {
	f.Add([]byte("nvidia,p3768-0000+p3767-0005\x00nvidia,p3767-0005\x00nvidia,tegra234\x00"))
	f.Add([]byte("nvidia,p3701\x00\x00"))
	f.Add([]byte("nvidia,tegra234-"))
	f.Fuzz(func(t *testing.T, data []byte) {
		defer fuzztest.Bound(t)()
		b, entry, ok := BoardOf(fstest.MapFS{rel(DeviceTreeCompatible): {Data: data}})
		if !ok {
			return
		}
		listed := false
		for _, e := range bytes.Split(data, []byte{0}) {
			listed = listed || string(e) == entry
		}
		if !listed || !(entry == b.Compatible || strings.HasPrefix(entry, b.Compatible+"-")) {
			t.Fatalf("%q: board %+v from entry %q", data, b, entry)
		}
	})
}
