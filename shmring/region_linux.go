package shmring

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/platform/shmprobe"
	"github.com/vig-edge/vig/platform/sysinfo"
)

const requiredSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// probeMemfd is platform/shmprobe's sealed-memfd probe (run once per process,
// the same one doctor reports), with the kernel release for messages.
func probeMemfd() (string, error) { return sysinfo.Release(), shmprobe.Memfd() }

// probeShmDir checks that shmprobe.DevShm exists (Android has none).
func probeShmDir() error {
	st, err := os.Stat(shmprobe.DevShm)
	if err != nil || !st.IsDir() {
		return fmt.Errorf("shared-memory directory %s: %w (kernel %s: %v)", shmprobe.DevShm, errors.ErrUnsupported, sysinfo.Release(), err)
	}
	return nil
}

// Probe reports the backend BackendAuto selects on this machine, or an error
// wrapping errors.ErrUnsupported when neither works.
func Probe() (Backend, error) {
	_, merr := probeMemfd()
	if merr == nil {
		return BackendMemfd, nil
	}
	if serr := probeShmDir(); serr != nil {
		return 0, errors.Join(merr, serr)
	}
	return BackendShmFile, nil
}

// CreateRegion creates, sizes, seals (memfd) and maps a region for cfg, with
// its header written and its rings empty.
func CreateRegion(cfg Config, b Backend) (*Region, error) {
	l, err := ComputeLayout(cfg)
	if err != nil {
		return nil, err
	}
	if b == BackendAuto {
		if b, err = Probe(); err != nil {
			return nil, err
		}
	}
	var fd int
	var key string
	switch b {
	case BackendMemfd:
		if _, err := probeMemfd(); err != nil {
			return nil, err
		}
		if fd, err = unix.MemfdCreate("vig-shmring", unix.MFD_ALLOW_SEALING|unix.MFD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("shmring: memfd_create: %w", err)
		}
		l.Flags |= FlagMemfd
	case BackendShmFile, BackendShmKey:
		if err := probeShmDir(); err != nil {
			return nil, err
		}
		if fd, key, err = createShmFile(b == BackendShmKey); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("shmring: unknown backend %v", b)
	}
	if err := unix.Ftruncate(fd, int64(l.RegionSize)); err != nil {
		unlinkKey(key)
		unix.Close(fd)
		return nil, fmt.Errorf("shmring: sizing region to %d bytes: %w", l.RegionSize, err)
	}
	if b == BackendMemfd {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, requiredSeals); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("shmring: sealing memfd: %w", err)
		}
	}
	mem, err := unix.Mmap(fd, 0, int(l.RegionSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unlinkKey(key)
		unix.Close(fd)
		return nil, fmt.Errorf("shmring: mapping %d bytes: %w", l.RegionSize, err)
	}
	EncodeHeader(mem, l)
	return &Region{mem: mem, fd: fd, backend: b, sealed: b == BackendMemfd, layout: l, key: key, owner: key != ""}, nil
}

// createShmFile creates a file in shmprobe.DevShm. Unless keep is set it is unlinked at
// once and lives only as long as its descriptors and mappings; with keep it
// stays under its key (returned) until the region is closed.
func createShmFile(keep bool) (int, string, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	key := "/vig-ring-" + hex.EncodeToString(rnd[:])
	name := filepath.Join(shmprobe.DevShm, key[1:])
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return -1, "", fmt.Errorf("shmring: creating %s: %w", name, err)
	}
	if !keep {
		// Unlinked at once: nothing to clean up if either side dies.
		unix.Unlink(name)
		return fd, "", nil
	}
	return fd, key, nil
}

// unlinkKey removes a keyed file this side created ("" is none).
func unlinkKey(key string) {
	if key != "" {
		unix.Unlink(filepath.Join(shmprobe.DevShm, key[1:])) // best effort: it may be gone already
	}
}

// sameObject checks that fd is the file /dev/shm/<key> (same device and inode),
// so that a key a peer claims for the region it handed over can be trusted.
func sameObject(fd int, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return fmt.Errorf("shmring: fstat: %w", err)
	}
	path := filepath.Join(shmprobe.DevShm, key[1:])
	if err := unix.Lstat(path, &b); err != nil {
		return fmt.Errorf("shmring: key %s: %w", key, err)
	}
	if b.Mode&unix.S_IFMT != unix.S_IFREG || a.Dev != b.Dev || a.Ino != b.Ino {
		return fmt.Errorf("shmring: key %s names another object than the region handed over (dev/inode %d/%d, %s is %d/%d)", key, a.Dev, a.Ino, path, b.Dev, b.Ino)
	}
	return nil
}

// OpenRegion validates and maps a region received from an untrusted peer. It
// takes ownership of fd (closing it on error).
func OpenRegion(fd int, opts OpenOptions) (r *Region, err error) {
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shmring: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("shmring: region fd is not a regular file (mode %#o)", st.Mode)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return nil, fmt.Errorf("shmring: fstatfs: %w", err)
	}
	if sfs.Type != unix.TMPFS_MAGIC && sfs.Type != unix.HUGETLBFS_MAGIC {
		return nil, fmt.Errorf("shmring: region fd is not shared memory (filesystem %#x)", sfs.Type)
	}
	seals, serr := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	sealed := serr == nil && seals&requiredSeals == requiredSeals
	if !sealed && !opts.AllowUnsealed {
		return nil, fmt.Errorf("%w: seals %#x, want F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL (%#x); create it with memfd_create(MFD_ALLOW_SEALING) and F_ADD_SEALS", ErrUnsealed, seals, requiredSeals)
	}
	max := opts.MaxSize
	if max == 0 {
		max = 2 << 30
	}
	size := uint64(st.Size)
	if size < HeaderSize || size > max {
		return nil, fmt.Errorf("%w: file size %d outside [%d, %d]", ErrBadHeader, size, HeaderSize, max)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shmring: mapping %d bytes: %w", size, err)
	}
	r = &Region{mem: mem, fd: fd, backend: BackendShmFile, sealed: sealed}
	if sealed { // only memfds can carry these seals
		r.backend = BackendMemfd
	}
	var hdr [HeaderSize]byte
	if err := r.Guard(func() error { copy(hdr[:], mem); return nil }); err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	if r.layout, err = DecodeHeader(hdr[:], size); err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return r, nil
}

// truncated reports whether the backing file is now shorter than the region
// (only an unsealed file can be).
func (r *Region) truncated() bool {
	var st unix.Stat_t
	return unix.Fstat(r.fd, &st) == nil && uint64(st.Size) < r.layout.RegionSize
}

func (r *Region) unmap() error {
	if r.owner {
		unlinkKey(r.key)
	}
	err := unix.Munmap(r.mem)
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	return err
}

// seals returns the region's current seals, for tests and doctor.
func fdSeals(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0) }
