//go:build !linux

package mockbackend

import (
	"errors"
	"fmt"
	"runtime"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mapRegion needs POSIX shared memory as Linux exposes it under /dev/shm.
func mapRegion(name, key string, offset, size uint64) (mem, data []byte, err error) {
	err = fmt.Errorf("system shared memory region '%s': %w on %s (the mock backend maps /dev/shm objects on Linux only)",
		name, errors.ErrUnsupported, runtime.GOOS)
	return nil, nil, status.Error(codes.Unimplemented, err.Error())
}

func unmap([]byte) {}
