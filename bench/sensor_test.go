package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock jumps straight to every time a sensor sleeps until, and ends the run
// (by cancelling) when asked to sleep to end or later. Before jumping it calls
// settle, so a test can wait for the sends it expects to have finished.
type fakeClock struct {
	mu     sync.Mutex
	now    int64
	end    int64
	cancel context.CancelFunc
	sleeps []int64
	settle func()
}

func (c *fakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) SleepUntil(ctx context.Context, t int64) error {
	if c.settle != nil {
		c.settle()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t >= c.end {
		c.cancel()
		return context.Canceled
	}
	c.sleeps = append(c.sleeps, t)
	c.now = max(c.now, t)
	return ctx.Err()
}

// A server that never answers does not slow the sensor: every frame is still
// scheduled at its capture time; Depth frames are sent, the rest are dropped at the
// client, and the frames sent are the first ones, with their scheduled capture
// times.
func TestSensorKeepsScheduleWhenServerStalls(t *testing.T) {
	for _, depth := range []int{1, 4, 16} {
		ctx, cancel := context.WithCancel(context.Background())
		const start, interval, offset = 1_000_000, int64(33 * time.Millisecond), int64(5 * time.Millisecond)
		const frames = 100
		clk := &fakeClock{now: start, end: start + offset + frames*interval, cancel: cancel}
		var mu sync.Mutex
		var captures []int64
		results := 0
		s := &Sensor{Interval: time.Duration(interval), Offset: time.Duration(offset), Depth: depth, Clock: clk,
			Send: func(ctx context.Context, frame uint64, capture int64) error {
				mu.Lock()
				captures = append(captures, capture)
				mu.Unlock()
				<-ctx.Done() // stalled: answers only when the run ends
				return ctx.Err()
			},
			OnResult: func(_ uint64, _, _ int64, err error) {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("result error %v, want context.Canceled", err)
				}
				mu.Lock()
				results++
				mu.Unlock()
			}}
		st := s.Run(ctx, start)
		if st.Scheduled != frames || st.Sent != uint64(depth) || st.Dropped != frames-uint64(depth) {
			t.Errorf("depth %d: %+v, want %d scheduled, %d sent, %d dropped", depth, st, frames, depth, frames-depth)
		}
		if len(clk.sleeps) != frames {
			t.Fatalf("depth %d: %d sleeps, want %d", depth, len(clk.sleeps), frames)
		}
		for k, at := range clk.sleeps {
			if want := start + offset + int64(k)*interval; at != want {
				t.Fatalf("depth %d: frame %d scheduled at %d, want %d", depth, k, at, want)
			}
		}
		slices.Sort(captures)
		for k, c := range captures {
			if want := start + offset + int64(k)*interval; c != want {
				t.Errorf("depth %d: sent capture %d = %d, want %d (the first frames)", depth, k, c, want)
			}
		}
		if results != depth {
			t.Errorf("depth %d: %d results reported, want %d (Run waits for calls in flight)", depth, results, depth)
		}
	}
}

// A server that answers before the next frame is due: nothing is dropped, every
// frame goes out with its scheduled capture time, in order.
func TestSensorSendsEveryFrameWhenAnswered(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var inflight sync.WaitGroup
	clk := &fakeClock{now: 0, end: 50 * int64(time.Millisecond) * 20, cancel: cancel, settle: inflight.Wait}
	var frames []uint64
	var mu sync.Mutex
	s := &Sensor{Interval: 50 * time.Millisecond, Depth: 1, Clock: clk,
		Send: func(_ context.Context, frame uint64, capture int64) error {
			if capture != int64(frame)*int64(50*time.Millisecond) {
				t.Errorf("frame %d capture %d", frame, capture)
			}
			mu.Lock()
			frames = append(frames, frame)
			mu.Unlock()
			return nil
		},
		OnResult: func(uint64, int64, int64, error) { inflight.Done() }}
	// Each frame sent is registered before the clock is asked to move on.
	s.Clock = &countingClock{fakeClock: clk, wg: &inflight}
	st := s.Run(ctx, 0)
	if st.Scheduled != 20 || st.Sent != 20 || st.Dropped != 0 {
		t.Errorf("%+v, want 20 scheduled and sent, none dropped", st)
	}
	slices.Sort(frames)
	for i, f := range frames {
		if f != uint64(i) {
			t.Fatalf("frames sent %v", frames)
		}
	}
}

// countingClock adds one to wg for the frame about to be sent after each sleep, so
// that the next sleep waits for that frame's answer.
type countingClock struct {
	*fakeClock
	wg *sync.WaitGroup
}

func (c *countingClock) SleepUntil(ctx context.Context, t int64) error {
	if err := c.fakeClock.SleepUntil(ctx, t); err != nil {
		return err
	}
	c.wg.Add(1)
	return nil
}
