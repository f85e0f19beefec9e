package mockbackend

import (
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/platform/shmprobe"
	"github.com/vig-edge/vig/proto/inference"
)

// shmDir is where POSIX shared-memory objects live (shm_open(key) opens shmDir+key):
// platform/shmprobe's one spelling of it; a variable for tests.
var shmDir = shmprobe.DevShm

// region is one registered system shared-memory region, mapped read-write.
type region struct {
	name, key    string
	offset, size uint64
	mem          []byte // the whole mapping (page-aligned), for munmap
	data         []byte // the registered bytes: size bytes from offset in the object

	// Guarded by registry.mu. A region unregistered while requests use it is unmapped
	// when the last of them lets go, never under their feet.
	refs int
	gone bool
}

// registry holds the registered regions by name.
type registry struct {
	mu      sync.Mutex
	regions map[string]*region
}

// validKey checks a key the way shm_open needs it: one leading '/' and no other.
func validKey(key string) error {
	if len(key) < 2 || key[0] != '/' || strings.IndexByte(key[1:], '/') >= 0 || key == "/." || key == "/.." {
		return status.Errorf(codes.InvalidArgument,
			"invalid shared memory key %q: it must start with '/' and contain no other '/' (e.g. \"/camera0\")", key)
	}
	return nil
}

func (r *registry) register(req *inference.SystemSharedMemoryRegisterRequest) error {
	if req.Name == "" {
		return status.Error(codes.InvalidArgument, "shared memory region name must not be empty")
	}
	if err := validKey(req.Key); err != nil {
		return err
	}
	if req.ByteSize == 0 {
		return status.Errorf(codes.InvalidArgument, "shared memory region '%s': byte_size must be positive", req.Name)
	}
	if req.Offset+req.ByteSize < req.Offset {
		return status.Errorf(codes.InvalidArgument, "shared memory region '%s': offset %d + byte_size %d overflows", req.Name, req.Offset, req.ByteSize)
	}
	r.mu.Lock()
	_, dup := r.regions[req.Name]
	r.mu.Unlock()
	if dup {
		return alreadyRegistered(req.Name)
	}
	mem, data, err := mapRegion(req.Name, req.Key, req.Offset, req.ByteSize)
	if err != nil {
		return err
	}
	reg := &region{name: req.Name, key: req.Key, offset: req.Offset, size: req.ByteSize, mem: mem, data: data}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.regions[req.Name]; dup { // lost a race with another Register
		unmap(mem)
		return alreadyRegistered(req.Name)
	}
	if r.regions == nil {
		r.regions = map[string]*region{}
	}
	r.regions[req.Name] = reg
	return nil
}

func alreadyRegistered(name string) error {
	return status.Errorf(codes.AlreadyExists, "shared memory region '%s' already in manager", name)
}

// status describes one region, or all of them when name is empty.
func (r *registry) status(name string) (map[string]*inference.SystemSharedMemoryStatusResponse_RegionStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*inference.SystemSharedMemoryStatusResponse_RegionStatus{}
	for n, reg := range r.regions {
		if name == "" || n == name {
			out[n] = &inference.SystemSharedMemoryStatusResponse_RegionStatus{
				Name: n, Key: reg.key, Offset: reg.offset, ByteSize: reg.size,
			}
		}
	}
	if name != "" && len(out) == 0 {
		return nil, status.Errorf(codes.NotFound, "Unable to find system shared memory region: '%s'", name)
	}
	return out, nil
}

// unregister removes one region, or all when name is empty. Removing a name that is
// not registered succeeds, as in Triton.
func (r *registry) unregister(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := []string{name}
	if name == "" {
		names = slices.Collect(mapKeys(r.regions))
	}
	for _, n := range names {
		reg, ok := r.regions[n]
		if !ok {
			continue
		}
		delete(r.regions, n)
		reg.gone = true
		if reg.refs == 0 {
			unmap(reg.mem)
		}
	}
}

// acquire looks a region up and keeps it mapped until release.
func (r *registry) acquire(name string) (*region, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.regions[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Unable to find shared memory region: '%s'", name)
	}
	reg.refs++
	return reg, nil
}

func (r *registry) release(reg *region) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg.refs--
	if reg.refs == 0 && reg.gone {
		unmap(reg.mem)
	}
}

// slice returns size bytes at offset in the region, with Triton's checks.
func (reg *region) slice(tensor string, offset, size uint64) ([]byte, error) {
	if offset >= reg.size {
		return nil, status.Errorf(codes.InvalidArgument,
			"Invalid offset for shared memory region: '%s' (tensor '%s': offset %d, region size %d)", reg.name, tensor, offset, reg.size)
	}
	if end := offset + size; end < offset || end > reg.size {
		return nil, status.Errorf(codes.InvalidArgument,
			"Invalid offset + byte size for shared memory region: '%s' (tensor '%s': offset %d + byte size %d > region size %d)",
			reg.name, tensor, offset, size, reg.size)
	}
	return reg.data[offset : offset+size : offset+size], nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (r *registry) closeAll() { r.unregister("") }
