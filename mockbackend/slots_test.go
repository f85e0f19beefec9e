package mockbackend

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/vig-edge/vig/proto/inference"
)

// waitQueued waits (without a clock assertion) until n jobs are queued.
func waitQueued(t *testing.T, s *slots, n int) {
	t.Helper()
	for s.waiting() != n {
		time.Sleep(50 * time.Microsecond)
	}
}

func TestSlotsFIFO(t *testing.T) {
	s := newSlots(1)
	first, err := s.acquire(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := s.acquire(context.Background(), time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			s.release(g.slot, g.start)
		}()
		waitQueued(t, s, i+1) // job i is queued before job i+1 arrives
	}
	s.release(first.slot, first.start)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("jobs ran in order %v, want arrival order", order)
		}
	}
}

func TestSlotsCancelLeavesQueue(t *testing.T) {
	s := newSlots(1)
	first, _ := s.acquire(context.Background(), time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := s.acquire(ctx, time.Now())
		errc <- err
	}()
	waitQueued(t, s, 1)
	got := make(chan grant)
	go func() {
		g, err := s.acquire(context.Background(), time.Now())
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	waitQueued(t, s, 2)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if q := s.waiting(); q != 1 {
		t.Fatalf("%d queued after a cancel, want 1", q)
	}
	s.release(first.slot, first.start)
	g := <-got
	s.release(g.slot, g.start)
	if q := s.waiting(); q != 0 || s.running.Load() != 0 {
		t.Fatalf("after all: %d queued, %d running", q, s.running.Load())
	}
}

// TestSlotsTimeline checks the schedule without looking at the clock: a queued job
// starts at the previous job's scheduled end, not when it was handed the slot.
func TestSlotsTimeline(t *testing.T) {
	s := newSlots(1)
	t0 := time.Now()
	g1, _ := s.acquire(context.Background(), t0)
	if !g1.start.Equal(t0) {
		t.Fatalf("idle slot: start %v, want arrival %v", g1.start, t0)
	}
	got := make(chan grant)
	go func() {
		g, _ := s.acquire(context.Background(), t0.Add(time.Millisecond))
		got <- g
	}()
	waitQueued(t, s, 1)
	end1 := t0.Add(5 * time.Millisecond) // scheduled end; the release may come later
	s.release(g1.slot, end1)
	g2 := <-got
	if !g2.start.Equal(end1) {
		t.Fatalf("queued job starts at %v after t0, want the previous scheduled end (%v)", g2.start.Sub(t0), end1.Sub(t0))
	}
	s.release(g2.slot, g2.start)
	// A job arriving after the slot's last end starts at its arrival.
	late := end1.Add(time.Hour)
	g3, _ := s.acquire(context.Background(), late)
	if !g3.start.Equal(late) {
		t.Fatalf("late arrival starts at %v, want its arrival", g3.start.Sub(t0))
	}
}

func TestSlotsLimit(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		s := newSlots(n)
		var wg sync.WaitGroup
		var mu sync.Mutex
		running, most := 0, 0
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := s.acquire(context.Background(), time.Now())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				time.Sleep(200 * time.Microsecond)
				mu.Lock()
				running--
				mu.Unlock()
				s.release(g.slot, time.Now())
			}()
		}
		wg.Wait()
		if most > n || s.maxRunning.Load() > int64(n) {
			t.Errorf("slots=%d: %d jobs ran at once (slots counter: %d)", n, most, s.maxRunning.Load())
		}
	}
}

// BenchmarkExecAccuracy measures how close the sleep+spin wait ends to the scheduled
// end of a 5 ms job, against a plain time.Sleep, and reports the error percentiles.
func BenchmarkExecAccuracy(b *testing.B) {
	const exec = 5 * time.Millisecond
	for _, bc := range []struct {
		name string
		spin time.Duration
	}{{"sleep+spin", calibratedSpin()}, {"sleep", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			errs := make([]time.Duration, 0, b.N)
			for b.Loop() {
				end := time.Now().Add(exec)
				if bc.spin >= 0 {
					waitUntil(end, bc.spin)
				} else {
					time.Sleep(time.Until(end))
				}
				errs = append(errs, time.Since(end))
			}
			sort.Slice(errs, func(i, j int) bool { return errs[i] < errs[j] })
			pct := func(p float64) float64 { return float64(errs[int(p*float64(len(errs)-1))]) / 1e3 }
			b.ReportMetric(pct(0.5), "p50-µs-late")
			b.ReportMetric(pct(0.99), "p99-µs-late")
			b.ReportMetric(float64(bc.spin.Microseconds()), "spin-µs")
		})
	}
}

// BenchmarkBacklogDrift queues 50 jobs of ~2 ms at once on one slot and reports how
// much later than the sum of their execution times the last one finishes: the slot
// timeline keeps late wake-ups from adding up across a backlog.
func BenchmarkBacklogDrift(b *testing.B) {
	const jobs = 50
	s, err := New(Config{Models: []Model{{Name: "m", Exec: 2 * time.Millisecond}}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var drifts []time.Duration
	frame := uint64(0)
	for b.Loop() {
		var total time.Duration
		var wg sync.WaitGroup
		t0 := time.Now()
		for range jobs {
			id := FrameID("m", frame)
			total += ExecTime(0, "m", frame, 2*time.Millisecond)
			frame++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.infer(context.Background(), &inference.ModelInferRequest{ModelName: "m", Id: id}); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		drifts = append(drifts, time.Since(t0)-total)
	}
	slices.Sort(drifts)
	b.ReportMetric(float64(drifts[len(drifts)/2])/1e3, "p50-drift-µs")
	b.ReportMetric(float64(drifts[len(drifts)-1])/1e3, "max-drift-µs")
}
