package cpu

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestSamplerObserve samples a pinned thread for real: getcpu's answer is the
// pinned CPU, and its frequency is read from a scaling_cur_freq file (a fixture
// tree here: this VM has no cpufreq). Disabled, Observe records nothing and the
// sampler never starts a goroutine.
func TestSamplerObserve(t *testing.T) {
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
		if n := samplerGoroutines(); n != 0 {
			t.Errorf("Enable started %d goroutines running the sampler's code", n)
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

// samplerGoroutines counts the goroutines other than the caller that run a Sampler
// method: a count of all goroutines would also see other tests' goroutines come and go.
func samplerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i > 0 && strings.Contains(g, "cpu.(*Sampler)") { // the first is the caller's
			n++
		}
	}
	return n
}
