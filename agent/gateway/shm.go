package gateway

import (
	"context"
	"math"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/metrics"
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

type shmRegion struct {
	key          string
	offset, size uint64
	uid          uint32
	bound        bool // only uid may use it
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

func peerUID(ctx context.Context) (uint32, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return 0, false
	}
	if a, ok := p.Addr.(PeerUID); ok {
		return a.PeerUID()
	}
	return 0, false
}

// validShmKey applies Triton's rule: a leading '/', no other '/'.
func validShmKey(key string) bool {
	return len(key) > 1 && key[0] == '/' && !strings.Contains(key[1:], "/")
}

// shmRegister forwards SystemSharedMemoryRegister and records the region if the
// backend accepted it.
func (g *Gateway) shmRegister(ss grpc.ServerStream, m *metrics.Method) error {
	var req, resp wire.Frame
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	m.Received(req.Len())
	var r pb.SystemSharedMemoryRegisterRequest
	if err := proto.Unmarshal(req.Buffers().Materialize(), &r); err != nil {
		req.Free()
		return status.Errorf(codes.InvalidArgument, "SystemSharedMemoryRegister: %v", err)
	}
	if !validShmKey(r.Key) {
		req.Free()
		return status.Errorf(codes.InvalidArgument, "shared memory key %q must start with '/' and contain no other '/'", r.Key)
	}
	if r.Offset > math.MaxUint64-r.ByteSize {
		req.Free()
		return status.Errorf(codes.InvalidArgument, "shared memory region %q: offset + byte_size overflows", r.Name)
	}
	if err := g.invoke(ss, "/"+Service+"/SystemSharedMemoryRegister", &req, &resp, m); err != nil {
		return err
	}
	uid, bound := peerUID(ss.Context())
	g.shm.mu.Lock()
	if g.shm.regions == nil {
		g.shm.regions = map[string]shmRegion{}
	}
	g.shm.regions[r.Name] = shmRegion{key: r.Key, offset: r.Offset, size: r.ByteSize, uid: uid, bound: bound}
	g.shm.mu.Unlock()
	return nil
}

// shmUnregister forwards SystemSharedMemoryUnregister and forgets the region (all
// regions for an empty name) once the backend has.
func (g *Gateway) shmUnregister(ss grpc.ServerStream, m *metrics.Method) error {
	var req, resp wire.Frame
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	m.Received(req.Len())
	var r pb.SystemSharedMemoryUnregisterRequest
	if err := proto.Unmarshal(req.Buffers().Materialize(), &r); err != nil {
		req.Free()
		return status.Errorf(codes.InvalidArgument, "SystemSharedMemoryUnregister: %v", err)
	}
	if r.Name != "" {
		if err := g.shmAccess(ss.Context(), r.Name); err != nil {
			req.Free()
			return err
		}
	}
	if err := g.invoke(ss, "/"+Service+"/SystemSharedMemoryUnregister", &req, &resp, m); err != nil {
		return err
	}
	g.shm.mu.Lock()
	if r.Name == "" {
		g.shm.regions = nil
	} else {
		delete(g.shm.regions, r.Name)
	}
	g.shm.mu.Unlock()
	return nil
}

// shmAccess refuses a peer access to a region bound to another uid.
func (g *Gateway) shmAccess(ctx context.Context, name string) error {
	reg, ok := g.shm.lookup([]byte(name))
	if !ok || !reg.bound {
		return nil
	}
	if uid, known := peerUID(ctx); !known || uid != reg.uid {
		return status.Errorf(codes.PermissionDenied, "shared memory region %q belongs to uid %d", name, reg.uid)
	}
	return nil
}

// checkShm validates the shared-memory references of a ModelInfer request against
// the registry. A region vig has not seen (registered with the backend directly) is
// looked up on the backend once before it is refused.
func (g *Gateway) checkShm(ctx context.Context, h *wire.InferHeader) error {
	if g.backend == nil {
		return status.Errorf(codes.Unimplemented, "backend %s is a shared-memory ring runtime: Triton system shared memory is not available there; send raw_input_contents", g.opts.Config.Backend.Address)
	}
	for _, ts := range [][]wire.Tensor{h.Inputs, h.Outputs} {
		for i := range ts {
			if err := g.checkTensorShm(ctx, &ts[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *Gateway) checkTensorShm(ctx context.Context, t *wire.Tensor) error {
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
		if err := g.shmSync(ctx); err != nil {
			return err
		}
		if reg, ok = g.shm.lookup(name); !ok {
			return status.Errorf(codes.NotFound, "unable to find system shared memory region: '%s'", name)
		}
	}
	if reg.bound {
		if uid, known := peerUID(ctx); !known || uid != reg.uid {
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
func (g *Gateway) shmSync(ctx context.Context) error {
	var resp pb.SystemSharedMemoryStatusResponse
	if err := g.backend.Invoke(ctx, "/"+Service+"/SystemSharedMemoryStatus", &pb.SystemSharedMemoryStatusRequest{}, &resp); err != nil {
		return backendError(err)
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
