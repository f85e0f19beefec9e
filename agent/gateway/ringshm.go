package gateway

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/vig-edge/vig/proto/inference"
)

// RegisterShm registers name → (key, offset, size) with the backend as a Triton
// system shared-memory region on behalf of a peer of uid (a ring client whose
// request arena the backend is to read in place), and records it in vig's registry
// bound to that uid, as if the peer had registered it over the Unix socket: no
// other uid can use or unregister it through vig.
//
// Interim: it calls the backend over the gRPC connection; the backend interface
// of the inline pipeline takes it over.
func (g *Gateway) RegisterShm(ctx context.Context, name, key string, offset, size uint64, uid uint32) error {
	if g.backend == nil {
		return status.Errorf(codes.Unimplemented, "backend %s is a ring runtime: it has no system shared memory", g.opts.Config.Backend.Address)
	}
	if !validShmKey(key) {
		return status.Errorf(codes.InvalidArgument, "shared memory key %q must start with '/' and contain no other '/'", key)
	}
	req := &pb.SystemSharedMemoryRegisterRequest{Name: name, Key: key, Offset: offset, ByteSize: size}
	if err := g.backend.Invoke(ctx, methodShmRegister, req, new(pb.SystemSharedMemoryRegisterResponse)); err != nil {
		return backendError(err)
	}
	g.shm.mu.Lock()
	if g.shm.regions == nil {
		g.shm.regions = map[string]shmRegion{}
	}
	g.shm.regions[name] = shmRegion{key: key, offset: offset, size: size, uid: uid, bound: true}
	g.shm.mu.Unlock()
	return nil
}

// UnregisterShm undoes RegisterShm: vig forgets the region, then the backend does.
func (g *Gateway) UnregisterShm(ctx context.Context, name string) error {
	g.shm.mu.Lock()
	delete(g.shm.regions, name)
	g.shm.mu.Unlock()
	if g.backend == nil {
		return nil
	}
	req := &pb.SystemSharedMemoryUnregisterRequest{Name: name}
	if err := g.backend.Invoke(ctx, methodShmUnregister, req, new(pb.SystemSharedMemoryUnregisterResponse)); err != nil {
		return backendError(err)
	}
	return nil
}
