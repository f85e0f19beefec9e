package shmprobe

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vig-edge/vig/platform/sysinfo"
)

// TestThisMachine runs the real probes. On Linux with a kernel ≥ 3.17 memfd sealing
// must work, also under qemu-user (it passes memfd_create and the seal fcntls
// through); /dev/shm must work where the directory exists.
func TestThisMachine(t *testing.T) {
	if err := Memfd(); err != nil {
		t.Errorf("memfd with seals on kernel %s: %v", sysinfo.Release(), err)
	}
	if _, err := os.Stat(DevShm); err != nil {
		t.Skipf("%s: %v", DevShm, err)
	}
	if err := DevShmWritable(); err != nil {
		t.Errorf("/dev/shm: %v", err)
	}
}

func TestDevShmMissing(t *testing.T) {
	old := DevShm
	t.Cleanup(func() { DevShm = old })
	DevShm = filepath.Join(t.TempDir(), "nope")
	if err := probeDevShm(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("missing dir: %v, want ErrUnsupported", err)
	}
	DevShm = t.TempDir()
	if err := probeDevShm(); err != nil {
		t.Errorf("writable dir: %v", err)
	}
}
