package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/internal/fuzztest"
	pb "github.com/vig-edge/vig/proto/inference"
)

// bytesElems encodes BYTES elements (4-byte little-endian length, then the bytes).
func bytesElems(elems ...string) []byte {
	var b []byte
	for _, e := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

// batchRequest is frame i of a stream: rows rows, each row's inputs its own.
func batchRequest(i, rows int) *pb.ModelInferRequest {
	var fp []byte
	var tags []string
	for r := range rows {
		for k := range 3 {
			fp = binary.LittleEndian.AppendUint32(fp, uint32(1000*i+10*r+k))
		}
		tags = append(tags, fmt.Sprintf("frame%d-row%d%s", i, r, bytes.Repeat([]byte{'x'}, i)))
	}
	return &pb.ModelInferRequest{
		ModelName: "detector", ModelVersion: "2", Id: fmt.Sprintf("req-%d", i),
		Parameters: map[string]*pb.InferParameter{
			ParamStream: strParam(fmt.Sprintf("cam%d", i)), ParamCapture: intParam(int64(1e9 + i)),
			"priority": uintParam(1), "flag": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: false}},
			"zero": intParam(0), "empty": strParam(""), "ratio": {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 0}},
		},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "IN", Datatype: "FP32", Shape: []int64{int64(rows), 3}},
			{Name: "TAG", Datatype: "BYTES", Shape: []int64{int64(rows), 1}},
		},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "SUM"}, {Name: "ECHO", Parameters: map[string]*pb.InferParameter{"classification": intParam(0)}},
		},
		RawInputContents: [][]byte{fp, bytesElems(tags...)},
	}
}

// perRow is a backend that computes each output row from its input row alone,
// as a batching model does: the answer of a batch, cut, is the answers of its
// rows.
func perRow(t testing.TB, req *pb.ModelInferRequest) []byte {
	t.Helper()
	rows := int(req.Inputs[0].Shape[0])
	in := req.RawInputContents[0]
	sum := make([]byte, len(in))
	for k := range in {
		sum[k] = in[k] ^ 0x5a
	}
	var echo []byte
	tags := req.RawInputContents[1]
	for range rows {
		n := binary.LittleEndian.Uint32(tags)
		tag := string(tags[4 : 4+n])
		tags = tags[4+n:]
		echo = append(echo, bytesElems(tag, fmt.Sprintf("len=%d", n))...)
	}
	resp := &pb.ModelInferResponse{
		ModelName: req.ModelName, ModelVersion: req.ModelVersion, Id: req.Id,
		Parameters: map[string]*pb.InferParameter{"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}, "z": strParam("last")},
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "SUM", Datatype: "FP32", Shape: []int64{int64(rows), 3}},
			{Name: "ECHO", Datatype: "BYTES", Shape: []int64{int64(rows), 2}, Parameters: map[string]*pb.InferParameter{"o": intParam(7)}},
		},
		RawOutputContents: [][]byte{sum, echo},
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stripped is req as vig forwards it: vig's parameters removed.
func stripped(req *pb.ModelInferRequest) *pb.ModelInferRequest {
	c := proto.Clone(req).(*pb.ModelInferRequest)
	for k := range c.Parameters {
		if isVig([]byte(k)) {
			delete(c.Parameters, k)
		}
	}
	return c
}

// part parses a request as a frontend does and strips vig's parameters.
func part(t testing.TB, req *pb.ModelInferRequest, chunks ...int) BatchPart {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) == 0 {
		chunks = []int{len(b)}
	}
	h := new(InferHeader)
	msg := chunk(b, chunks...)
	if err := h.ParseInfer(msg); err != nil {
		t.Fatal(err)
	}
	return BatchPart{H: h, Msg: h.StripVig(msg)}
}

func TestBatchRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		for _, chunks := range [][]int{{1 << 20}, {7}, {1, 5, 64}} {
			t.Run(fmt.Sprintf("n=%d/chunks=%v", n, chunks), func(t *testing.T) {
				var parts []BatchPart
				var reqs []*pb.ModelInferRequest
				var key uint64
				for i := range n {
					req := batchRequest(i, 1+i%2)
					reqs = append(reqs, req)
					p := part(t, req, chunks...)
					k, rows, why := BatchKey(p.H, p.Msg)
					if k == 0 || rows != 1+i%2 {
						t.Fatalf("frame %d: key %d rows %d (%s)", i, k, rows, why)
					}
					if i > 0 && k != key {
						t.Fatalf("frame %d: key %x, frame 0 %x", i, k, key)
					}
					key = k
					parts = append(parts, p)
				}
				var bt Batcher
				merged, err := bt.Merge(parts, mem.DefaultBufferPool())
				if err != nil {
					t.Fatal(err)
				}
				var batch pb.ModelInferRequest
				if err := proto.Unmarshal(merged.Materialize(), &batch); err != nil {
					t.Fatalf("merged request: %v", err)
				}
				merged.Free()
				// What Triton's batcher forms: rows concatenated, the lead's id.
				want := stripped(reqs[0])
				want.Inputs[0].Shape[0], want.Inputs[1].Shape[0] = 0, 0
				want.RawInputContents = [][]byte{nil, nil}
				for _, r := range reqs {
					want.Inputs[0].Shape[0] += r.Inputs[0].Shape[0]
					want.Inputs[1].Shape[0] += r.Inputs[1].Shape[0]
					want.RawInputContents[0] = append(want.RawInputContents[0], r.RawInputContents[0]...)
					want.RawInputContents[1] = append(want.RawInputContents[1], r.RawInputContents[1]...)
				}
				if !proto.Equal(&batch, want) {
					t.Fatalf("merged request\n got %v\nwant %v", &batch, want)
				}

				answer := perRow(t, &batch)
				outs := make([]mem.BufferSlice, n)
				if err := bt.Split(chunk(answer, chunks...), parts, mem.DefaultBufferPool(), outs); err != nil {
					t.Fatal(err)
				}
				for i, r := range reqs {
					alone := perRow(t, stripped(r))
					if got := outs[i].Materialize(); !bytes.Equal(got, alone) {
						var g, w pb.ModelInferResponse
						_ = proto.Unmarshal(got, &g)
						_ = proto.Unmarshal(alone, &w)
						t.Fatalf("frame %d's answer differs from its answer alone\n got %v\nwant %v", i, &g, &w)
					}
					outs[i].Free()
				}
			})
		}
	}
}

// The lead without an id, a member with one: the member's answer carries its id.
func TestBatchSplitIDs(t *testing.T) {
	a, b := batchRequest(0, 1), batchRequest(1, 1)
	a.Id = ""
	parts := []BatchPart{part(t, a), part(t, b)}
	var bt Batcher
	merged, err := bt.Merge(parts, mem.DefaultBufferPool())
	if err != nil {
		t.Fatal(err)
	}
	var batch pb.ModelInferRequest
	if err := proto.Unmarshal(merged.Materialize(), &batch); err != nil {
		t.Fatal(err)
	}
	outs := make([]mem.BufferSlice, 2)
	if err := bt.Split(mem.BufferSlice{mem.SliceBuffer(perRow(t, &batch))}, parts, nil, outs); err != nil {
		t.Fatal(err)
	}
	for i, r := range []*pb.ModelInferRequest{a, b} {
		if got, want := outs[i].Materialize(), perRow(t, stripped(r)); !bytes.Equal(got, want) {
			t.Fatalf("frame %d: answer differs from its answer alone", i)
		}
	}
}

func TestBatchKey(t *testing.T) {
	base := func() *pb.ModelInferRequest { return batchRequest(1, 1) }
	key := func(r *pb.ModelInferRequest) (uint64, string) {
		p := part(t, r)
		k, _, why := BatchKey(p.H, p.Msg)
		return k, why
	}
	k0, why := key(base())
	if k0 == 0 {
		t.Fatalf("base request runs alone: %s", why)
	}
	same := map[string]func(r *pb.ModelInferRequest){
		"other stream":  func(r *pb.ModelInferRequest) { r.Parameters[ParamStream] = strParam("cam9") },
		"other capture": func(r *pb.ModelInferRequest) { r.Parameters[ParamCapture] = intParam(5) },
		"no vig params": func(r *pb.ModelInferRequest) {
			delete(r.Parameters, ParamStream)
			delete(r.Parameters, ParamCapture)
		},
		"other id": func(r *pb.ModelInferRequest) { r.Id = "zzz" },
		"other rows and data": func(r *pb.ModelInferRequest) {
			o := batchRequest(4, 3)
			r.Inputs, r.RawInputContents = o.Inputs, o.RawInputContents
		},
	}
	for name, mut := range same {
		r := base()
		mut(r)
		if k, why := key(r); k != k0 {
			t.Errorf("%s: key %x (%s), want the base's %x", name, k, why, k0)
		}
	}
	differ := map[string]func(r *pb.ModelInferRequest){
		"version":        func(r *pb.ModelInferRequest) { r.ModelVersion = "3" },
		"input name":     func(r *pb.ModelInferRequest) { r.Inputs[0].Name = "IN2" },
		"input datatype": func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "INT32" },
		"input dims": func(r *pb.ModelInferRequest) {
			r.Inputs[0].Shape = []int64{1, 1, 3}
		},
		"input param": func(r *pb.ModelInferRequest) {
			r.Inputs[0].Parameters = map[string]*pb.InferParameter{"layout": strParam("NCHW")}
		},
		"output name":  func(r *pb.ModelInferRequest) { r.Outputs[0].Name = "BOXES" },
		"output param": func(r *pb.ModelInferRequest) { r.Outputs[1].Parameters["classification"] = intParam(3) },
		"fewer outputs": func(r *pb.ModelInferRequest) {
			r.Outputs = r.Outputs[:1]
		},
		"no outputs asked": func(r *pb.ModelInferRequest) { r.Outputs = nil },
		"priority":         func(r *pb.ModelInferRequest) { r.Parameters["priority"] = uintParam(2) },
		"priority kind":    func(r *pb.ModelInferRequest) { r.Parameters["priority"] = intParam(1) },
		"timeout":          func(r *pb.ModelInferRequest) { r.Parameters["timeout"] = intParam(100) },
		"other param": func(r *pb.ModelInferRequest) {
			r.Parameters["custom"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 0.5}}
		},
		"input order": func(r *pb.ModelInferRequest) {
			r.Inputs[0], r.Inputs[1] = r.Inputs[1], r.Inputs[0]
			r.RawInputContents[0], r.RawInputContents[1] = r.RawInputContents[1], r.RawInputContents[0]
		},
	}
	for name, mut := range differ {
		r := base()
		mut(r)
		k, why := key(r)
		if k == 0 {
			t.Errorf("%s: runs alone (%s), want a key of its own", name, why)
		}
		if k == k0 {
			t.Errorf("%s: same key as the base request", name)
		}
	}
	alone := map[string]struct {
		mut  func(r *pb.ModelInferRequest)
		want string
	}{
		"shared memory input": {func(r *pb.ModelInferRequest) {
			for _, in := range r.Inputs {
				in.Parameters = map[string]*pb.InferParameter{ParamShmRegion: strParam("r"), ParamShmByteSize: intParam(12)}
			}
			r.RawInputContents = nil
		}, AloneShm},
		"shared memory output": {func(r *pb.ModelInferRequest) {
			r.Outputs[0].Parameters = map[string]*pb.InferParameter{ParamShmRegion: strParam("r"), ParamShmByteSize: intParam(12)}
		}, AloneShm},
		"contents": {func(r *pb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3}}
			r.Inputs[1].Contents = &pb.InferTensorContents{BytesContents: [][]byte{[]byte("a")}}
		}, AloneContents},
		"no inputs": {func(r *pb.ModelInferRequest) { r.Inputs, r.RawInputContents = nil, nil }, AloneNoInputs},
		"rows differ": {func(r *pb.ModelInferRequest) {
			r.Inputs[1].Shape = []int64{2, 1}
			r.RawInputContents[1] = bytesElems("a", "b")
		}, AloneRows},
		"no dims":        {func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = nil }, AloneShape},
		"zero rows":      {func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{0, 3} }, AloneShape},
		"negative dim":   {func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{1, -1} }, AloneShape},
		"bytes too few":  {func(r *pb.ModelInferRequest) { r.RawInputContents[0] = r.RawInputContents[0][:8] }, AloneSize},
		"bytes elements": {func(r *pb.ModelInferRequest) { r.RawInputContents[1] = bytesElems("a", "b") }, AloneSize},
		"bytes truncated": {func(r *pb.ModelInferRequest) {
			r.RawInputContents[1] = r.RawInputContents[1][:len(r.RawInputContents[1])-1]
		}, AloneSize},
		"datatype":    {func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "FP8" }, AloneDatatype},
		"sequence id": {func(r *pb.ModelInferRequest) { r.Parameters["sequence_id"] = uintParam(3) }, AloneSequence},
	}
	for name, c := range alone {
		r := base()
		c.mut(r)
		k, why := key(r)
		if k != 0 || why != c.want {
			t.Errorf("%s: key %x reason %q, want 0 and %q", name, k, why, c.want)
		}
	}
}

// splitParts merges n one-row frames and returns the parts and the batch request.
func splitParts(t testing.TB, n int) ([]BatchPart, *pb.ModelInferRequest) {
	var parts []BatchPart
	for i := range n {
		parts = append(parts, part(t, batchRequest(i, 1)))
	}
	var bt Batcher
	merged, err := bt.Merge(parts, nil)
	if err != nil {
		t.Fatal(err)
	}
	var batch pb.ModelInferRequest
	if err := proto.Unmarshal(merged.Materialize(), &batch); err != nil {
		t.Fatal(err)
	}
	return parts, &batch
}

func TestBatchSplitErrors(t *testing.T) {
	parts, batch := splitParts(t, 3)
	good := perRow(t, batch)
	cases := map[string]struct {
		mut    func(r *pb.ModelInferResponse)
		output string
	}{
		"first dim not the batch's": {func(r *pb.ModelInferResponse) { r.Outputs[0].Shape[0] = 2 }, "SUM"},
		"no dims":                   {func(r *pb.ModelInferResponse) { r.Outputs[1].Shape = nil }, "ECHO"},
		"contents": {func(r *pb.ModelInferResponse) {
			r.Outputs[0].Contents = &pb.InferTensorContents{Fp32Contents: []float32{1}}
		}, "SUM"},
		"bytes short":    {func(r *pb.ModelInferResponse) { r.RawOutputContents[0] = r.RawOutputContents[0][1:] }, "SUM"},
		"bytes elements": {func(r *pb.ModelInferResponse) { r.RawOutputContents[1] = bytesElems("a", "b") }, "ECHO"},
		"bytes extra": {func(r *pb.ModelInferResponse) {
			r.RawOutputContents[1] = append(r.RawOutputContents[1], 0)
		}, "ECHO"},
		"unknown datatype": {func(r *pb.ModelInferResponse) { r.Outputs[0].Datatype = "FP8" }, "SUM"},
		"no raw":           {func(r *pb.ModelInferResponse) { r.RawOutputContents = nil }, "SUM"},
	}
	for name, c := range cases {
		var r pb.ModelInferResponse
		if err := proto.Unmarshal(good, &r); err != nil {
			t.Fatal(err)
		}
		c.mut(&r)
		b, _ := proto.Marshal(&r)
		var bt Batcher
		outs := make([]mem.BufferSlice, len(parts))
		err := bt.Split(mem.BufferSlice{mem.SliceBuffer(b)}, parts, nil, outs)
		var se *SplitError
		if !errors.As(err, &se) || se.Output != c.output {
			t.Errorf("%s: %v, want a SplitError naming %q", name, err, c.output)
		}
		for i := range outs {
			if outs[i] != nil {
				t.Errorf("%s: member %d got an answer from a failed split", name, i)
			}
		}
	}
}

func FuzzBatchSplit(f *testing.F) {
	parts, batch := splitParts(f, 3)
	f.Add(perRow(f, batch), uint8(0))
	f.Add([]byte{0x2a, 0x02, 0x1a, 0x00}, uint8(1))
	f.Fuzz(func(t *testing.T, resp []byte, cut uint8) {
		defer fuzztest.Bound(t)()
		var bt Batcher
		outs := make([]mem.BufferSlice, len(parts))
		if err := bt.Split(chunk(resp, int(cut%16)+1), parts, nil, outs); err != nil {
			return
		}
		// An answer that is not protobuf is cut as it is (vig forwards a lone
		// frame's answer unread too); only bounds are checked then.
		valid := proto.Unmarshal(resp, new(pb.ModelInferResponse)) == nil
		total := 0
		for i := range outs {
			var r pb.ModelInferResponse
			if err := proto.Unmarshal(outs[i].Materialize(), &r); err != nil {
				if valid {
					t.Fatalf("member %d: split answer is not a ModelInferResponse: %v", i, err)
				}
				continue
			}
			if r.Id != string(parts[i].H.ID) {
				t.Fatalf("member %d: id %q, want %q", i, r.Id, parts[i].H.ID)
			}
			for _, o := range r.Outputs {
				if len(o.Shape) == 0 || o.Shape[0] != 1 {
					t.Fatalf("member %d: output %q shape %v", i, o.Name, o.Shape)
				}
			}
			for _, raw := range r.RawOutputContents {
				total += len(raw)
			}
		}
		if total > len(resp) {
			t.Fatalf("split answers hold %d tensor bytes, the batch answer %d", total, len(resp))
		}
	})
}

func FuzzBatchKeyMerge(f *testing.F) {
	good, _ := proto.Marshal(batchRequest(1, 2))
	f.Add(good, uint8(0))
	f.Fuzz(func(t *testing.T, msg []byte, cut uint8) {
		defer fuzztest.Bound(t)()
		h := new(InferHeader)
		in := chunk(msg, int(cut%16)+1)
		if h.ParseInfer(in) != nil {
			return
		}
		p := BatchPart{H: h, Msg: h.StripVig(in)}
		k, rows, _ := BatchKey(h, p.Msg)
		if k == 0 {
			return
		}
		var bt Batcher
		merged, err := bt.Merge([]BatchPart{p, p}, nil)
		if err != nil {
			t.Fatalf("merging a request with itself: %v", err)
		}
		var m InferHeader
		if err := m.ParseInfer(merged); err != nil {
			t.Fatalf("merged request does not parse: %v", err)
		}
		if m.Inputs[0].Shape[0] != int64(2*rows) || m.RawBytes != 2*h.RawBytes {
			t.Fatalf("merged %v rows %d bytes from 2×(%d rows, %d bytes)", m.Inputs[0].Shape, m.RawBytes, rows, h.RawBytes)
		}
	})
}

// mergeSplitAllocs is the allocations of one merge and split of n frames.
func mergeSplitAllocs(t testing.TB, n int) float64 {
	parts, batch := splitParts(t, n)
	answer := perRow(t, batch)
	resp := mem.BufferSlice{mem.SliceBuffer(answer)}
	var bt Batcher
	outs := make([]mem.BufferSlice, n)
	pool := mem.DefaultBufferPool()
	return testing.AllocsPerRun(50, func() {
		m, err := bt.Merge(parts, pool)
		if err != nil {
			t.Fatal(err)
		}
		m.Free()
		if err := bt.Split(resp, parts, pool, outs); err != nil {
			t.Fatal(err)
		}
		for i := range outs {
			outs[i].Free()
		}
	})
}

// Allocations per frame do not grow with the batch size.
func TestBatchAllocsPerFrame(t *testing.T) {
	one := mergeSplitAllocs(t, 1)
	for _, n := range []int{2, 4, 8} {
		if per := mergeSplitAllocs(t, n) / float64(n); per > one {
			t.Errorf("batch of %d: %.1f allocations per frame, a frame alone %.1f", n, per, one)
		}
	}
}

func BenchmarkMergeSplit(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("frames=%d", n), func(b *testing.B) {
			parts, batch := splitParts(b, n)
			resp := mem.BufferSlice{mem.SliceBuffer(perRow(b, batch))}
			var bt Batcher
			outs := make([]mem.BufferSlice, n)
			pool := mem.DefaultBufferPool()
			b.ReportAllocs()
			for b.Loop() {
				m, err := bt.Merge(parts, pool)
				if err != nil {
					b.Fatal(err)
				}
				m.Free()
				if err := bt.Split(resp, parts, pool, outs); err != nil {
					b.Fatal(err)
				}
				for i := range outs {
					outs[i].Free()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/frame")
		})
	}
}
