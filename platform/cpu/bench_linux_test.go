package cpu

import (
	"testing"
	"time"
)

// BenchmarkThreadDo is the hand-off cost of Thread.Do (two channel operations
// and, when the hot thread sleeps, two wake-ups): the reason Do should be given
// a whole loop, not one request.
func BenchmarkThreadDo(b *testing.B) {
	th, err := StartThread(HotOptions{UclampMin: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer th.Close()
	n := 0
	f := func() { n++ }
	b.ResetTimer()
	for range b.N {
		th.Do(f)
	}
}

// BenchmarkSamplerObserve is what the hot loop pays per Observe call: off (the
// default), and on with an interval that lets every call sample (getcpu and a
// pread of scaling_cur_freq, absent on a VM).
func BenchmarkSamplerObserve(b *testing.B) {
	topo, _ := ReadTopology(Root())
	b.Run("off", func(b *testing.B) {
		s := NewSampler(topo)
		for range b.N {
			s.Observe()
		}
	})
	b.Run("on-every-call", func(b *testing.B) {
		s := NewSampler(topo)
		s.Enable(time.Nanosecond)
		defer s.Disable()
		for range b.N {
			s.Observe()
		}
	})
	b.Run("on-10ms", func(b *testing.B) {
		s := NewSampler(topo)
		s.Enable(10 * time.Millisecond)
		defer s.Disable()
		for range b.N {
			s.Observe()
		}
	})
}

// BenchmarkCurrentCPU is one getcpu(2).
func BenchmarkCurrentCPU(b *testing.B) {
	for range b.N {
		CurrentCPU()
	}
}
