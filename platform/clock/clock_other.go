//go:build !linux

package clock

// monotonicRaw has no shared monotonic clock to align with outside Linux: vig's
// clock then starts at zero with the process, and capture times must be given
// as wall-clock (scheduler.capture_clock: realtime).
func monotonicRaw() int64 { return 0 }
