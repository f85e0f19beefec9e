package shmring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// newEventfd makes a doorbell's eventfd (counting, not a semaphore: one read
// resets any number of rings).
func newEventfd() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, wrapOp("eventfd", "(doorbell)", err)
	}
	return fd, nil
}

// bellWrite is a raw syscall: on a non-blocking eventfd it never blocks, so
// the Go scheduler (and its sysmon) need not hear of it.
func bellWrite(fd int, p []byte) {
	// EAGAIN: the counter is at its maximum, the bell is readable already.
	unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
}
