// Package proc reads the per-process and per-thread accounting that Linux
// exposes under /proc to any user who may see the process: CPU time split
// into user and kernel, page faults, context switches, and the scheduler's
// own statistics (time on a CPU, time waiting on a run queue, timeslices).
// It also opens perf_event software counters (task-clock, context switches,
// CPU migrations, page faults) for a process where perf_event_paranoid lets
// the caller do so, and says why not otherwise.
//
// Parsing is pure (functions over []byte, tested on fixtures and fuzzed);
// reading is a thin layer that joins [Root] with the file's name. Nothing
// here needs root.
//
// Units: the tick-based fields of /proc/<pid>/stat (utime, stime) count
// USER_HZ ticks. USER_HZ is part of the kernel ABI and is 100 on every
// architecture vig runs on (amd64, arm64), whatever CONFIG_HZ the kernel was
// built with, so [UserHZ] is a constant rather than a sysconf call (which
// would need libc). schedstat values are nanoseconds.
package proc

import "time"

// Root is where procfs is mounted. Tests point it at a fixture tree.
var Root = "/proc"

// UserHZ is the number of clock ticks per second used by the tick fields
// of /proc/<pid>/stat (sysconf(_SC_CLK_TCK)); fixed at 100 by the Linux ABI.
const UserHZ = 100

// Tick is the duration of one USER_HZ tick.
const Tick = time.Second / UserHZ

// TicksToDuration converts a count of USER_HZ ticks to a duration.
func TicksToDuration(ticks uint64) time.Duration {
	return time.Duration(ticks) * Tick
}
