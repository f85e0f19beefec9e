package shmring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared (not FUTEX_PRIVATE_FLAG) futex operations: the word lives in a
// MAP_SHARED mapping and the sleeper and the waker are different processes.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == val. It returns nil on a wake-up, a changed
// value (EAGAIN) or a signal (EINTR); the caller re-checks its condition.
// unix.Syscall6 (not RawSyscall) tells the Go scheduler the thread blocks.
func futexWait(addr *uint32, val uint32) error {
	futexWaits.Add(1)
	_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), 0, 0, 0)
	switch e {
	case 0, unix.EAGAIN, unix.EINTR:
		return nil
	}
	return e
}

// futexWake wakes up to n sleepers on addr. FUTEX_WAKE never blocks, so it
// is issued as a raw syscall, sparing the Go scheduler's syscall bookkeeping.
func futexWake(addr *uint32, n int) error {
	futexWakes.Add(1)
	_, _, e := unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(n), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
