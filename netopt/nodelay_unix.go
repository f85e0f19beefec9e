//go:build unix

package netopt

import (
	"golang.org/x/sys/unix"
)

func getNoDelay(fd uintptr) (bool, error) {
	v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY)
	return v != 0, err
}

// setNoDelayRaw is used by tests to turn Nagle back on behind netopt's back.
func setNoDelayRaw(fd uintptr, on bool) error {
	v := 0
	if on {
		v = 1
	}
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, v)
}

func getSendBuffer(fd uintptr) (int, error) {
	return unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
}
