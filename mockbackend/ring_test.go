package mockbackend

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/shmring/client"
)

var ringSeq atomic.Uint64

// serveRing starts a backend with both a gRPC and a ring listener; ServeRing's
// result is checked at cleanup.
func serveRing(t *testing.T, cfg Config) (*Running, inference.GRPCInferenceServiceClient, *shmring.Listener) {
	t.Helper()
	b, err := shmring.Probe()
	if err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	addr := fmt.Sprintf("@vig-mock-ring-%d-%d", os.Getpid(), ringSeq.Add(1))
	ln, err := shmring.Listen(addr, shmring.ServerConfig{AllowUnsealed: b == shmring.BackendShmFile})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.ServeRing(ln) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeRing: %v", err)
		}
	})
	return r, c, ln
}

func dialRing(t *testing.T, ln *shmring.Listener) *client.Client {
	t.Helper()
	c, err := client.Dial(ln.Addr(), client.Options{Config: shmring.Config{
		Requests:  shmring.RingConfig{Descriptors: 8, Slots: 4, SlotSize: 2 << 20},
		Responses: shmring.RingConfig{Descriptors: 8, Slots: 4, SlotSize: 4096},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// submit posts one frame made of the given tensors and waits for its result.
func submit(t *testing.T, c *client.Client, r client.Request, tensors ...[]byte) client.Result {
	t.Helper()
	f, err := c.Loan()
	if err != nil {
		t.Fatal(err)
	}
	r.Len = 0
	for _, b := range tensors {
		n := copy(f.Bytes()[r.Len:], b)
		r.Len += n
	}
	if _, err := c.Submit(f, &r); err != nil {
		t.Fatal(err)
	}
	var res client.Result
	if err := c.Next(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// A ring request does the work of the gRPC request with the same stream, frame and
// inputs: same output, same execution, counted in the same statistics.
func TestRingMatchesGRPC(t *testing.T) {
	r, gc, ln := serveRing(t, models())
	c := dialRing(t, ln)
	ctx := context.Background()
	for _, size := range []int{0, 1, 150_000, 1_200_000} {
		in := pattern(size, byte(size))
		res := submit(t, c, client.Request{Stream: "cam", Model: "detector", Frame: 42}, in)
		if err := res.Err(); err != nil {
			t.Fatalf("%d B: %v", size, err)
		}
		if res.NumTensors != 1 || res.Tensors[0].Name != OutputName || res.Tensors[0].Datatype != outputDatatype ||
			res.Tensors[0].Rank != 1 || res.Tensors[0].Dims[0] != 2 || res.Tensors[0].Length != outputBytes {
			t.Errorf("%d B: output tensor %+v", size, res.Tensors[:res.NumTensors])
		}
		ringOut := append([]byte(nil), res.Payload()...)
		c.Release(&res)
		gr, err := gc.ModelInfer(ctx, rawRequest("detector", "cam#42", in))
		if err != nil {
			t.Fatal(err)
		}
		if string(ringOut) != string(gr.RawOutputContents[0]) {
			t.Errorf("%d B: ring output %x, gRPC output %x", size, ringOut, gr.RawOutputContents[0])
		}
		if d, f := decodeOutput(t, ringOut); d != Digest([][]byte{in}) || f != 42 {
			t.Errorf("%d B: output (%x, %d), want (%x, 42)", size, d, f, Digest([][]byte{in}))
		}
	}
	st, err := r.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "detector"})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.ModelStats[0].InferenceCount; got != 8 {
		t.Errorf("inference_count %d after 4 ring and 4 gRPC requests, want 8", got)
	}

	// An empty stream is the model's, as for a gRPC id without a frame.
	res := submit(t, c, client.Request{Model: "vlm", Frame: 7}, []byte("x"))
	if d, f := decodeOutput(t, res.Payload()); res.Err() != nil || f != 7 || d != Digest([][]byte{[]byte("x")}) {
		t.Errorf("empty stream: %v, output (%x, %d)", res.Err(), d, f)
	}
	c.Release(&res)
}

// Tensor records become the request's inputs, with their names, types and shapes.
func TestRingTensors(t *testing.T) {
	_, _, ln := serveRing(t, models())
	c := dialRing(t, ln)
	a, b := pattern(24, 1), pattern(10, 2)
	req := client.Request{Stream: "cam", Model: "detector", Frame: 1, NumTensors: 2}
	req.Tensors[0] = shmring.Tensor{Name: "A", Datatype: "FP32", Rank: 2, Dims: [shmring.MaxRank]int64{2, 3}, Length: 24}
	req.Tensors[1] = shmring.Tensor{Name: "B", Datatype: "UINT8", Rank: 1, Dims: [shmring.MaxRank]int64{10}, Offset: 24, Length: 10}
	res := submit(t, c, req, a, b)
	if d, _ := decodeOutput(t, res.Payload()); res.Err() != nil || d != Digest([][]byte{a, b}) {
		t.Errorf("two tensors: %v, digest %x, want %x", res.Err(), d, Digest([][]byte{a, b}))
	}
	c.Release(&res)
}

// Errors come back as the gRPC code of the same error, and the ring goes on.
func TestRingErrors(t *testing.T) {
	_, _, ln := serveRing(t, models())
	c := dialRing(t, ln)
	fp32 := client.Request{Stream: "s", Model: "detector", NumTensors: 1}
	fp32.Tensors[0] = shmring.Tensor{Name: "A", Datatype: "FP32", Rank: 1, Dims: [shmring.MaxRank]int64{4}, Length: 15}
	outside := client.Request{Stream: "s", Model: "detector", NumTensors: 1}
	outside.Tensors[0] = shmring.Tensor{Name: "A", Datatype: "UINT8", Rank: 1, Dims: [shmring.MaxRank]int64{8}, Offset: math.MaxUint64 - 2, Length: 8}
	for _, tc := range []struct {
		name string
		req  client.Request
		want shmring.Status
	}{
		{"unknown model", client.Request{Stream: "s", Model: "nope"}, shmring.StatusNotFound},
		{"byte size", fp32, shmring.StatusInvalid},
		{"tensor outside the frame", outside, shmring.StatusInvalid},
	} {
		res := submit(t, c, tc.req, pattern(16, 0))
		if res.Status != tc.want || res.Message == "" {
			t.Errorf("%s: status %v (%q), want %v", tc.name, res.Status, res.Message, tc.want)
		}
		c.Release(&res)
	}
	res := submit(t, c, client.Request{Stream: "s", Model: "detector", Frame: 3}, []byte("ok"))
	if res.Err() != nil {
		t.Errorf("after errors: %v", res.Err())
	}
	c.Release(&res)
}

// Requests from one client run concurrently, bounded by the slots, and each
// answer carries its own tag.
func TestRingConcurrent(t *testing.T) {
	cfg := models()
	cfg.Slots = 2
	_, _, ln := serveRing(t, cfg)
	c := dialRing(t, ln)
	want := map[uint64]uint64{}
	for i := range 4 {
		f, err := c.Loan()
		if err != nil {
			t.Fatal(err)
		}
		in := pattern(1000+i, byte(i))
		n := copy(f.Bytes(), in)
		tag, err := c.Submit(f, &client.Request{Stream: "cam", Model: "detector", Frame: uint64(i), Len: n})
		if err != nil {
			t.Fatal(err)
		}
		want[tag] = Digest([][]byte{in})
	}
	for range 4 {
		var res client.Result
		if err := c.Next(&res); err != nil {
			t.Fatal(err)
		}
		if d, _ := decodeOutput(t, res.Payload()); res.Err() != nil || d != want[res.Tag] {
			t.Errorf("tag %d: %v, digest %x, want %x", res.Tag, res.Err(), d, want[res.Tag])
		}
		delete(want, res.Tag)
		c.Release(&res)
	}
}

// Closing the listener ends the sessions: a request waiting for a slot leaves the
// queue unanswered, the running one finishes, the client sees its session end, and
// ServeRing returns.
func TestRingStop(t *testing.T) {
	b, err := shmring.Probe()
	if err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	s, err := New(Config{Models: []Model{{Name: "m", Exec: time.Millisecond}}, Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hold := make(chan struct{})
	granted := make(chan string, 2)
	s.grantHook.Store(ptr(func(id string, _ grant) {
		granted <- id
		<-hold // keeps the slot
	}))
	ln, err := shmring.Listen(fmt.Sprintf("@vig-mock-ring-%d-%d", os.Getpid(), ringSeq.Add(1)), shmring.ServerConfig{AllowUnsealed: b == shmring.BackendShmFile})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.ServeRing(ln) }()
	c := dialRing(t, ln)
	for i := range 2 {
		f, err := c.Loan()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Submit(f, &client.Request{Stream: "cam", Model: "m", Frame: uint64(i), Len: 1}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if id := <-granted; id != "cam#0" {
				t.Fatalf("first grant %q", id)
			}
		}
	}
	waitQueued(t, s.slots, 1)
	ln.Close()
	<-c.Done()
	waitQueued(t, s.slots, 0) // the waiter left before the slot frees
	close(hold)
	if err := <-done; err != nil {
		t.Errorf("ServeRing: %v", err)
	}
	if len(granted) != 0 {
		t.Errorf("the waiting request ran after its session ended: %q", <-granted)
	}
	var res client.Result
	if err := c.Next(&res); !shmring.IsSessionEnd(err) {
		t.Errorf("Next after the backend left: %v, want the session's end", err)
	}
}

func ptr[T any](v T) *T { return &v }

// A client whose region is a /dev/shm file (no memfd) is served when the listener
// allows unsealed regions: its frame is copied out under the fault guard.
func TestRingUnsealedRegion(t *testing.T) {
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	s, err := New(Config{Models: []Model{{Name: "m", Exec: time.Millisecond}}, Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := shmring.Listen(fmt.Sprintf("@vig-mock-ring-%d-%d", os.Getpid(), ringSeq.Add(1)), shmring.ServerConfig{AllowUnsealed: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.ServeRing(ln) }()
	defer func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeRing: %v", err)
		}
	}()
	c, err := client.Dial(ln.Addr(), client.Options{Backend: shmring.BackendShmFile})
	if err != nil {
		t.Skipf("no /dev/shm region on this machine: %v", err)
	}
	defer c.Close()
	if c.Session().Region().Sealed() {
		t.Fatal("a /dev/shm region claims to be sealed")
	}
	in := pattern(150_000, 9)
	res := submit(t, c, client.Request{Stream: "cam", Model: "m", Frame: 2}, in)
	if d, f := decodeOutput(t, res.Payload()); res.Err() != nil || d != Digest([][]byte{in}) || f != 2 {
		t.Errorf("unsealed region: %v, output (%x, %d)", res.Err(), d, f)
	}
	c.Release(&res)
}
