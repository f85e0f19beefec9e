package gateway

import (
	"context"
	"time"

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
	g.shm.regions[name] = shmRegion{key: key, offset: offset, size: size, uid: uid, bound: true, own: true}
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

// reregisterShm registers again, on a new backend connection, the regions vig
// registered itself: a backend that restarted (Triton keeps its registrations in
// memory) has forgotten them, and every ring frame forwarded by reference would
// fail until the ring session ended. A backend that still has them answers
// ALREADY_EXISTS, which is what vig wants. Regions that clients registered are
// theirs to register again, as they would be without vig.
func (g *Gateway) reregisterShm() {
	g.shm.mu.RLock()
	var own []pb.SystemSharedMemoryRegisterRequest
	for name, r := range g.shm.regions {
		if r.own {
			own = append(own, pb.SystemSharedMemoryRegisterRequest{Name: name, Key: r.key, Offset: r.offset, ByteSize: r.size})
		}
	}
	g.shm.mu.RUnlock()
	again := 0
	for i := range own {
		req, _ := proto.Marshal(&own[i])
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := g.Invoke(ctx, methodShmRegister, req)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			again++
		case codes.AlreadyExists:
		default:
			g.log.Warn("ring region: cannot register it again with the backend after reconnecting; frames of its session will fail",
				"region", own[i].Name, "key", own[i].Key, "err", err)
		}
	}
	if again > 0 {
		g.log.Info("backend had forgotten vig's ring regions (restarted?): registered them again", "regions", again)
	}
}
