package clock

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Monotonic must agree with the kernel's CLOCK_MONOTONIC: a reading taken between
// two raw readings lies between them (a bound, not a timing claim).
func TestMonotonicMatchesKernel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CLOCK_MONOTONIC alignment is Linux-only")
	}
	for range 100 {
		var a, b unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		m := Monotonic()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		// Go's clock and the raw syscall may differ by the rounding of one
		// reading; allow 1 ms of slack either way.
		if m < a.Nano()-int64(time.Millisecond) || m > b.Nano()+int64(time.Millisecond) {
			t.Fatalf("Monotonic %d outside kernel readings [%d, %d]", m, a.Nano(), b.Nano())
		}
	}
	prev := Monotonic()
	for range 1000 {
		now := Monotonic()
		if now < prev {
			t.Fatalf("clock went backwards: %d < %d", now, prev)
		}
		prev = now
	}
	if off := WallOffset(); off <= 0 {
		t.Errorf("wall offset %d: wall clock should be ahead of boot time", off)
	}
}
