package netopt

import "golang.org/x/sys/unix"

func peerCred(fd uintptr) (uid, gid uint32, pid int32, err error) {
	cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0, 0, 0, err
	}
	return cred.Uid, cred.Gid, cred.Pid, nil
}
