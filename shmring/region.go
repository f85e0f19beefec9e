package shmring

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Backend selects what backs a region.
type Backend int

const (
	// BackendAuto picks memfd where the kernel supports sealed memfds and
	// falls back to a /dev/shm file otherwise.
	BackendAuto Backend = iota
	// BackendMemfd is memfd_create(MFD_ALLOW_SEALING|MFD_CLOEXEC), sealed
	// against shrinking and growing. It works on Android (no /dev/shm).
	BackendMemfd
	// BackendShmFile is an unlinked file in /dev/shm. It cannot be sealed: the
	// receiver must allow unsealed regions and guards every access.
	BackendShmFile
	// BackendShmKey is a file in /dev/shm that stays linked under a random key
	// until the region is closed, so that an inference backend can open it by
	// name (Triton system shared memory) and read frames in place: vig then
	// forwards requests by reference instead of copying their bytes. Otherwise it
	// is a BackendShmFile. A process killed before Close leaves the file behind
	// (/dev/shm/vig-ring-*).
	BackendShmKey
)

func (b Backend) String() string {
	switch b {
	case BackendAuto:
		return "auto"
	case BackendMemfd:
		return "memfd"
	case BackendShmFile:
		return "shm"
	case BackendShmKey:
		return "shm-key"
	}
	return fmt.Sprintf("Backend(%d)", int(b))
}

// ParseBackend parses the configuration spelling of a backend: "auto",
// "memfd" or "shm".
func ParseBackend(s string) (Backend, error) {
	switch s {
	case "", "auto":
		return BackendAuto, nil
	case "memfd":
		return BackendMemfd, nil
	case "shm", "dev-shm", "/dev/shm":
		return BackendShmFile, nil
	case "shm-key":
		return BackendShmKey, nil
	}
	return 0, fmt.Errorf("shmring: unknown backend %q (want auto, memfd, shm or shm-key)", s)
}

// Errors returned by regions and sessions.
var (
	// ErrUnsealed: a memfd without F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL, or an
	// unsealable file where unsealed regions are not allowed.
	ErrUnsealed = errors.New("shmring: region is not sealed")
	// ErrQuarantined: the region faulted (its owner truncated it); it is no
	// longer touched and its session is over.
	ErrQuarantined = errors.New("shmring: region quarantined after a memory fault")
	// ErrClosed: the session ended (either side closed or the peer died).
	ErrClosed = errors.New("shmring: session closed")
	// ErrCorrupt: the peer wrote counters that no correct peer can produce.
	ErrCorrupt = errors.New("shmring: peer corrupted the ring")
	// ErrFull: no descriptor or payload slot is free and the call does not wait.
	ErrFull = errors.New("shmring: ring full")
)

// OpenOptions controls what a receiver accepts.
type OpenOptions struct {
	// AllowUnsealed accepts regions that cannot be sealed (/dev/shm files).
	// Accesses are then guarded with debug.SetPanicOnFault.
	AllowUnsealed bool
	// MaxSize bounds the region size; 0 means 2 GiB.
	MaxSize uint64
}

// Region is a mapped shared-memory region with a validated layout.
type Region struct {
	mem     []byte
	fd      int
	backend Backend
	sealed  bool
	layout  Layout
	key     string // /dev/shm key: created under it (owner) or verified (receiver)
	owner   bool   // this side created the keyed file and unlinks it on Close

	faulted   atomic.Bool
	faultAddr atomic.Uintptr
	closeOnce sync.Once
	closeErr  error
}

// Layout returns the region's geometry.
func (r *Region) Layout() Layout { return r.layout }

// Backend reports what backs the region.
func (r *Region) Backend() Backend { return r.backend }

// Sealed reports whether the region is sealed against shrinking, so that no
// access can fault and payload views are safe in any goroutine.
func (r *Region) Sealed() bool { return r.sealed }

// Key is the /dev/shm key of a BackendShmKey region ("" otherwise).
func (r *Region) Key() string { return r.key }

// Fd is the region's file descriptor, owned by the Region.
func (r *Region) Fd() int { return r.fd }

// Bytes is the whole mapping. For an unsealed region, touch it only under
// Guard.
func (r *Region) Bytes() []byte { return r.mem }

// Quarantined reports whether an access faulted.
func (r *Region) Quarantined() bool { return r.faulted.Load() }

// Close unmaps the region and closes its descriptor. Views into it must no
// longer be used.
func (r *Region) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.unmap() })
	return r.closeErr
}

// Guard runs f with faults on the mapping turned into an error: a truncated
// /dev/shm region makes f return ErrQuarantined instead of killing the
// process. For sealed regions f runs directly.
func (r *Region) Guard(f func() error) (err error) {
	if r.faulted.Load() {
		return ErrQuarantined
	}
	if !r.sealed {
		old := debug.SetPanicOnFault(true)
		defer r.recoverFault(old, &err)
	}
	return f()
}

// recoverFault is deferred by guarded methods. It must be the deferred
// function itself for recover to see the panic.
func (r *Region) recoverFault(old bool, err *error) {
	debug.SetPanicOnFault(old)
	if p := recover(); p != nil {
		if !r.ownsFault(p) {
			panic(p)
		}
		r.faulted.Store(true)
		*err = ErrQuarantined
	}
}

// ownsFault decides whether a panic is a fault on this region: one whose
// address lies in the mapping, or any memory fault while the backing file is
// shorter than the region (qemu-user reports SIGBUS without an address, which
// Go then calls a nil dereference). Anything else is a bug elsewhere and is
// re-raised.
func (r *Region) ownsFault(p any) bool {
	if fe, ok := p.(interface{ Addr() uintptr }); ok {
		a := fe.Addr()
		base := uintptr(unsafe.Pointer(unsafe.SliceData(r.mem)))
		if a >= base && a < base+uintptr(len(r.mem)) {
			r.faultAddr.Store(a)
			return true
		}
	}
	if _, ok := p.(runtime.Error); ok && r.truncated() {
		return true
	}
	return false
}

// FaultAddr is the address of the first fault, for logs.
func (r *Region) FaultAddr() uintptr { return r.faultAddr.Load() }
