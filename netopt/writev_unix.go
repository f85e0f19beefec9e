//go:build unix

package netopt

import "golang.org/x/sys/unix"

// writev sends without ever blocking, also on a socket in blocking mode.
func writev(fd uintptr, bufs [][]byte) (int, error) {
	return unix.SendmsgBuffers(int(fd), bufs, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
}
