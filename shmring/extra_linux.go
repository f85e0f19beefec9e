package shmring

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mapExtra maps an extra region read-only after checking that it is a sealed
// memfd at least size bytes long: sealed, it cannot shrink under the mapping.
func mapExtra(fd int, size uint64) ([]byte, error) {
	seals, err := fdSeals(fd)
	if err != nil || seals&requiredSeals != requiredSeals {
		return nil, fmt.Errorf("%w: an extra region must be a memfd with F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL (seals %#x, %v)", ErrUnsealed, seals, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("extra region: fstat: %w", err)
	}
	if uint64(st.Size) < size {
		return nil, fmt.Errorf("extra region: the memfd has %d bytes, the message says %d", st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("extra region: mmap %d bytes: %w", size, err)
	}
	return mem, nil
}

func unmapExtra(mem []byte) { unix.Munmap(mem) }
