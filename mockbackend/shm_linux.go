package mockbackend

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mapRegion opens the POSIX shared-memory object key (what shm_open does on Linux:
// a file under /dev/shm), checks that offset+size lies within it and maps those
// bytes read-write and shared. Errors carry Triton's status codes.
func mapRegion(name, key string, offset, size uint64) (mem, data []byte, err error) {
	path := shmDir + key
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		// INTERNAL, as Triton answers a failed shm_open.
		hint := ""
		if errors.Is(err, unix.ENOENT) {
			hint = "; create the object with shm_open before registering it"
		}
		return nil, nil, status.Errorf(codes.Internal, "Unable to open shared memory region: '%s' (key '%s': %v%s)", name, key, err, hint)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, status.Errorf(codes.Internal, "shared memory region '%s': fstat %s: %v", name, path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, status.Errorf(codes.InvalidArgument, "shared memory region '%s': %s is not a regular file", name, path)
	}
	if fsize := uint64(st.Size); offset+size > fsize {
		return nil, nil, status.Errorf(codes.InvalidArgument,
			"Invalid offset + byte size for shared memory region: '%s' (offset %d + byte_size %d > %d bytes in %s)", name, offset, size, fsize, path)
	}
	if size > uint64(maxInt) {
		return nil, nil, status.Errorf(codes.InvalidArgument, "shared memory region '%s': byte_size %d too large to map", name, size)
	}
	page := uint64(os.Getpagesize())
	base := offset &^ (page - 1)
	skip := offset - base
	mem, err = unix.Mmap(fd, int64(base), int(skip+size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "shared memory region '%s': mmap %s: %v", name, path, err)
	}
	return mem, mem[skip : skip+size : skip+size], nil
}

func unmap(mem []byte) {
	// munmap fails only for a range that was never mapped; these came from Mmap.
	_ = unix.Munmap(mem)
}

const maxInt = int(^uint(0) >> 1)
