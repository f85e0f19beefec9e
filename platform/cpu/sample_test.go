package cpu

import (
	"os"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func TestSamplerShares(t *testing.T) {
	topo, err := ReadTopology(os.DirFS("testdata/phone-arm64"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSampler(topo)
	// The Pixel 8 case: most bursts on a mid core at 910 MHz, some on the big one.
	for range 6 {
		s.observe(5, 910_000)
	}
	s.observe(7, 2_363_000)
	s.observe(7, 2_363_000)
	s.observe(0, 0)  // frequency unknown: placement still counts
	s.observe(42, 0) // a CPU the topology does not know
	st := s.Stats()
	if st.Samples != 10 || st.Enabled {
		t.Fatalf("%+v", st)
	}
	want := map[string]uint64{"little": 1, "mid": 6, "big": 2, "": 1}
	for _, c := range st.Clusters {
		if c.Samples != want[c.Kind] || c.Share != float64(want[c.Kind])/10 {
			t.Errorf("cluster %+v, want %d samples", c, want[c.Kind])
		}
	}
	if len(st.Clusters) != 4 || st.Clusters[3].CPUs != "other" {
		t.Errorf("clusters %+v", st.Clusters)
	}
	if st.MedianMHz != 910 {
		t.Errorf("median %v MHz, want 910", st.MedianMHz)
	}
	// The window keeps the newest SampleWindow frequencies.
	for range SampleWindow {
		s.observe(7, 2_363_000)
	}
	if st := s.Stats(); st.MedianMHz != 2363 {
		t.Errorf("after a window of big-core samples the median is %v", st.MedianMHz)
	}
}

func TestParseFreq(t *testing.T) {
	for in, want := range map[string]int{"1113600\n": 1113600, "0": 0} {
		if got, err := ParseFreq([]byte(in)); err != nil || got != want {
			t.Errorf("ParseFreq(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-5", "1.2GHz"} {
		if _, err := ParseFreq([]byte(in)); err == nil {
			t.Errorf("ParseFreq(%q): no error", in)
		}
	}
}

func FuzzParseFreq(f *testing.F) {
	f.Add("1113600\n")
	f.Fuzz(func(t *testing.T, s string) {
		defer fuzztest.Bound(t)()
		if v, err := ParseFreq([]byte(s)); err == nil && v < 0 {
			t.Fatalf("%q -> %d", s, v)
		}
	})
}
