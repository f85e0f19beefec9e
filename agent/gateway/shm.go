package gateway

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// System shared memory (Triton's protocol): the client creates an object with
// shm_open(key) and registers name → (key, offset, byte_size); tensors then carry a
// region name, a byte size and an offset instead of bytes. vig forwards registration
// to the backend and mirrors the backend's answer in its own registry, so that it can
// check every reference before the request waits in its queues, with Triton's codes:
// unknown region NOT_FOUND; offset ≥ region size, offset + size overflowing or past
// the region INVALID_ARGUMENT. The payload itself never passes through vig.
//
// Regions registered over the Unix socket are bound to the registering peer's uid
// (read with SO_PEERCRED when the connection was accepted): a process of another uid
// cannot make vig's backend read or write them.

// PeerUID is implemented by the net.Addr of connections whose peer's uid is known
// (netopt's Unix-socket connections).
type PeerUID interface{ PeerUID() (uid uint32, ok bool) }

const shmSyncTimeout = 2 * time.Second

// errShmUnknown: a tensor names a region vig has not seen (yet).
var errShmUnknown = errors.New("shared memory region not in vig's registry")

type shmRegion struct {
	key          string
	offset, size uint64
	uid          uint32
	bound        bool // only uid may use it
	own          bool // registered by vig itself (RegisterShm), not by a client
}

type shmRegistry struct {
	mu      sync.RWMutex
	regions map[string]shmRegion
}

func (r *shmRegistry) lookup(name []byte) (shmRegion, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	reg, ok := r.regions[string(name)]
	return reg, ok
}

// validShmKey applies Triton's rule: a leading '/', no other '/'; "/." and "/.."
// name /dev/shm itself and its parent, never a shared-memory object.
func validShmKey(key string) bool {
	return len(key) > 1 && key[0] == '/' && !strings.Contains(key[1:], "/") && key != "/." && key != "/.."
}

// shmCheck reads a SystemSharedMemoryRegister or Unregister request before it is
// forwarded, and returns what to do to vig's registry once the backend has
// accepted it.
func (g *Gateway) shmCheck(method string, msg mem.BufferSlice, uid uint32, bound bool) (func(), error) {
	b := msg.Materialize()
	if method == methodShmRegister {
		var r pb.SystemSharedMemoryRegisterRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "SystemSharedMemoryRegister: %v", err)
		}
		if !validShmKey(r.Key) {
			return nil, status.Errorf(codes.InvalidArgument, "shared memory key %q must start with '/', contain no other '/', and not be \"/.\" or \"/..\"", r.Key)
		}
		if r.Offset > math.MaxUint64-r.ByteSize {
			return nil, status.Errorf(codes.InvalidArgument, "shared memory region %q: offset + byte_size overflows", r.Name)
		}
		return func() {
			g.shm.mu.Lock()
			if g.shm.regions == nil {
				g.shm.regions = map[string]shmRegion{}
			}
			g.shm.regions[r.Name] = shmRegion{key: r.Key, offset: r.Offset, size: r.ByteSize, uid: uid, bound: bound}
			g.shm.mu.Unlock()
		}, nil
	}
	var r pb.SystemSharedMemoryUnregisterRequest
	if err := proto.Unmarshal(b, &r); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "SystemSharedMemoryUnregister: %v", err)
	}
	if r.Name != "" {
		if err := g.shmAccess(r.Name, uid, bound); err != nil {
			return nil, err
		}
	}
	return func() {
		g.shm.mu.Lock()
		if r.Name == "" {
			g.shm.regions = nil
		} else {
			delete(g.shm.regions, r.Name)
		}
		g.shm.mu.Unlock()
	}, nil
}

// shmAccess refuses a peer access to a region bound to another uid.
func (g *Gateway) shmAccess(name string, uid uint32, known bool) error {
	reg, ok := g.shm.lookup([]byte(name))
	if !ok || !reg.bound {
		return nil
	}
	if !known || uid != reg.uid {
		return status.Errorf(codes.PermissionDenied, "shared memory region %q belongs to uid %d", name, reg.uid)
	}
	return nil
}

// checkShm validates the shared-memory references of a ModelInfer request against
// the registry. A region vig has not seen (registered with the backend directly) is
// looked up on the backend once before it is refused.
//
// A region vig has not seen may have been registered with the backend directly:
// unless synced (the backend's list was just read), that is errShmUnknown, and the
// caller reads the list (shmSync) and checks again.
func (g *Gateway) checkShm(h *wire.InferHeader, uid uint32, known, synced bool) error {
	if g.relay == nil {
		return status.Errorf(codes.Unimplemented, "backend %s is a shared-memory ring runtime: Triton system shared memory is not available there; send raw_input_contents", g.opts.Config.Backend.Address)
	}
	for _, ts := range [][]wire.Tensor{h.Inputs, h.Outputs} {
		for i := range ts {
			if err := g.checkTensorShm(&ts[i], uid, known, synced); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *Gateway) checkTensorShm(t *wire.Tensor, uid uint32, known, synced bool) error {
	var name []byte
	var size, offset int64
	for _, p := range t.Params {
		switch string(p.Key) {
		case wire.ParamShmRegion:
			name = p.Str
		case wire.ParamShmByteSize:
			size = p.Int
		case wire.ParamShmOffset:
			offset = p.Int
		}
	}
	if name == nil {
		return nil
	}
	reg, ok := g.shm.lookup(name)
	if !ok {
		if !synced {
			return errShmUnknown
		}
		return status.Errorf(codes.NotFound, "unable to find system shared memory region: '%s'", name)
	}
	if reg.bound {
		if !known || uid != reg.uid {
			return status.Errorf(codes.PermissionDenied, "shared memory region %q belongs to uid %d", name, reg.uid)
		}
	}
	switch {
	case uint64(offset) >= reg.size && !(offset == 0 && size == 0):
		return status.Errorf(codes.InvalidArgument, "tensor %q: offset %d is beyond the %d-byte shared memory region %q", t.Name, offset, reg.size, name)
	case uint64(offset) > math.MaxUint64-uint64(size):
		return status.Errorf(codes.InvalidArgument, "tensor %q: offset %d + byte size %d overflows", t.Name, offset, size)
	case uint64(offset)+uint64(size) > reg.size:
		return status.Errorf(codes.InvalidArgument, "tensor %q: %d bytes at offset %d exceed the %d-byte shared memory region %q", t.Name, size, offset, reg.size, name)
	}
	return nil
}

// shmSync adds the backend's regions that vig does not know (registered directly
// with the backend, or before vig started); they are usable by any peer.
//
// It waits for a backend round trip (bounded by shmSyncTimeout), so it never runs
// on a connection's reader: the request that needs it waits on a goroutine of its
// own (see sconn.infer).
func (g *Gateway) shmSync() error {
	ctx, cancel := context.WithTimeout(context.Background(), shmSyncTimeout)
	defer cancel()
	b, err := g.Invoke(ctx, wire.MethodShmStatus, nil)
	if err != nil {
		return err
	}
	var resp pb.SystemSharedMemoryStatusResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return status.Errorf(codes.Internal, "backend SystemSharedMemoryStatus: %v", err)
	}
	g.shm.mu.Lock()
	defer g.shm.mu.Unlock()
	if g.shm.regions == nil {
		g.shm.regions = map[string]shmRegion{}
	}
	for name, r := range resp.Regions {
		if _, known := g.shm.regions[name]; !known {
			g.shm.regions[name] = shmRegion{key: r.Key, offset: r.Offset, size: r.ByteSize}
		}
	}
	return nil
}
