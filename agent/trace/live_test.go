package trace

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestLive: the page's source starts recording, returns only the last
// seconds asked (in time order, with the recorder's meta), keeps recording
// while asked and stops once no page asked for keep.
func TestLive(t *testing.T) {
	var now atomic.Int64
	now.Store(1_000 * ms)
	r, _ := NewRecorder(1024, now.Load, nil)
	r.SetMeta(func() Meta { return Meta{Streams: []Stream{{Name: "cam0"}}} })
	src := r.Live(time.Hour)
	w, err := src(1)
	if err != nil || len(w.Events) != 0 || !r.On() {
		t.Fatalf("first ask: %v events, err %v, on %v", len(w.Events), err, r.On())
	}
	// 3 s of events, one every 10 ms.
	for i := range 300 {
		now.Add(10 * ms)
		r.Record(&Event{Kind: Arrive, Token: uint64(i + 1), Stream: 0}, nil)
	}
	w, _ = src(1)
	if n := len(w.Events); n < 99 || n > 101 {
		t.Errorf("the last second: %d events, want 100", n)
	}
	if w.Events[0].Time < w.Start || w.End != now.Load() || w.Start != now.Load()-1000*ms || w.Streams[0].Name != "cam0" {
		t.Errorf("window [%d, %d], first event at %d, meta %v", w.Start, w.End, w.Events[0].Time, w.Meta)
	}
	if err := checkWindow(w); err != nil {
		t.Error(err)
	}
	// Asking for more than was recorded: from the start of the recording.
	if w, _ = src(30); len(w.Events) != 300 {
		t.Errorf("30 s: %d events, want the 300 recorded", len(w.Events))
	}
	// The ring wrapped: the window holds what it still has.
	for i := range 2000 {
		now.Add(ms)
		r.Record(&Event{Kind: Answer, Token: uint64(i + 1)}, nil)
	}
	if w, _ = src(30); len(w.Events) != 1024 {
		t.Errorf("after the ring wrapped: %d events, want 1024", len(w.Events))
	}

	r2, _ := NewRecorder(1024, now.Load, nil)
	src2 := r2.Live(20 * time.Millisecond)
	src2(5)
	if !r2.On() {
		t.Fatal("the page's first ask did not start recording")
	}
	deadline := time.Now().Add(10 * time.Second)
	for r2.On() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if r2.On() {
		t.Error("still recording 10 s after the page's lease of 20 ms ran out")
	}
	src2(5)
	if !r2.On() {
		t.Error("a page opened again did not start recording again")
	}
}
