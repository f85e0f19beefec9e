// Package shmprobe checks, once per process, whether the two shared-memory
// mechanisms vig's data paths use work here: a writable /dev/shm (Triton's system
// shared memory, shm_open) and memfd_create with sealing (vig's own ring; Android
// has no /dev/shm). A missing mechanism is an error that wraps errors.ErrUnsupported
// and says why; a mechanism that is present but misbehaves is any other error.
package shmprobe

import (
	"strconv"
	"strings"
)

// DevShm is where POSIX shared memory objects live.
var DevShm = "/dev/shm"

// kernelAtLeast reports whether a kernel release string ("6.1.0-18-arm64",
// "4.14.190-perf+") is at least major.minor. An unparsable release is not.
func kernelAtLeast(release string, major, minor int) bool {
	ver, _, _ := strings.Cut(release, "-")
	parts := strings.SplitN(ver, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// memfdMinKernel is the first kernel with memfd_create and file sealing.
const memfdMinKernel = "3.17"

func minKernel() (int, int) {
	ma, mi, _ := strings.Cut(memfdMinKernel, ".")
	a, _ := strconv.Atoi(ma)
	b, _ := strconv.Atoi(mi)
	return a, b
}
