package gateway_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	pb "github.com/vig-edge/vig/proto/inference"
)

// A region vig registered for a ring session (RegisterShm) is registered again
// when the backend comes back from a restart that made it forget: the ring's
// by-reference frames keep working. A client's own registration is not
// re-made by vig (the client registers again, as it would without vig).
func TestRingRegionSurvivesBackendRestart(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine: %v", err)
	}
	e := startEnv(t, testConfig(t, ""), true)
	addr := e.backend.Addr()
	ctx := ctxT(t)
	key := fmt.Sprintf("/vig-rering-%d-%d", os.Getpid(), time.Now().UnixNano())
	if err := os.WriteFile("/dev/shm"+key, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/dev/shm" + key) })
	if err := e.gw.RegisterShm(ctx, "ring-0", key, 0, 8192, uint32(os.Getuid())); err != nil {
		t.Fatalf("RegisterShm: %v", err)
	}
	client := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	if _, err := client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "client-0", Key: key, ByteSize: 4096}); err != nil {
		t.Fatalf("a client's register: %v", err)
	}

	e.backend.Stop()
	mb, err := mockbackend.Start(context.Background(), addr, mockbackend.FromConfig(e.cfg), gateway.ServerOptions(e.cfg.GRPC), nil)
	if err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	t.Cleanup(func() { mb.Stop() })
	direct := pb.NewGRPCInferenceServiceClient(e.dial(t, addr))
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := direct.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
		if err != nil {
			t.Fatalf("status from the restarted backend: %v", err)
		}
		if r, ok := st.Regions["ring-0"]; ok {
			if r.GetKey() != key || r.GetByteSize() != 8192 {
				t.Fatalf("re-registered as %v, want key %s, 8192 bytes", r, key)
			}
			if _, ok := st.Regions["client-0"]; ok {
				t.Errorf("vig registered a client's region on its behalf: %v", st.Regions)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted backend never got the ring's region back (regions: %v)", st.Regions)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
