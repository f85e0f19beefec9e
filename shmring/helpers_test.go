//go:build linux

package shmring

import (
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

func atomicStore64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

func dialRaw(addr string) (*net.UnixConn, error) {
	return net.DialUnix("unixpacket", nil, unixAddr(addr))
}

// rawHello sends a hello with fd and returns the raw reply.
func rawHello(uc *net.UnixConn, b []byte, fd int) ([]byte, error) {
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := uc.WriteMsgUnix(b, oob, nil); err != nil {
		return nil, err
	}
	buf := make([]byte, replyMaxSize+1)
	n, err := uc.Read(buf)
	return buf[:n], err
}
