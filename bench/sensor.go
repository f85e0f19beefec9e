package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vig-edge/vig/platform/clock"
)

// Clock is a Sensor's time source: CLOCK_MONOTONIC nanoseconds, the clock vig reads
// capture times with (vig_capture_ns).
type Clock interface {
	Now() int64
	// SleepUntil returns when the clock reads t or later, or with ctx's error.
	SleepUntil(ctx context.Context, t int64) error
}

// Monotonic is the real Clock (platform/clock).
var Monotonic Clock = monoClock{}

type monoClock struct{}

func (monoClock) Now() int64 { return clock.Monotonic() }

func (monoClock) SleepUntil(ctx context.Context, t int64) error {
	d := time.Duration(t - clock.Monotonic())
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SendFunc sends one frame and blocks until it is answered (or ctx ends).
type SendFunc func(ctx context.Context, frame uint64, capture int64) error

// Sensor is an open-loop frame source: frame k is captured at
// start + Offset + k·Interval whatever happened to the frames before it. A frame is
// sent at once on its own goroutine unless Depth frames are already outstanding
// (the client's buffer depth); then it is dropped at the client and counted. A
// sensor that waited for each answer before sending the next frame would slow
// down exactly when the system is overloaded and so hide the overload.
type Sensor struct {
	Interval time.Duration
	Offset   time.Duration
	Depth    int
	Clock    Clock
	Send     SendFunc
	// OnResult, if set, is called on the sending goroutine when a frame's call
	// returns, with the clock's reading at that moment.
	OnResult func(frame uint64, capture, at int64, err error)
}

// SensorStats counts what a Sensor did.
type SensorStats struct {
	Scheduled uint64 `json:"scheduled"` // frames whose capture time came
	Sent      uint64 `json:"sent"`
	Dropped   uint64 `json:"client_dropped"` // found Depth frames outstanding
}

// Run produces frames from start until ctx ends, then waits for the calls in
// flight to return (they see ctx's cancellation) and returns the counts.
func (s *Sensor) Run(ctx context.Context, start int64) SensorStats {
	var st SensorStats
	var outstanding atomic.Int64
	var wg sync.WaitGroup
	depth := int64(max(s.Depth, 1))
	for k := uint64(0); ; k++ {
		t := start + int64(s.Offset) + int64(k)*int64(s.Interval)
		if err := s.Clock.SleepUntil(ctx, t); err != nil {
			break
		}
		st.Scheduled++
		if outstanding.Load() >= depth {
			st.Dropped++
			continue
		}
		outstanding.Add(1)
		st.Sent++
		wg.Add(1)
		go func(frame uint64, capture int64) {
			defer wg.Done()
			err := s.Send(ctx, frame, capture)
			at := s.Clock.Now()
			// The slot is free before OnResult runs: a frame due now is not
			// dropped because of the bookkeeping.
			outstanding.Add(-1)
			if s.OnResult != nil {
				s.OnResult(frame, capture, at, err)
			}
		}(k, t)
	}
	wg.Wait()
	return st
}
