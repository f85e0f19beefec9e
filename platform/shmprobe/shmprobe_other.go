//go:build !linux

package shmprobe

import (
	"errors"
	"fmt"
	"runtime"
)

// DevShmWritable is only implemented on Linux.
func DevShmWritable() error {
	return fmt.Errorf("/dev/shm probe: %w on %s", errors.ErrUnsupported, runtime.GOOS)
}

// Memfd is only implemented on Linux.
func Memfd() error { return fmt.Errorf("memfd: %w on %s", errors.ErrUnsupported, runtime.GOOS) }
