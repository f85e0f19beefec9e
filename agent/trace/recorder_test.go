package trace

import (
	"context"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

func monoClock() func() int64 {
	t0 := time.Now()
	return func() int64 { return int64(time.Since(t0)) + 1 }
}

// TestRecorderOffRecordsNothing: without an open span, Record keeps nothing
// and allocates nothing; the ring is not even allocated.
func TestRecorderOffRecordsNothing(t *testing.T) {
	r, err := NewRecorder(1024, monoClock(), nil)
	if err != nil {
		t.Fatal(err)
	}
	id := []byte("req-1")
	e := Event{Kind: Arrive, Token: 1}
	if n := testing.AllocsPerRun(1000, func() { r.Record(&e, id) }); n != 0 {
		t.Errorf("Record off: %v allocations per event, want 0", n)
	}
	if r.ring != nil || r.n != 0 {
		t.Errorf("off: ring allocated (%v) or %d events recorded", r.ring != nil, r.n)
	}
	var nilRec *Recorder
	nilRec.Record(&e, id) // a nil recorder is valid and off
	if nilRec.On() {
		t.Error("a nil recorder says it records")
	}
}

// TestRecorderWindow: a span sees exactly the events recorded while it was
// open, in order, with their request ids (one longer than the ring keeps cut
// to its first 64 bytes); no allocation per event while on.
func TestRecorderWindow(t *testing.T) {
	r, _ := NewRecorder(1024, monoClock(), func() int64 { return 1e18 })
	r.SetMeta(func() Meta { return Meta{Streams: []Stream{{Name: "cam"}}} })
	r.Record(&Event{Kind: Arrive, Token: 99}, nil) // before: not recorded
	sp := r.Begin()
	long := strings.Repeat("x", 80)
	for i := 1; i <= 100; i++ {
		id := []byte("id-" + string(rune('a'+i%26)))
		if i == 50 {
			id = []byte(long)
		}
		if i == 60 {
			id = nil
		}
		r.Record(&Event{Kind: Arrive, Token: uint64(i)}, id)
	}
	e := Event{Kind: Answer, Token: 7}
	short := []byte("short-id")
	if n := testing.AllocsPerRun(100, func() { e.Time = 0; r.Record(&e, short) }); n != 0 {
		t.Errorf("Record on: %v allocations per event, want 0", n)
	}
	w := sp.End()
	r.Record(&Event{Kind: Arrive, Token: 1000}, nil) // after: not recorded
	if w.Dropped != 0 || len(w.Events) != 201 {
		t.Fatalf("window: %d events, %d dropped; want 201, 0", len(w.Events), w.Dropped)
	}
	for i, ev := range w.Events[:100] {
		if ev.Token != uint64(i+1) || ev.Time == 0 || ev.Time < w.Start || ev.Time > w.End {
			t.Fatalf("event %d: %+v (window %d..%d)", i, ev, w.Start, w.End)
		}
		switch i + 1 {
		case 50:
			if ev.ID != long[:idInline] {
				t.Errorf("long id: %q", ev.ID)
			}
		case 60:
			if ev.ID != "" {
				t.Errorf("absent id: %q", ev.ID)
			}
		default:
			if !strings.HasPrefix(ev.ID, "id-") {
				t.Errorf("event %d: id %q", i+1, ev.ID)
			}
		}
	}
	if w.Events[200].ID != "short-id" || len(w.Streams) != 1 || w.WallStart != w.Start+1e18 {
		t.Errorf("last %+v, meta %+v, wall %d", w.Events[200], w.Meta, w.WallStart)
	}
	if r.On() {
		t.Error("still recording after the only span ended")
	}
}

// TestRecorderBounded: a span longer than the ring keeps the newest Size
// events and counts the rest dropped; the recorder's memory is the ring,
// whatever the number of events.
func TestRecorderBounded(t *testing.T) {
	const size = 4096
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, _ := NewRecorder(size, monoClock(), nil)
	sp := r.Begin()
	id := []byte(strings.Repeat("y", 100)) // longer than the ring keeps
	for i := 1; i <= 50*size; i++ {
		r.Record(&Event{Kind: Dispatch, Token: uint64(i)}, id)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	ringBytes := uint64(size) * uint64(unsafe.Sizeof(slot{}))
	// The ring, plus slack: nothing per event.
	limit := ringBytes + 256<<10
	if grown := after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc); grown > limit {
		t.Errorf("heap grew %d bytes after %d events in a ring of %d (%d bytes); want ≤ %d", grown, 50*size, size, ringBytes, limit)
	}
	w := sp.End()
	if len(w.Events) != size || w.Dropped != 49*size || w.Events[0].Token != 49*size+1 || w.Events[size-1].Token != 50*size {
		t.Errorf("window: %d events, %d dropped, tokens %d..%d", len(w.Events), w.Dropped, w.Events[0].Token, w.Events[len(w.Events)-1].Token)
	}
	runtime.KeepAlive(r)
}

// TestRecorderConcurrent: writers on many goroutines while spans open and
// close: every span's events are those recorded between its Begin and End,
// none lost while the ring is large enough (run with -race).
func TestRecorderConcurrent(t *testing.T) {
	r, _ := NewRecorder(1<<16, monoClock(), nil)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var written atomic.Uint64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); !stop.Load(); i++ {
				r.Record(&Event{Kind: Complete, Token: uint64(g)<<32 | i}, nil)
				written.Add(1)
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	for range 20 {
		sp := r.Begin()
		time.Sleep(2 * time.Millisecond)
		w := sp.End()
		// The ring keeps the newest events; one overwritten while the
		// window was copied is skipped and counted: per writer, the events
		// kept are in order, and the holes add up to at most Dropped.
		last, holes := map[uint64]uint64{}, uint64(0)
		for _, e := range w.Events {
			g, i := e.Token>>32, e.Token&(1<<32-1)
			if i <= last[g] {
				t.Fatalf("writer %d: event %d after %d", g, i, last[g])
			}
			if last[g] != 0 {
				holes += i - last[g] - 1
			}
			last[g] = i
		}
		if holes > w.Dropped || w.Dropped > 0 && uint64(len(w.Events)) > uint64(r.Size()) {
			t.Fatalf("%d events, %d holes, %d dropped, ring of %d", len(w.Events), holes, w.Dropped, r.Size())
		}
	}
	stop.Store(true)
	wg.Wait()
	if written.Load() == 0 {
		t.Fatal("no writer ran")
	}
}

// TestRecorderCollectCancelled: a capture whose asker leaves stops recording.
func TestRecorderCollectCancelled(t *testing.T) {
	r, _ := NewRecorder(0, monoClock(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !r.On() {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := r.Collect(ctx, time.Hour); err == nil {
		t.Fatal("Collect of a cancelled context returned a window")
	}
	if r.On() || r.Size() != DefaultEvents {
		t.Errorf("on %v, size %d", r.On(), r.Size())
	}
	if _, err := NewRecorder(100, monoClock(), nil); err == nil || !strings.Contains(err.Error(), "buffer_events") {
		t.Errorf("a ring of 100: %v", err)
	}
}

// TestRecorderRecent: the live view's first ask records its seconds; later
// asks return the last seconds at once while the lease keeps recording on;
// the lease ends when nobody asks.
func TestRecorderRecent(t *testing.T) {
	r, _ := NewRecorder(1024, monoClock(), nil)
	r.leaseFor = 300 * time.Millisecond
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			r.Record(&Event{Kind: Arrive, Token: i}, nil)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	cold, err := r.Recent(0.1)
	if err != nil || cold.End-cold.Start < int64(100*time.Millisecond) || len(cold.Events) == 0 {
		t.Fatalf("cold: %v, %d events over %d ns", err, len(cold.Events), cold.End-cold.Start)
	}
	time.Sleep(150 * time.Millisecond)
	w, err := r.Recent(0.1)
	if err != nil || len(w.Events) == 0 || !r.On() || w.Start <= cold.End {
		t.Fatalf("warm: %v, %d events, on %v, starts %d (the cold one ended %d)", err, len(w.Events), r.On(), w.Start, cold.End)
	}
	for _, e := range w.Events {
		if e.Time < w.Start || e.Time > w.End {
			t.Fatalf("event at %d outside the window %d..%d", e.Time, w.Start, w.End)
		}
	}
	if span := w.End - w.Start; span != int64(100*time.Millisecond) {
		t.Errorf("warm window spans %d ns, want the 0.1 s asked", span)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.On() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r.On() {
		t.Error("still recording after the lease ended")
	}
	if _, err := r.Recent(0); err == nil {
		t.Error("Recent(0) returned a window")
	}
}

// TestSlotHoldsEveryField: the ring's slot has every field of Event but its
// ID (held inline), with the same types: a field added to Event must be added
// to the slot and its put and event.
func TestSlotHoldsEveryField(t *testing.T) {
	et, st := reflect.TypeOf(Event{}), reflect.TypeOf(slot{})
	for i := range et.NumField() {
		f := et.Field(i)
		if f.Name == "ID" {
			continue
		}
		g, ok := st.FieldByName(f.Name)
		if !ok || g.Type != f.Type {
			t.Errorf("slot lacks Event.%s %s", f.Name, f.Type)
		}
	}
	if st.NumField() != et.NumField()-1+2 {
		t.Errorf("slot has %d fields, Event %d (+ idLen, id − ID)", st.NumField(), et.NumField())
	}
	if n := unsafe.Sizeof(slot{}) * touchStep; n > 4096 {
		t.Errorf("touchStep slots take %d bytes, more than a page: the ring's pages are not all touched", n)
	}
	// Round trip with every field set.
	e := Event{Time: 1, Token: 2, Batch: 3, Capture: 4, Deadline: 5, ID: "id", Stream: 6, For: 7, Waiting: 8, Accel: 9,
		Slot: 10, Busy: 11, BatchSize: 12, Variant: 13, Kind: Complete, Queued: true, Code: 14, Outcome: 15, Reason: 16}
	var s slot
	s.put(&e, []byte(e.ID))
	if got := s.event(); got != e {
		t.Errorf("round trip: %+v, want %+v", got, e)
	}
}
