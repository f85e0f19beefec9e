package ringfront_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/gateway/ringback"
	"github.com/vig-edge/vig/agent/gateway/ringfront"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/shmring/client"
)

var seq atomic.Uint64

func ringAddr(what string) string {
	return fmt.Sprintf("@vig-ringfront-test-%s-%d-%d", what, os.Getpid(), seq.Add(1))
}

const testConfig = `
backend: {slots: 1, stats_interval_ms: -1}
models:
  det: {exec_ms: 1}
  cam_detector: {exec_ms: 1}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 5000}
`

// rigConfig is the configuration a rig starts with.
var rigConfig = testConfig

// countingConn counts the bytes vig writes to the backend connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// rig is vig (governor, gateway, ring frontend) in front of the mock backend,
// reached over gRPC, or over a ring when viaRing is set.
type rig struct {
	mock   *mockbackend.Running
	fe     *ringfront.Frontend
	addr   string // the ring frontend's
	toBack atomic.Int64
	rb     *ringback.Backend // with viaRing
}

// rigNoSharedFrames makes the next rigs' ring backend copy every frame
// (backend.ring.share_frames: false). The package's tests run one at a time.
var rigNoSharedFrames bool

func newRig(t *testing.T, viaRing bool, srv shmring.ServerConfig) *rig {
	return newRigTB(t, viaRing, srv)
}

func newRigB(b *testing.B, srv shmring.ServerConfig) *rig { return newRigTB(b, false, srv) }

func newRigTB(t testing.TB, viaRing bool, srv shmring.ServerConfig) *rig {
	t.Helper()
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	cfg, err := config.Parse("ring.yaml", []byte(rigConfig))
	if err != nil {
		t.Fatal(err)
	}
	mcfg := mockbackend.FromConfig(cfg)
	mcfg.Spin = -1 // tests assert no timing: skip the calibration
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mcfg, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Stop() })
	r := &rig{mock: mb}
	var backend gateway.Backend
	if viaRing {
		ln, err := shmring.Listen(ringAddr("runtime"), shmring.ServerConfig{AllowUnsealed: true})
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- mb.ServeRing(ln) }()
		t.Cleanup(func() { ln.Close(); <-served })
		rb, err := ringback.New(ln.Addr(), ringback.Options{MinBackoff: 5 * time.Millisecond, NoSharedFrames: rigNoSharedFrames})
		if err != nil {
			t.Fatal(err)
		}
		backend, r.rb = rb, rb
		cfg.Backend.Address = "ring:" + ln.Addr()
		defer func() {
			if err := rb.WaitUp(context.Background()); err != nil {
				t.Fatal(err)
			}
		}()
	} else {
		cfg.Backend.Address = mb.Addr()
	}
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	var st netopt.Stats
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := st.DialAddr(ctx, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &r.toBack}, nil
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: dial, Admit: gov, Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	ln, err := shmring.Listen(ringAddr("front"), srv)
	if err != nil {
		t.Fatal(err)
	}
	r.fe = ringfront.New(ln, gw, ringfront.Options{})
	r.addr = ln.Addr()
	go r.fe.Serve()
	t.Cleanup(r.fe.Close)
	return r
}

func (r *rig) dial(t *testing.T, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.Dial(r.addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// send posts one frame of n bytes and checks its result with check (given the
// frame's digest), then releases it.
func send(t *testing.T, c *client.Client, model string, frame uint64, n int, check func(*testing.T, *client.Result, uint64, uint64)) {
	t.Helper()
	f, err := c.Loan()
	if err != nil {
		t.Fatal(err)
	}
	data := f.Bytes()[:n]
	for j := range data {
		data[j] = byte(frame) + byte(j*7)
	}
	digest := mockbackend.Digest([][]byte{data})
	stream := "" // the model's name
	if model == "det" {
		stream = "cam"
	}
	if _, err := c.Submit(f, &client.Request{Stream: stream, Model: model, Frame: frame, CaptureNs: clock.Monotonic(), Len: n}); err != nil {
		t.Fatal(err)
	}
	var r client.Result
	if err := c.Next(&r); err != nil {
		t.Fatal(err)
	}
	defer c.Release(&r)
	if err := r.Err(); err != nil {
		t.Fatalf("frame %d: %v", frame, err)
	}
	check(t, &r, digest, frame)
}

// sendTwo posts a frame of two tensors (UINT8 [1000] at 0, FP32 [2,3] at 4096)
// and checks that the backend saw exactly their bytes, in order.
func sendTwo(t *testing.T, c *client.Client, frame uint64) {
	t.Helper()
	f, err := c.Loan()
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Bytes()[:1000], f.Bytes()[4096:4096+24]
	for i := range a {
		a[i] = byte(i) + byte(frame)
	}
	for i := range b {
		b[i] = byte(100-i) + byte(frame)
	}
	req := client.Request{Stream: "cam", Model: "det", Frame: frame, Len: 4096 + 24, NumTensors: 2}
	req.Tensors[0] = shmring.Tensor{Name: "A", Datatype: "UINT8", Rank: 1, Dims: [shmring.MaxRank]int64{1000}, Length: 1000}
	req.Tensors[1] = shmring.Tensor{Name: "B", Datatype: "FP32", Rank: 2, Dims: [shmring.MaxRank]int64{2, 3}, Offset: 4096, Length: 24}
	want := mockbackend.Digest([][]byte{append([]byte(nil), a...), append([]byte(nil), b...)})
	if _, err := c.Submit(f, &req); err != nil {
		t.Fatal(err)
	}
	var res client.Result
	if err := c.Next(&res); err != nil {
		t.Fatal(err)
	}
	defer c.Release(&res)
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	checkOutput0(t, &res, want, frame)
}

// checkOutput0 checks the mock's OUTPUT0 (INT64 [2] = digest, frame).
func checkOutput0(t *testing.T, r *client.Result, digest, frame uint64) {
	t.Helper()
	if r.NumOutputs() != 1 {
		t.Fatalf("frame %d: %d outputs, want 1", frame, r.NumOutputs())
	}
	o, p := r.Output(0)
	if o.Name != "OUTPUT0" || o.Datatype != "INT64" || !slices.Equal(o.Shape(), []int64{2}) || len(p) != 16 ||
		binary.LittleEndian.Uint64(p) != digest || binary.LittleEndian.Uint64(p[8:]) != frame {
		t.Errorf("frame %d: output %+v %x, want OUTPUT0 INT64 [2] (%x, %d)", frame, o, p, digest, frame)
	}
}

// checkDetector checks a detector's three outputs: names, datatypes, shapes and
// bytes, each at a 64-byte aligned offset.
func checkDetector(t *testing.T, r *client.Result, digest, frame uint64) {
	t.Helper()
	want := mockbackend.DetectorOutputs(digest, frame)
	if r.NumOutputs() != len(want) {
		t.Fatalf("frame %d: %d outputs, want %d", frame, r.NumOutputs(), len(want))
	}
	for i, w := range want {
		o, p := r.Output(i)
		if o.Name != w.Name || o.Datatype != w.Datatype || !slices.Equal(o.Shape(), w.Shape) || !bytes.Equal(p, w.Data) {
			t.Errorf("frame %d output %d: %s %s %v %x, want %s %s %v %x", frame, i, o.Name, o.Datatype, o.Shape(), p, w.Name, w.Datatype, w.Shape, w.Data)
		}
		if o.Offset%64 != 0 {
			t.Errorf("output %s at offset %d, not 64-aligned", o.Name, o.Offset)
		}
	}
}

// A sensor posts frames on its ring; they go through the scheduler to the
// backend, over gRPC or over a ring, and every output comes back with its name,
// datatype and shape: OUTPUT0 of the plain model, boxes/scores/classes of the
// detector.
func TestRingAnswersWhole(t *testing.T) {
	for _, viaRing := range []bool{false, true} {
		t.Run(map[bool]string{false: "grpc-backend", true: "ring-backend"}[viaRing], func(t *testing.T) {
			r := newRig(t, viaRing, shmring.ServerConfig{AllowUnsealed: true})
			for _, b := range []shmring.Backend{shmring.BackendAuto, shmring.BackendShmFile} {
				c := r.dial(t, client.Options{Backend: b})
				for i := range 3 {
					send(t, c, "det", uint64(i), 4096*(i+1), checkOutput0)
					send(t, c, "cam_detector", uint64(10+i), 1000+i, checkDetector)
				}
				sendTwo(t, c, 20)
				// A model the backend does not serve comes back as the backend's status.
				f, err := c.Loan()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Submit(f, &client.Request{Stream: "x", Model: "nope", Frame: 1, Len: 8}); err != nil {
					t.Fatal(err)
				}
				var res client.Result
				if err := c.Next(&res); err != nil {
					t.Fatal(err)
				}
				if res.Status != shmring.StatusNotFound {
					t.Errorf("unknown model: status %v (%s), want NOT_FOUND", res.Status, res.Message)
				}
				c.Release(&res)
				if byRef, copied := r.fe.Sessions(); byRef != 0 || copied != 1 {
					t.Errorf("sessions by reference %d, copy %d; want 0, 1", byRef, copied)
				}
				c.Close()
			}
		})
	}
}

// A sealed memfd session in front of a ring runtime: vig hands the runtime the
// client's memfd (a shmring extra region) and each frame's offsets, and the
// runtime reads the client's bytes in place: the mock runtime's digest of the
// frame comes back right while vig's copy counter stays 0. An unsealed /dev/shm
// client cannot be handed over (the runtime would map a file its owner can
// truncate): its frames are copied, and counted.
func TestMemfdToRingRuntimeByReference(t *testing.T) {
	if b, err := shmring.Probe(); err != nil || b != shmring.BackendMemfd {
		t.Skipf("no sealed memfd on this machine (%v, %v)", b, err)
	}
	r := newRig(t, true, shmring.ServerConfig{AllowUnsealed: true})
	c := r.dial(t, client.Options{Backend: shmring.BackendMemfd})
	for i := range 5 {
		send(t, c, "det", uint64(i), 1000*(i+1), checkOutput0)
	}
	sendTwo(t, c, 9)
	if n := r.rb.CopiedBytes(); n != 0 {
		t.Errorf("vig copied %d bytes of memfd frames into its region, want 0 (by reference)", n)
	}
	c.Close()
	// A second memfd client after the first left: its region is added anew.
	c2 := r.dial(t, client.Options{Backend: shmring.BackendMemfd})
	send(t, c2, "det", 20, 4096, checkOutput0)
	if n := r.rb.CopiedBytes(); n != 0 {
		t.Errorf("second client: vig copied %d bytes, want 0", n)
	}
	shm := r.dial(t, client.Options{Backend: shmring.BackendShmFile})
	send(t, shm, "det", 30, 4096, checkOutput0)
	if n := r.rb.CopiedBytes(); n != 4096 {
		t.Errorf("unsealed /dev/shm client: vig copied %d bytes, want the frame's 4096", n)
	}
}

// With backend.ring.share_frames: false (a runtime without extra regions), a
// sealed memfd frame is copied into vig's ring instead, and still answered right.
func TestMemfdToRingRuntimeCopied(t *testing.T) {
	if b, err := shmring.Probe(); err != nil || b != shmring.BackendMemfd {
		t.Skipf("no sealed memfd on this machine (%v, %v)", b, err)
	}
	rigNoSharedFrames = true
	defer func() { rigNoSharedFrames = false }()
	r := newRig(t, true, shmring.ServerConfig{AllowUnsealed: true})
	c := r.dial(t, client.Options{Backend: shmring.BackendMemfd})
	send(t, c, "det", 1, 4096, checkOutput0)
	if n := r.rb.CopiedBytes(); n != 4096 {
		t.Errorf("vig copied %d bytes of a 4096-byte memfd frame with shared frames off, want 4096", n)
	}
}

// A keyed /dev/shm region and a backend that maps Triton system shared memory:
// the backend reads each frame in place. What vig writes to the backend per
// request does not grow with the frame: the frame never crosses the socket.
func TestByReference(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine (Android): by-reference forwarding needs it: %v", err)
	}
	r := newRig(t, false, shmring.ServerConfig{AllowShmKey: true})
	c := r.dial(t, client.Options{Backend: shmring.BackendShmKey})
	send(t, c, "det", 0, 16, checkOutput0) // connects the backend and warms up
	if byRef, copied := r.fe.Sessions(); byRef != 1 || copied != 0 {
		t.Fatalf("sessions by reference %d, copy %d; want 1, 0", byRef, copied)
	}
	var perRequest []int64
	for i, n := range []int{0, 150_000, 1_200_000, 6_200_000} {
		frame := uint64(i + 1)
		before := r.toBack.Load()
		// The digest proves the backend read the frame's bytes, from the region.
		send(t, c, "det", frame, n, checkOutput0)
		perRequest = append(perRequest, r.toBack.Load()-before)
		send(t, c, "cam_detector", frame+100, n, checkDetector)
	}
	t.Logf("bytes vig wrote to the backend per request, 0 B / 150 KB / 1.2 MB / 6.2 MB: %v", perRequest)
	for i, n := range perRequest {
		// One request of a few hundred bytes of header, plus HTTP/2 framing;
		// nothing near the 150 KB of the smallest frame.
		if n > 2048 {
			t.Errorf("size %d: vig wrote %d bytes to the backend: the frame went through the socket", i, n)
		}
	}
	if d := perRequest[3] - perRequest[0]; d > 256 || d < -256 {
		t.Errorf("bytes per request grew by %d from 0 B to 6.2 MB", d)
	}

	// Several tensors of one frame, each referenced at its own offset.
	sendTwo(t, c, 60)

	// The region is registered with the backend while the session lasts, and
	// unregistered when it ends.
	cc, err := grpc.NewClient("passthrough:///"+r.mock.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	regions := func() int {
		st, err := pb.NewGRPCInferenceServiceClient(cc).SystemSharedMemoryStatus(context.Background(), &pb.SystemSharedMemoryStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Regions)
	}
	if n := regions(); n != 1 {
		t.Errorf("%d regions registered with the backend during the session, want 1", n)
	}
	defer func() {
		c.Close()
		deadline := time.Now().Add(10 * time.Second) // a hang guard, not a timing claim
		for regions() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the session's region is still registered with the backend after the session ended")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// The copy path for comparison: an unkeyed region carries the frame in the message.
	c2 := r.dial(t, client.Options{Backend: shmring.BackendMemfd})
	before := r.toBack.Load()
	send(t, c2, "det", 50, 1_200_000, checkOutput0)
	if n := r.toBack.Load() - before; n < 1_200_000 {
		t.Errorf("copy path wrote %d bytes for a 1.2 MB frame", n)
	}
	if byRef, copied := r.fe.Sessions(); byRef != 1 || copied != 1 {
		t.Errorf("sessions by reference %d, copy %d; want 1, 1", byRef, copied)
	}
}
