package shmprobe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/platform/sysinfo"
)

// DevShmWritable creates, writes and removes a small object in DevShm.
func DevShmWritable() error { return devShmOnce() }

var devShmOnce = sync.OnceValue(probeDevShm)

func probeDevShm() error {
	fi, err := os.Stat(DevShm)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w (no POSIX shared memory here, as on Android; vig's ring uses memfd instead)", DevShm, errors.ErrUnsupported)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", DevShm)
	}
	f, err := os.CreateTemp(DevShm, "vig-doctor-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", DevShm, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	if _, err := f.Write(buf); err != nil {
		return fmt.Errorf("writing %s: %w (is /dev/shm full? df %s)", filepath.Base(f.Name()), err, DevShm)
	}
	return nil
}

// Memfd creates a memfd with MFD_ALLOW_SEALING, seals it against shrinking, growing
// and further sealing, and checks that the seals hold (a grow must fail). It is
// vig's one memfd probe: doctor and shmring's region creation both ask it, so they
// cannot disagree.
func Memfd() error { return memfdOnce() }

var memfdOnce = sync.OnceValue(probeMemfd)

func probeMemfd() error {
	rel := sysinfo.Release()
	// Some old vendor kernels crash on an unknown syscall instead of returning
	// ENOSYS: ask the version first.
	if !sysinfo.AtLeast(rel, 3, 17) {
		return fmt.Errorf("memfd sealing: %w (kernel %s; needs %s)", errors.ErrUnsupported, rel, memfdMinKernel)
	}
	fd, err := unix.MemfdCreate("vig-probe", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("memfd_create: %w (kernel %s; needs %s)", errors.ErrUnsupported, rel, memfdMinKernel)
	}
	if err != nil {
		return fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 4096); err != nil {
		return fmt.Errorf("memfd ftruncate: %w", err)
	}
	const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("F_ADD_SEALS: %w (%v)", errors.ErrUnsupported, err)
		}
		return fmt.Errorf("F_ADD_SEALS: %w", err)
	}
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("F_GET_SEALS: %w", err)
	}
	if got&seals != seals {
		return fmt.Errorf("memfd seals read back as %#x, want %#x set", got, seals)
	}
	if err := unix.Ftruncate(fd, 8192); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("sealed memfd grew (ftruncate: %v): seals are not enforced", err)
	}
	return nil
}
