//go:build unix && !linux

package netopt

import "golang.org/x/sys/unix"

func rawRead(fd int, p []byte) (int, error) { return unix.Read(fd, p) }

func rawSendmsg(fd int, bufs [][]byte, _ *[]unix.Iovec) (int, error) {
	return unix.SendmsgBuffers(fd, bufs, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
}

func rawReadv(fd int, bufs [][]byte, _ *[]unix.Iovec) (int, error) { return unix.Readv(fd, bufs) }
