package sysinfo

import (
	"strconv"

	"golang.org/x/sys/unix"
)

func readRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown (uname: " + strconv.Quote(err.Error()) + ")"
	}
	return unix.ByteSliceToString(u.Release[:])
}
