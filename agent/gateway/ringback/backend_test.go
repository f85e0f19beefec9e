package ringback

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
)

var addrSeq atomic.Uint64

// ringAddr is a fresh abstract socket name.
func ringAddr() string {
	return fmt.Sprintf("@vig-backend-test-%d-%d", os.Getpid(), addrSeq.Add(1))
}

// testRing sizes the ring for the test's largest frame (1.2 MB) and no more.
var testRing = shmring.Config{
	Requests:  shmring.RingConfig{Descriptors: 8, Slots: 4, SlotSize: 2 << 20},
	Responses: shmring.RingConfig{Descriptors: 8, Slots: 4, SlotSize: 4096},
}

// rig is vig (gateway + governor + ring backend) in front of a mock backend that
// serves its models over a ring; the mock's gRPC side is the gateway's connection
// for everything that is not inference.
type rig struct {
	mock     *mockbackend.Running
	ringAddr string
	serving  chan error // ServeRing's result
	ln       *shmring.Listener
	allowUn  bool
	b        *Backend
	gw       *gateway.Gateway
	c        pb.GRPCInferenceServiceClient
	states   chan bool
}

func newRig(t testing.TB) *rig {
	t.Helper()
	rb, err := shmring.Probe()
	if err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	cfg, err := config.Parse("ring-backend.yaml", []byte(`
listen: {metrics: "off"}
backend: {slots: 2, stats_interval_ms: -1}
models:
  det: {exec_ms: 1}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 60000}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{ringAddr: ringAddr(), allowUn: rb == shmring.BackendShmFile, states: make(chan bool, 64)}
	// The mock also serves models vig has no prior for: their requests pass the
	// scheduler ungoverned, at once and concurrently.
	mcfg := mockbackend.FromConfig(cfg)
	mcfg.Models = append(mcfg.Models, mockbackend.Model{Name: "other", Exec: time.Millisecond},
		mockbackend.Model{Name: "slow", Exec: 150 * time.Millisecond})
	mcfg.Spin = -1 // tests assert no timing: skip the calibration
	r.mock, err = mockbackend.Start(context.Background(), "127.0.0.1:0", mcfg, gateway.ServerOptions(cfg.GRPC), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.mock.Stop() })
	r.startRing(t)
	t.Cleanup(func() { r.stopRing(t) })

	r.b, err = New(r.ringAddr, Options{Config: testRing, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		ConfigKey: "backend.ring.slot_bytes"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.b.Close() })

	cfg.Backend.Address = r.mock.Addr()
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	var st netopt.Stats
	r.gw, err = gateway.New(gateway.Options{Config: cfg, Dial: st.DialAddr, Admit: gov, Backend: spy{r.b, r.states}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.b.WaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", &st)
	if err != nil {
		t.Fatal(err)
	}
	go r.gw.Serve(ln)
	t.Cleanup(r.gw.Stop)
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), append(gateway.DialOptions(cfg.GRPC),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(new(netopt.Stats).DialAddr))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	r.c = pb.NewGRPCInferenceServiceClient(cc)
	return r
}

// spy is the Backend, with the states the gateway is told copied to a channel.
type spy struct {
	*Backend
	states chan bool
}

func (s spy) Open(state func(bool)) {
	s.Backend.Open(func(up bool) { state(up); s.states <- up })
}

// startRing (re)starts the mock's ring listener on the rig's address.
func (r *rig) startRing(t testing.TB) {
	t.Helper()
	ln, err := shmring.Listen(r.ringAddr, shmring.ServerConfig{AllowUnsealed: r.allowUn})
	if err != nil {
		t.Fatal(err)
	}
	r.ln, r.serving = ln, make(chan error, 1)
	go func() { r.serving <- r.mock.ServeRing(ln) }()
}

// stopRing closes the mock's ring side: its sessions end.
func (r *rig) stopRing(t testing.TB) {
	t.Helper()
	if r.ln == nil {
		return
	}
	r.ln.Close()
	if err := <-r.serving; err != nil {
		t.Errorf("ServeRing: %v", err)
	}
	r.ln = nil
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed ^ byte(i*31+i>>8)
	}
	return b
}

func u8Input(name string, n int) *pb.ModelInferRequest_InferInputTensor {
	return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "UINT8", Shape: []int64{int64(n)}}
}

// request is what a sensor sends through vig: a frame of stream cam (det's stream; a
// request for another model names a stream of its own, since vig refuses a frame of
// cam for any model but det), with vig's own parameters (which vig removes before the
// ring).
func request(model string, frame uint64, in []byte) *pb.ModelInferRequest {
	stream := "cam"
	if model != "det" {
		stream = model + "-sensor"
	}
	return &pb.ModelInferRequest{
		ModelName: model, Id: mockbackend.FrameID("cam", frame),
		Parameters: map[string]*pb.InferParameter{
			"vig_stream":     {ParameterChoice: &pb.InferParameter_StringParam{StringParam: stream}},
			"vig_capture_ns": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: clock.Monotonic()}},
			"priority":       {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1}},
		},
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{u8Input("INPUT0", len(in))},
		RawInputContents: [][]byte{in},
	}
}

// checkOutput checks a response against the mock's model interface.
func checkOutput(t *testing.T, what string, resp *pb.ModelInferResponse, id string, inputs [][]byte, frame uint64) {
	t.Helper()
	if resp.Id != id || resp.ModelName == "" || len(resp.Outputs) != 1 || len(resp.RawOutputContents) != 1 {
		t.Fatalf("%s: response %v", what, resp)
	}
	o := resp.Outputs[0]
	if o.Name != "OUTPUT0" || o.Datatype != "INT64" || len(o.Shape) != 1 || o.Shape[0] != 2 {
		t.Errorf("%s: output %v", what, o)
	}
	raw := resp.RawOutputContents[0]
	if len(raw) != 16 {
		t.Fatalf("%s: output of %d bytes", what, len(raw))
	}
	if d, f := binary.LittleEndian.Uint64(raw), binary.LittleEndian.Uint64(raw[8:]); d != mockbackend.Digest(inputs) || f != frame {
		t.Errorf("%s: output (%x, %d), want (%x, %d)", what, d, f, mockbackend.Digest(inputs), frame)
	}
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msgHas string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code || !strings.Contains(st.Message(), msgHas) {
		t.Errorf("%s: %v, want %v containing %q", what, err, code, msgHas)
	}
}

// gRPC client → vig (gateway, governor) → ring → mock backend → back, for frames
// of 0 B, 150 KB and 1.2 MB.
func TestThroughVig(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for i, size := range []int{0, 150_000, 1_200_000} {
		in := pattern(size, byte(i))
		resp, err := r.c.ModelInfer(ctx, request("det", uint64(i), in))
		if err != nil {
			t.Fatalf("%d B: %v", size, err)
		}
		checkOutput(t, fmt.Sprintf("%d B", size), resp, mockbackend.FrameID("cam", uint64(i)), [][]byte{in}, uint64(i))
	}

	// Several tensors with their own types and shapes; requested outputs; a
	// version; an id that names no frame.
	a, b := pattern(24, 1), pattern(10, 2)
	req := &pb.ModelInferRequest{ModelName: "det", ModelVersion: "1", Id: "no-frame",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "A", Datatype: "FP32", Shape: []int64{2, 3}}, u8Input("B", 10)},
		Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}},
		RawInputContents: [][]byte{a, b},
	}
	resp, err := r.c.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ModelVersion != "1" || len(resp.RawOutputContents) != 1 || binary.LittleEndian.Uint64(resp.RawOutputContents[0]) != mockbackend.Digest([][]byte{a, b}) {
		t.Errorf("two tensors: %v", resp)
	}

	// The statistics are the mock's own: ring requests count like gRPC ones.
	st, err := r.c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "det"})
	if err != nil {
		t.Fatal(err)
	}
	if n := st.ModelStats[0].InferenceCount; n != 4 {
		t.Errorf("backend counted %d inferences, want 4", n)
	}

	// ModelStreamInfer goes over the ring too.
	stream, err := r.c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One frame at a time: cam is a LATEST stream, and a frame sent while the one
	// before it waits for the slot supersedes it (which a loaded machine made happen).
	got := map[string]bool{}
	for i := range 3 {
		if err := stream.Send(request("det", uint64(10+i), pattern(1000, byte(i)))); err != nil {
			t.Fatal(err)
		}
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.ErrorMessage != "" {
			t.Fatalf("stream: %s", m.ErrorMessage)
		}
		got[m.InferResponse.Id] = true
	}
	stream.CloseSend()
	if len(got) != 3 {
		t.Errorf("stream answers %v", got)
	}
}

// Errors reach the client as gRPC codes, whether the runtime or vig's ring side
// produced them; the session goes on.
func TestErrors(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	badSize := request("det", 1, make([]byte, 15))
	badSize.Inputs[0] = &pb.ModelInferRequest_InferInputTensor{Name: "A", Datatype: "FP32", Shape: []int64{4}}
	contents := request("det", 2, nil)
	contents.RawInputContents = nil
	contents.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1, 2}}
	longName := request("det", 3, []byte{1})
	longName.Inputs[0].Name = strings.Repeat("n", shmring.MaxTensorName+1)
	seven := request("det", 4, nil)
	seven.Inputs, seven.RawInputContents = nil, nil
	for i := range shmring.MaxTensors + 1 {
		seven.Inputs = append(seven.Inputs, u8Input(fmt.Sprint("I", i), 1))
		seven.RawInputContents = append(seven.RawInputContents, []byte{byte(i)})
	}
	unknownOut := request("det", 5, []byte{1})
	unknownOut.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "BOXES"}}
	for _, tc := range []struct {
		name   string
		req    *pb.ModelInferRequest
		code   codes.Code
		msgHas string
	}{
		{"unknown model", request("nope", 1, []byte{1}), codes.NotFound, "nope"},
		{"byte size", badSize, codes.InvalidArgument, "byte size"},
		{"larger than a slot", request("det", 6, make([]byte, 2<<20+1)), codes.ResourceExhausted, "2097152-byte request slots"},
		{"contents", contents, codes.Unimplemented, "raw_input_contents"},
		{"long tensor name", longName, codes.InvalidArgument, "at most 96"},
		{"seventeen inputs", seven, codes.InvalidArgument, "at most 16"},
		{"unknown output", unknownOut, codes.InvalidArgument, "BOXES"},
		{"long stream", func() *pb.ModelInferRequest {
			r := request("det", 8, []byte{1})
			r.Id = strings.Repeat("s", shmring.MaxStreamLen+1) + "#8"
			return r
		}(), codes.InvalidArgument, "longer than a ring's 56 bytes"},
	} {
		_, err := r.c.ModelInfer(ctx, tc.req)
		wantCode(t, tc.name, err, tc.code, tc.msgHas)
	}
	_, err := r.c.ModelInfer(ctx, request("det", 6, make([]byte, 2<<20+1)))
	wantCode(t, "slot message names the setting", err, codes.ResourceExhausted, "backend.ring.slot_bytes")
	in := []byte("still fine")
	resp, err := r.c.ModelInfer(ctx, request("det", 7, in))
	if err != nil {
		t.Fatal(err)
	}
	checkOutput(t, "after errors", resp, "cam#7", [][]byte{in}, 7)
}

// busy is the room in use.
func (s *session) busy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight
}

// pendingCalls is how many requests wait on the current session.
func (b *Backend) pendingCalls() int {
	s := b.cur.Load()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a hang guard, not a timing claim
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A request cancelled while the runtime works on it ends at once with CANCELED
// for its client; its late result is released, and its slot and room come back.
func TestCancel(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.c.ModelInfer(ctx, request("slow", 1, pattern(100_000, 1)))
		errc <- err
	}()
	waitFor(t, "the request to reach the ring", func() bool { return r.b.pendingCalls() == 1 })
	cancel()
	wantCode(t, "cancelled", <-errc, codes.Canceled, "")
	s := r.b.cur.Load()
	waitFor(t, "the late result to be dropped", func() bool { return r.b.pendingCalls() == 0 && s.busy() == 0 })
	if held := s.s.Responses.Held(); held != 0 {
		t.Errorf("%d response slots still held after the late result", held)
	}
	// Every slot is usable again: as many concurrent requests as the ring allows.
	var wg sync.WaitGroup
	for i := range s.room {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := pattern(1000, byte(i))
			resp, err := r.c.ModelInfer(context.Background(), request("other", uint64(100+i), in))
			if err != nil {
				t.Error(err)
				return
			}
			checkOutput(t, "after cancel", resp, mockbackend.FrameID("cam", uint64(100+i)), [][]byte{in}, uint64(100+i))
		}()
	}
	wg.Wait()
}

// Requests that give up at random moments — before the ring, waiting for a token,
// in the runtime — leave nothing behind: every slot and token comes back, and
// the others get their own results.
func TestCancelStorm(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	var ok, cancelled atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				frame := uint64(g*1000 + i)
				in := pattern(50_000+i, byte(frame))
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g*7+i*13)%40)*time.Millisecond/2)
				resp, err := r.c.ModelInfer(ctx, request("other", frame, in))
				cancel()
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
					checkOutput(t, "storm", resp, mockbackend.FrameID("cam", frame), [][]byte{in}, frame)
				case codes.Canceled, codes.DeadlineExceeded:
					cancelled.Add(1)
				default:
					t.Errorf("frame %d: %v", frame, err)
				}
			}
		}()
	}
	wg.Wait()
	s := r.b.cur.Load()
	waitFor(t, "every late result to be dropped", func() bool {
		return r.b.pendingCalls() == 0 && s.busy() == 0 && s.s.Responses.Held() == 0
	})
	t.Logf("%d answered, %d gave up", ok.Load(), cancelled.Load())
	in := []byte("after the storm")
	resp, err := r.c.ModelInfer(context.Background(), request("other", 1, in))
	if err != nil {
		t.Fatal(err)
	}
	checkOutput(t, "after the storm", resp, "cam#1", [][]byte{in}, 1)
}

// Concurrent requests share the session; results, which the runtime finishes in
// any order, reach their own callers.
func TestConcurrent(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				frame := uint64(g*100 + i)
				in := pattern(1000+g*4096+i, byte(frame))
				resp, err := r.c.ModelInfer(context.Background(), request("other", frame, in))
				if err != nil {
					t.Error(err)
					return
				}
				checkOutput(t, fmt.Sprint("caller ", g), resp, mockbackend.FrameID("cam", frame), [][]byte{in}, frame)
			}
		}()
	}
	wg.Wait()
}

// A runtime that goes away mid-request: the request fails UNAVAILABLE, so do
// requests while it is away, and vig reconnects when it is back.
func TestBackendGoesAway(t *testing.T) {
	r := newRig(t)
	if up := <-r.states; !up {
		t.Fatalf("first state %v", up)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := r.c.ModelInfer(context.Background(), request("slow", 1, pattern(150_000, 1)))
		errc <- err
	}()
	waitFor(t, "the request to reach the ring", func() bool { return r.b.pendingCalls() == 1 })
	r.ln.Close() // the runtime's sessions end; its job in flight is lost
	wantCode(t, "in flight", <-errc, codes.Unavailable, "session ended")
	if up := <-r.states; up {
		t.Fatal("state did not go down")
	}
	if err := <-r.serving; err != nil {
		t.Errorf("ServeRing: %v", err)
	}
	r.ln = nil
	_, err := r.c.ModelInfer(context.Background(), request("det", 2, []byte{1}))
	wantCode(t, "while down", err, codes.Unavailable, "") // the scheduler knows the backend is down and answers at once

	r.startRing(t)
	for up := range r.states {
		if up {
			break
		}
	}
	in := pattern(1_200_000, 3)
	resp, err := r.c.ModelInfer(context.Background(), request("det", 3, in))
	if err != nil {
		t.Fatal(err)
	}
	checkOutput(t, "after reconnecting", resp, "cam#3", [][]byte{in}, 3)
}
