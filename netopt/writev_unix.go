//go:build unix

package netopt

import "golang.org/x/sys/unix"

func writev(fd uintptr, bufs [][]byte) (int, error) { return unix.Writev(int(fd), bufs) }
