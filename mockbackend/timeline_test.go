package mockbackend

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestTimeline queues jobs behind a slot the test holds: each recorded job
// starts exactly at the end of the previous one on its slot (the timeline,
// not the wake-up), never before it queued.
func TestTimeline(t *testing.T) {
	r, c, _ := serve(t, "127.0.0.1:0", Config{Models: []Model{{Name: "fast", Exec: time.Millisecond}}, Timeline: true})
	held, err := r.slots.acquire(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ModelInfer(context.Background(), rawRequest("fast", FrameID("cam", uint64(i)))); err != nil {
				t.Error(err)
			}
		}()
		waitQueued(t, r.slots, i+1)
	}
	heldEnd := time.Now()
	r.slots.release(held.slot, heldEnd)
	wg.Wait()
	jobs := r.Timeline()
	if len(jobs) != n {
		t.Fatalf("%d jobs recorded, want %d", len(jobs), n)
	}
	prev := heldEnd
	for i, j := range jobs {
		if j.Slot != 0 || j.Stream != "cam" || j.Frame != uint64(i) || j.Model != "fast" {
			t.Errorf("job %d: %+v", i, j)
		}
		if !j.Start.Equal(prev) || j.Start.Before(j.Queued) {
			t.Errorf("job %d starts %v after the previous end, queued %v before its start", i, j.Start.Sub(prev), j.Start.Sub(j.Queued))
		}
		if d := j.End.Sub(j.Start); d != ExecTime(0, "cam", uint64(i), time.Millisecond) {
			t.Errorf("job %d ran %v", i, d)
		}
		prev = j.End
	}
	r2, _, _ := serve(t, "127.0.0.1:0", Config{Models: []Model{{Name: "fast"}}})
	if r2.Timeline() != nil {
		t.Error("timeline recorded without Config.Timeline")
	}
}
