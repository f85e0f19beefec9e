package cpu

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vig-edge/vig/platform/proc"
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

// BenchmarkPingPong measures a request/answer hand-off between two goroutines,
// the shape of a reader goroutine waking the code that answers: with the
// answering goroutine unlocked, and locked to its thread (LockHot without a
// pin). A locked goroutine that blocks cannot let its thread run anything else,
// so Go hands its P to another thread and back on every block: it reports
// context switches per round trip beside the time.
func BenchmarkPingPong(b *testing.B) {
	for _, locked := range []bool{false, true} {
		name := "unlocked"
		if locked {
			name = "locked"
		}
		b.Run(name, func(b *testing.B) {
			req, resp := make(chan int), make(chan int)
			go func() {
				if locked {
					_, undo, err := LockHot(HotOptions{UclampMin: -1})
					if err != nil {
						panic(err)
					}
					defer undo()
				}
				for v := range req {
					resp <- v + 1
				}
			}()
			before := ctxSwitches(b)
			b.ResetTimer()
			for i := range b.N {
				req <- i
				<-resp
			}
			b.StopTimer()
			b.ReportMetric(float64(ctxSwitches(b)-before)/float64(b.N), "ctxsw/op")
			close(req)
		})
	}
}

// ctxSwitches sums the voluntary and involuntary context switches of the
// process's threads.
func ctxSwitches(b *testing.B) uint64 {
	tids, err := ProcessThreads()
	if err != nil {
		b.Fatal(err)
	}
	var n uint64
	for _, tid := range tids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
		if err != nil {
			continue // exited
		}
		st, err := proc.ParseStatus(raw)
		if err != nil {
			b.Fatal(err)
		}
		n += st.VoluntaryCtxtSwitches + st.NonvoluntaryCtxtSwitches
	}
	return n
}
