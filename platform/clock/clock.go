// Package clock reads the device's CLOCK_MONOTONIC without a system call per read.
//
// Sensor processes stamp frames with CLOCK_MONOTONIC (the clock every process on the
// device shares, unaffected by wall-clock steps). Go's time package reads the same
// clock through the vDSO but exposes it only relative to process start, so Monotonic
// measures the offset between the two once (one clock_gettime system call) and then
// answers from time.Since alone.
package clock

import (
	"sync"
	"time"
)

var (
	start  = time.Now()
	offset = sync.OnceValue(func() int64 { return monotonicRaw() - int64(time.Since(start)) })
)

// Monotonic returns CLOCK_MONOTONIC in nanoseconds.
func Monotonic() int64 { return offset() + int64(time.Since(start)) }

// WallOffset returns wall-clock time minus CLOCK_MONOTONIC, in nanoseconds, now:
// subtract it from a wall-clock timestamp to place it on the monotonic clock.
func WallOffset() int64 {
	now := time.Now()
	return now.UnixNano() - (offset() + int64(now.Sub(start)))
}
