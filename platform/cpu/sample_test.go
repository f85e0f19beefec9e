package cpu

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
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
		if v, err := ParseFreq([]byte(s)); err == nil && v < 0 {
			t.Fatalf("%q -> %d", s, v)
		}
	})
}

// TestSamplerObserve samples a pinned thread for real: getcpu's answer is the
// pinned CPU, and its frequency is read from a scaling_cur_freq file (a fixture
// tree here: this VM has no cpufreq). Disabled, Observe records nothing and the
// sampler never starts a goroutine.
func TestSamplerObserve(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("getcpu and sched_setaffinity: Linux only")
	}
	all := cpusHere(t)
	c := all[len(all)-1]
	dir := t.TempDir()
	old := SysCPU
	t.Cleanup(func() { SysCPU = old })
	SysCPU = dir
	for _, id := range all {
		p := filepath.Join(dir, "cpu"+itoa(id), "cpufreq")
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "scaling_cur_freq"), []byte(itoa(1000_000+id*100_000)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var cpus []CPU
	for _, id := range all {
		cpus = append(cpus, CPU{ID: id, ClusterID: -1})
	}
	topo := Topology{CPUs: cpus, Clusters: Group(cpus)}
	s := NewSampler(topo)
	goroutines := runtime.NumGoroutine()
	onGoroutine(func() {
		_, undo, err := LockHot(HotOptions{CPUs: []int{c}, UclampMin: -1})
		if err != nil {
			t.Error(err)
			return
		}
		defer undo()
		s.Observe() // disabled
		if st := s.Stats(); st.Samples != 0 {
			t.Errorf("disabled sampler sampled: %+v", st)
		}
		s.Enable(time.Nanosecond)
		if runtime.NumGoroutine() != goroutines+1 { // +1: this goroutine
			t.Errorf("Enable started a goroutine: %d, was %d", runtime.NumGoroutine(), goroutines+1)
		}
		for range 50 {
			s.Observe()
		}
		s.Enable(time.Hour)
		for range 50 {
			s.Observe() // within the interval: no sample
		}
	})
	st := s.Stats()
	if st.Samples < 2 || st.Samples > 51 {
		t.Errorf("samples %d, want 2–51 (one per Observe at 1 ns, then none for an hour)", st.Samples)
	}
	if len(st.Clusters) != 1 || st.Clusters[0].Share != 1 {
		t.Errorf("one cluster with every sample: %+v", st.Clusters)
	}
	if want := float64(1000 + c*100); st.MedianMHz != want {
		t.Errorf("median %v MHz, want %v (cpu%d's file)", st.MedianMHz, want, c)
	}
	s.Disable()
	if len(s.files) != 0 {
		t.Errorf("Disable left %d files open", len(s.files))
	}
}

func itoa(v int) string { return FormatList([]int{v}) }
