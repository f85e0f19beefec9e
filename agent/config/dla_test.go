package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
	"github.com/vig-edge/vig/wire"
)

func TestDLACore(t *testing.T) {
	for _, tt := range []struct {
		name string
		core int
		ok   bool
	}{
		{"dla0", 0, true},
		{"dla1", 1, true},
		{"dla10", 10, true},
		{"dla", 0, false}, // a pool of cores
		{"dla01", 0, false},
		{"dla00", 0, false},
		{"DLA0", 0, false},
		{"dla_0", 0, false},
		{"dla-1", 0, false},
		{"dla+1", 0, false},
		{"dla1a", 0, false},
		{"dla 1", 0, false},
		{"gpu", 0, false},
		{"xdla0", 0, false},
		{"dla99999999999999999999", 0, false},
		{"", 0, false},
	} {
		core, ok := DLACore(tt.name)
		if core != tt.core || ok != tt.ok {
			t.Errorf("DLACore(%q) = %d, %v; want %d, %v", tt.name, core, ok, tt.core, tt.ok)
		}
		if ok && DLAName(core) != tt.name {
			t.Errorf("DLAName(%d) = %q, want %q", core, DLAName(core), tt.name)
		}
	}
}

// A name that reads as a DLA core but is not written as one is refused
// wherever an accelerator is named, with the name to write.
func TestDLANameErrors(t *testing.T) {
	const base = "accelerators: {gpu: 1, %s: 1}\ninterference: {%s: 1.2}\nmodels:\n  m: {exec_ms: 5, on: %s}\n  g: {exec_ms: 5, on: gpu}\n"
	for _, tt := range []struct{ name, fix string }{
		{"dla01", "write dla1"},
		{"dla00", "write dla0"},
		{"DLA0", "write dla0"},
		{"dla_1", "write dla1"},
		{"dla-0", "write dla0"},
		{"dla99999999999999999999", "no device has that many cores: write dla0, dla1"},
	} {
		_, err := Parse("t.yaml", []byte(fmt.Sprintf(base, tt.name, tt.name, tt.name)))
		if err == nil {
			t.Errorf("%s: accepted", tt.name)
			continue
		}
		for _, key := range []string{"accelerators." + tt.name, "interference." + tt.name, "models.m.on"} {
			if !strings.Contains(err.Error(), key+`: "`+tt.name+`": a DLA core is named dla<N>`) {
				t.Errorf("%s: no error at %s: %v", tt.name, key, err)
			}
		}
		if strings.Count(err.Error(), tt.fix) != 3 {
			t.Errorf("%s: want the fix %q at each of the three places: %v", tt.name, tt.fix, err)
		}
	}
	for _, ok := range []string{"dla", "dla0", "dla1", "dla_pool", "dlafast"} {
		if _, err := Parse("t.yaml", []byte(fmt.Sprintf(base, ok, ok, ok))); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// A server that binds the models to more accelerators than vig governs gets
// an error that says how to split them.
func TestDeriveTooManyAccelerators(t *testing.T) {
	var y strings.Builder
	y.WriteString("models:\n")
	groups := map[string][]wire.InstanceGroup{}
	for i := range MaxAccelerators + 1 {
		name := fmt.Sprintf("m%d", i)
		fmt.Fprintf(&y, "  %s: {exec_ms: 5}\n", name)
		groups[name] = []wire.InstanceGroup{dlaGroup(int64(i))}
	}
	c := mustParse(t, y.String())
	_, _, err := Derive(c, served(groups))
	if err == nil {
		t.Fatal("17 DLA cores derived")
	}
	for _, want := range []string{"17 accelerators (dla0, dla1, dla10", "vig governs at most 16", "split the models across vig instances"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// A name DLACore reads as core n is exactly DLAName(n), so no two names
// are one core; a name dlaFix has a fix for is no core, and its fix is.
func FuzzDLACore(f *testing.F) {
	for _, s := range []string{"dla0", "dla1", "dla", "dla01", "DLA0", "dla_1", "dla-1", "dla+1", "dla 1", "dla99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		defer fuzztest.Bound(t)()
		core, ok := DLACore(name)
		if ok && (core < 0 || DLAName(core) != name) {
			t.Fatalf("DLACore(%q) = %d: DLAName gives %q", name, core, DLAName(core))
		}
		fix := dlaFix(name)
		if fix == "" {
			return
		}
		if ok {
			t.Fatalf("dlaFix(%q) = %q for a core", name, fix)
		}
		if w, found := strings.CutPrefix(fix, "write "); found {
			if _, ok := DLACore(w); !ok {
				t.Fatalf("dlaFix(%q) = %q: not a core", name, fix)
			}
		}
	})
}
