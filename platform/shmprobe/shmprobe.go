// Package shmprobe checks, once per process, whether the two shared-memory
// mechanisms vig's data paths use work here: a writable /dev/shm (Triton's system
// shared memory, shm_open) and memfd_create with sealing (vig's own ring; Android
// has no /dev/shm). A missing mechanism is an error that wraps errors.ErrUnsupported
// and says why; a mechanism that is present but misbehaves is any other error.
package shmprobe

// DevShm is where POSIX shared memory objects live: the one spelling of the
// directory for every part of vig (shm_open(key) is DevShm+key).
var DevShm = "/dev/shm"

// memfdMinKernel is the first kernel with memfd_create and file sealing.
const memfdMinKernel = "3.17"
