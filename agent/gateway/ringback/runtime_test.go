package ringback

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
)

// seen is what the scripted runtime received.
type seen struct {
	d       shmring.Descriptor
	payload []byte
}

// scriptedRuntime answers each request as its model name says, and reports what
// it received.
func scriptedRuntime(t *testing.T, region shmring.Backend) (addr string, got chan seen) {
	t.Helper()
	ln, err := shmring.Listen(ringAddr(), shmring.ServerConfig{AllowUnsealed: region == shmring.BackendShmFile})
	if err != nil {
		t.Fatal(err)
	}
	got = make(chan seen, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					var req shmring.Request
					if err := c.Recv(&req); err != nil {
						return
					}
					got <- seen{d: req.Descriptor, payload: append([]byte(nil), req.Payload()...)}
					res := shmring.Response{Status: shmring.StatusOK}
					switch req.Model {
					case "tensors":
						res.Payload = []byte("AAAAAAAABBB")
						res.NumTensors = 2
						res.Tensors[0] = shmring.Tensor{Name: "A", Datatype: "FP32", Rank: 1, Dims: [shmring.MaxRank]int64{2}, Length: 8}
						res.Tensors[1] = shmring.Tensor{Name: "B", Datatype: "UINT8", Rank: 2, Dims: [shmring.MaxRank]int64{1, 3}, Offset: 8, Length: 3}
					case "plain":
						res.Payload = []byte("hello")
					case "outside":
						res.Payload = []byte("x")
						res.NumTensors = 1
						res.Tensors[0] = shmring.Tensor{Name: "A", Datatype: "UINT8", Rank: 1, Dims: [shmring.MaxRank]int64{9}, Length: 9}
					case "busy":
						res = shmring.Response{Status: shmring.StatusExhausted, Message: "npu busy"}
					case "silent-error":
						res = shmring.Response{Status: shmring.StatusInternal}
					case "stray":
						// An answer to a tag nobody asked for comes first.
						var other shmring.Request
						other.Tag = req.Tag + 1000
						c.Respond(&other, &shmring.Response{Status: shmring.StatusOK, Payload: []byte("stray")})
						res.Payload = []byte("mine")
					}
					if err := c.Respond(&req, &res); err != nil {
						t.Errorf("respond: %v", err)
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr(), got
}

// infer runs one request straight on a Backend, parsing it as the gateway does.
func infer(t *testing.T, b *Backend, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	t.Helper()
	msg := mem.BufferSlice{mem.SliceBuffer(marshal(t, req))}
	var h wire.InferHeader
	if err := h.ParseInfer(msg); err != nil {
		t.Fatal(err)
	}
	f := &syncFinish{done: make(chan struct{})}
	b.start(job{f: f, h: &h, msg: msg})
	<-f.done
	out, err := f.out, f.err
	if err != nil {
		return nil, err
	}
	defer out.Free()
	var r pb.ModelInferResponse
	if err := proto.Unmarshal(out.Materialize(), &r); err != nil {
		t.Fatal(err)
	}
	return &r, nil
}

// syncFinish is a call's answer, for tests that drive the Backend directly.
type syncFinish struct {
	out  mem.BufferSlice
	err  error
	done chan struct{}
}

func (f *syncFinish) Finish(out mem.BufferSlice, err error) { f.out, f.err = out, err; close(f.done) }

func dialUp(t *testing.T, addr string, opts Options) *Backend {
	t.Helper()
	if opts.Config == (shmring.Config{}) {
		opts.Config = testRing
	}
	b, err := New(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	b.Open(func(bool) {})
	t.Cleanup(func() { b.Close() })
	if err := b.WaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRuntimeAnswers(t *testing.T) {
	region, err := shmring.Probe()
	if err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	addr, got := scriptedRuntime(t, region)
	b := dialUp(t, addr, Options{})

	// What the runtime receives: model, stream and frame from the id, capture
	// time, tensor records back to back in one payload.
	req := &pb.ModelInferRequest{ModelName: "tensors", Id: "front#9",
		Parameters: map[string]*pb.InferParameter{"vig_capture_ns": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 12345}}},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "IMG", Datatype: "UINT8", Shape: []int64{2, 2}}, {Name: "META", Datatype: "INT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{{1, 2, 3, 4}, {5, 6, 7, 8}},
	}
	r, err := infer(t, b, req)
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	d := s.d
	if d.Model != "tensors" || d.Stream != "front" || d.Frame != 9 || d.CaptureNs != 12345 || d.NumTensors != 2 ||
		!bytes.Equal(s.payload, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("runtime got %+v, payload %v", d, s.payload)
	}
	t0, t1 := d.Tensors[0], d.Tensors[1]
	if t0.Name != "IMG" || t0.Datatype != "UINT8" || t0.Rank != 2 || t0.Dims[0] != 2 || t0.Dims[1] != 2 || t0.Offset != 0 || t0.Length != 4 ||
		t1.Name != "META" || t1.Datatype != "INT32" || t1.Rank != 1 || t1.Dims[0] != 1 || t1.Offset != 4 || t1.Length != 4 {
		t.Errorf("tensor records %+v %+v", t0, t1)
	}
	// The answer: one output per tensor record.
	if r.Id != "front#9" || r.ModelName != "tensors" || len(r.Outputs) != 2 ||
		r.Outputs[0].Name != "A" || r.Outputs[0].Datatype != "FP32" || len(r.Outputs[0].Shape) != 1 || r.Outputs[0].Shape[0] != 2 ||
		r.Outputs[1].Name != "B" || len(r.Outputs[1].Shape) != 2 || r.Outputs[1].Shape[1] != 3 ||
		string(r.RawOutputContents[0]) != "AAAAAAAA" || string(r.RawOutputContents[1]) != "BBB" {
		t.Errorf("answer %v", r)
	}
	// Only the requested outputs.
	req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "B"}}
	if r, err := infer(t, b, req); err != nil || len(r.Outputs) != 1 || r.Outputs[0].Name != "B" || string(r.RawOutputContents[0]) != "BBB" {
		t.Errorf("requested B: %v, %v", r, err)
	}
	<-got

	// Without an id naming a frame: vig's stream and a counter.
	plain := &pb.ModelInferRequest{ModelName: "plain",
		Parameters: map[string]*pb.InferParameter{"vig_stream": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "door"}}}}
	for i := range 2 {
		r, err := infer(t, b, plain)
		if err != nil {
			t.Fatal(err)
		}
		if s := <-got; s.d.Stream != "door" || s.d.Frame != uint64(i) || s.d.NumTensors != 0 || s.d.Slot != shmring.NoSlot || s.d.CaptureNs != 0 {
			t.Errorf("request %d without a frame id: runtime got %+v", i, s.d)
		}
		// A payload without tensor records is OUTPUT0, UINT8, [length].
		if len(r.Outputs) != 1 || r.Outputs[0].Name != "OUTPUT0" || r.Outputs[0].Datatype != "UINT8" || r.Outputs[0].Shape[0] != 5 || string(r.RawOutputContents[0]) != "hello" {
			t.Errorf("plain answer %v", r)
		}
	}

	for _, tc := range []struct {
		model  string
		code   codes.Code
		msgHas string
	}{
		{"outside", codes.Internal, "outside the 1-byte"},
		{"busy", codes.ResourceExhausted, "npu busy"},
		{"silent-error", codes.Internal, "answered INTERNAL"},
	} {
		_, err := infer(t, b, &pb.ModelInferRequest{ModelName: tc.model})
		wantCode(t, tc.model, err, tc.code, tc.msgHas)
		<-got
	}

	// An answer to a tag vig never used is dropped; the right one still arrives.
	r, err = infer(t, b, &pb.ModelInferRequest{ModelName: "stray"})
	if err != nil || string(r.RawOutputContents[0]) != "mine" {
		t.Errorf("after a stray answer: %v, %v", r, err)
	}
	<-got
	s2 := b.cur.Load()
	waitFor(t, "the stray answer's slot to be returned", func() bool { return s2.s.Responses.Held() == 0 })
	if n := s2.busy(); n != 0 {
		t.Errorf("%d units of room held with nothing in flight", n)
	}
}

// vig's region may be a /dev/shm file instead of a memfd (older kernels); the
// runtime must then accept unsealed regions.
func TestShmFileRegion(t *testing.T) {
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	addr, got := scriptedRuntime(t, shmring.BackendShmFile)
	b := dialUp(t, addr, Options{Region: shmring.BackendShmFile})
	r, err := infer(t, b, &pb.ModelInferRequest{ModelName: "plain", Id: "s#1",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{u8Input("A", 3)}, RawInputContents: [][]byte{{7, 8, 9}}})
	if err != nil {
		if errors.Is(err, shmring.ErrUnsealed) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if s := <-got; !bytes.Equal(s.payload, []byte{7, 8, 9}) || string(r.RawOutputContents[0]) != "hello" {
		t.Errorf("runtime got %v, answer %v", s.payload, r)
	}
}

// Nothing listening: Dial still returns, requests fail UNAVAILABLE with the
// reason, and Close stops the retries.
func TestUnreachable(t *testing.T) {
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	states := make(chan bool, 4)
	b, err := New(ringAddr(), Options{Config: testRing})
	if err != nil {
		t.Fatal(err)
	}
	b.Open(func(up bool) { states <- up })
	if up := <-states; up {
		t.Fatal("up with nothing listening")
	}
	_, err = infer(t, b, &pb.ModelInferRequest{ModelName: "m"})
	wantCode(t, "unreachable", err, codes.Unavailable, "connection refused")
	b.Close()
	if _, err := New("", Options{}); err == nil {
		t.Error("New accepted an empty address")
	}
	if _, err := New("@x", Options{Config: shmring.Config{Requests: shmring.RingConfig{Descriptors: 3, Slots: 1, SlotSize: 4096}}}); err == nil {
		t.Error("New accepted a ring of 3 descriptors")
	}
}
