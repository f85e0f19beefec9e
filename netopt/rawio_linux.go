package netopt

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The gateway's socket reads and sends are made with RawSyscall, not Syscall.
// They never block — Go's sockets are non-blocking and every send carries
// MSG_DONTWAIT — so the Go scheduler need not be told that they might, and
// telling it is what costs here: entering a syscall the ordinary way wakes the
// runtime's monitor thread (sysmon) whenever it sleeps because every P was idle,
// which is a gateway's state between requests. Once woken, sysmon naps in 20 µs
// steps until the process is idle again and then sleeps once more: a futex wake,
// a run of nanosleeps and their context switches, for every request. A raw call
// leaves sysmon asleep. Waiting for readiness stays with Go's netpoller (the
// callers go through syscall.RawConn).

// rawRead reads from a non-blocking descriptor.
func rawRead(fd int, p []byte) (int, error) {
	var base unsafe.Pointer
	if len(p) > 0 {
		base = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(base), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	raceReceived(p[:n])
	return int(n), nil
}

// rawReadv reads from a non-blocking descriptor into bufs, in order. iov is
// the caller's scratch for the iovec array.
func rawReadv(fd int, bufs [][]byte, iov *[]unix.Iovec) (int, error) {
	v := (*iov)[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		e := unix.Iovec{Base: &b[0]}
		e.SetLen(len(b))
		v = append(v, e)
	}
	*iov = v
	if len(v) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	clear(v)
	if e != 0 {
		return 0, e
	}
	left := int(n)
	for _, b := range bufs {
		k := min(left, len(b))
		raceReceived(b[:k])
		left -= k
	}
	return int(n), nil
}

// rawSendmsg sends bufs with one sendmsg(MSG_DONTWAIT|MSG_NOSIGNAL), never
// blocking, also on a socket in blocking mode. iov is the caller's scratch for
// the iovec array, kept between calls so that a send allocates nothing.
func rawSendmsg(fd int, bufs [][]byte, iov *[]unix.Iovec) (int, error) {
	v := (*iov)[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		raceSending(b)
		e := unix.Iovec{Base: &b[0]}
		e.SetLen(len(b))
		v = append(v, e)
	}
	*iov = v
	if len(v) == 0 {
		return 0, nil
	}
	var msg unix.Msghdr
	msg.Iov = &v[0]
	msg.SetIovlen(len(v))
	n, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	clear(v) // drop the references to the caller's buffers
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
