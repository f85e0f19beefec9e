package gateway

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

// RegisterShm registers name → (key, offset, size) with the backend as a Triton
// system shared-memory region on behalf of a peer of uid (a ring client whose
// request arena the backend is to read in place), and records it in vig's registry
// bound to that uid, as if the peer had registered it over the Unix socket: no
// other uid can use or unregister it through vig.
func (g *Gateway) RegisterShm(ctx context.Context, name, key string, offset, size uint64, uid uint32) error {
	if g.relay == nil {
		return status.Errorf(codes.Unimplemented, "backend %s is a ring runtime: it has no system shared memory", g.opts.Config.Backend.Address)
	}
	if !validShmKey(key) {
		return status.Errorf(codes.InvalidArgument, "shared memory key %q must start with '/' and contain no other '/'", key)
	}
	req, _ := proto.Marshal(&pb.SystemSharedMemoryRegisterRequest{Name: name, Key: key, Offset: offset, ByteSize: size})
	if _, err := g.Invoke(ctx, methodShmRegister, req); err != nil {
		return err
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
	if g.relay == nil {
		return nil
	}
	req, _ := proto.Marshal(&pb.SystemSharedMemoryUnregisterRequest{Name: name})
	_, err := g.Invoke(ctx, methodShmUnregister, req)
	return err
}
