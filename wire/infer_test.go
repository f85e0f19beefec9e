package wire

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/internal/fuzztest"
	pb "github.com/vig-edge/vig/proto/inference"
)

func strParam(s string) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: s}}
}
func intParam(v int64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
}
func uintParam(v uint64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: v}}
}

func sampleRequest(payload int) *pb.ModelInferRequest {
	data := bytes.Repeat([]byte{0xab}, payload)
	return &pb.ModelInferRequest{
		ModelName: "detector_small", ModelVersion: "1", Id: "detector#7",
		Parameters: map[string]*pb.InferParameter{
			ParamStream: strParam("front_cam"), ParamCapture: intParam(123456789),
			"priority": uintParam(2), "timeout": intParam(5000),
		},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "IMAGE", Datatype: "UINT8", Shape: []int64{int64(payload)}},
		},
		Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}},
		RawInputContents: [][]byte{data},
	}
}

// chunk splits b into buffers of the given sizes (cycled), like HTTP/2 data frames.
func chunk(b []byte, sizes ...int) mem.BufferSlice {
	var out mem.BufferSlice
	for i := 0; len(b) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(b))
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

func TestParseInferAcrossBuffers(t *testing.T) {
	msg, err := proto.Marshal(sampleRequest(150_000))
	if err != nil {
		t.Fatal(err)
	}
	for _, sizes := range [][]int{{len(msg)}, {16384}, {1}, {3, 7}, {5, 16384, 2}} {
		var h InferHeader
		if err := h.ParseInfer(chunk(msg, sizes...)); err != nil {
			t.Fatalf("chunks %v: %v", sizes, err)
		}
		if string(h.Model) != "detector_small" || string(h.ID) != "detector#7" || string(h.Version) != "1" {
			t.Errorf("chunks %v: header %q %q %q", sizes, h.Model, h.ID, h.Version)
		}
		if string(h.Stream) != "front_cam" || !h.HasCapture || h.Capture != 123456789 {
			t.Errorf("chunks %v: stream %q capture %d/%v", sizes, h.Stream, h.Capture, h.HasCapture)
		}
		if h.RawInputs != 1 || h.RawBytes != 150_000 || len(h.Inputs) != 1 || string(h.Inputs[0].Name) != "IMAGE" || len(h.Outputs) != 1 {
			t.Errorf("chunks %v: tensors %+v raw %d/%d", sizes, h.Inputs, h.RawInputs, h.RawBytes)
		}
		if len(h.Inputs) == 1 && !slices.Equal(h.Inputs[0].Shape, []int64{int64(h.RawBytes)}) {
			t.Errorf("chunks %v: shape %v, want [%d]", sizes, h.Inputs[0].Shape, h.RawBytes)
		}
		if len(h.Raw) != 1 || !bytes.Equal(h.Raw[0].Slice(chunk(msg, sizes...)).Materialize(), bytes.Repeat([]byte{0xab}, 150_000)) {
			t.Errorf("chunks %v: raw span %+v does not hold the tensor bytes", sizes, h.Raw)
		}
		if p, ok := h.Param("priority"); !ok || p.Kind != ParamUint64 || p.Uint != 2 {
			t.Errorf("chunks %v: priority %+v", sizes, p)
		}
	}
}

func TestStripVig(t *testing.T) {
	req := sampleRequest(40_000)
	msg, _ := proto.Marshal(req)
	for _, sizes := range [][]int{{len(msg)}, {16384}, {1}, {13, 5}} {
		in := chunk(msg, sizes...)
		var h InferHeader
		if err := h.ParseInfer(in); err != nil {
			t.Fatal(err)
		}
		out := h.StripVig(in)
		var got pb.ModelInferRequest
		if err := proto.Unmarshal(out.Materialize(), &got); err != nil {
			t.Fatalf("chunks %v: stripped message does not decode: %v", sizes, err)
		}
		want := proto.Clone(req).(*pb.ModelInferRequest)
		delete(want.Parameters, ParamStream)
		delete(want.Parameters, ParamCapture)
		if !proto.Equal(&got, want) {
			t.Errorf("chunks %v: stripped message differs", sizes)
		}
		if out.Len() >= len(msg) {
			t.Errorf("nothing stripped: %d >= %d", out.Len(), len(msg))
		}
		if len(h.Inputs) == 1 && !slices.Equal(h.Inputs[0].Shape, []int64{int64(h.RawBytes)}) {
			t.Errorf("chunks %v: shape %v, want [%d]", sizes, h.Inputs[0].Shape, h.RawBytes)
		}
		if len(h.Raw) != 1 || !bytes.Equal(h.Raw[0].Slice(out).Materialize(), req.RawInputContents[0]) {
			t.Errorf("chunks %v: raw span %+v does not hold the tensor bytes in the stripped message", sizes, h.Raw)
		}
	}
}

func TestParseInferErrors(t *testing.T) {
	mk := func(f func(r *pb.ModelInferRequest)) []byte {
		r := sampleRequest(16)
		f(r)
		b, _ := proto.Marshal(r)
		return b
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"garbage", []byte{0xff, 0xff, 0xff}, "malformed"},
		{"truncated", mk(func(*pb.ModelInferRequest) {})[:40], "malformed"},
		{"no model", mk(func(r *pb.ModelInferRequest) { r.ModelName = "" }), "model_name"},
		{"raw count", mk(func(r *pb.ModelInferRequest) {
			r.Inputs = append(r.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: "MASK", Datatype: "UINT8", Shape: []int64{1}})
		}), "raw_input_contents"},
		{"raw and contents", mk(func(r *pb.ModelInferRequest) { r.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1}} }), "contents"},
		{"stream type", mk(func(r *pb.ModelInferRequest) { r.Parameters[ParamStream] = intParam(3) }), ParamStream},
		{"capture negative", mk(func(r *pb.ModelInferRequest) { r.Parameters[ParamCapture] = intParam(-1) }), ParamCapture},
		{"capture type", mk(func(r *pb.ModelInferRequest) { r.Parameters[ParamCapture] = strParam("now") }), ParamCapture},
		{"shm size without region", mk(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Parameters = map[string]*pb.InferParameter{ParamShmByteSize: intParam(16)}
			r.RawInputContents = nil
		}), "without"},
		{"shm region without size", mk(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Parameters = map[string]*pb.InferParameter{ParamShmRegion: strParam("r")}
			r.RawInputContents = nil
		}), "requires"},
		{"shm region and contents", mk(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Parameters = map[string]*pb.InferParameter{ParamShmRegion: strParam("r"), ParamShmByteSize: intParam(4)}
			r.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1}}
			r.RawInputContents = nil
		}), "also sets contents"},
	} {
		var h InferHeader
		err := h.ParseInfer(chunk(tc.msg, 7))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want mention of %q", tc.name, err, tc.want)
		}
	}
}

func BenchmarkParseInfer6MB(b *testing.B) {
	msg, _ := proto.Marshal(sampleRequest(6_200_000))
	in := chunk(msg, 16384)
	var h InferHeader
	b.ReportAllocs()
	for b.Loop() {
		if err := h.ParseInfer(in); err != nil {
			b.Fatal(err)
		}
		out := h.StripVig(in)
		out.Free()
	}
}

// FuzzParseInfer checks that parsing never panics; that every message the protobuf
// library accepts is read the same way (vig's own rules aside); and that stripping
// vig's parameters leaves a message that still decodes. vig may accept bytes the
// library refuses inside fields it does not interpret (tensor contents, unknown
// fields): those are forwarded untouched and the backend refuses them.
func FuzzParseInfer(f *testing.F) {
	good, _ := proto.Marshal(sampleRequest(64))
	f.Add(good, uint8(5))
	f.Add([]byte{0x0a, 0x01, 'm'}, uint8(1))
	f.Add([]byte{0x22, 0x80, 0x80, 0x80, 0x80, 0x10}, uint8(2))
	f.Fuzz(func(t *testing.T, msg []byte, cut uint8) {
		defer fuzztest.Bound(t)()
		in := chunk(msg, int(cut%32)+1)
		var h InferHeader
		vigErr := h.ParseInfer(in)
		var ref pb.ModelInferRequest
		refErr := proto.Unmarshal(msg, &ref)
		if refErr != nil {
			return
		}
		if vigErr != nil {
			if errors.Is(vigErr, ErrMalformed) {
				t.Fatalf("valid protobuf refused as malformed: %v", vigErr)
			}
			return // one of vig's own rules
		}
		if string(h.Model) != ref.ModelName || len(h.Inputs) != len(ref.Inputs) || h.RawInputs != len(ref.RawInputContents) {
			t.Fatalf("disagrees with protobuf: %q/%q inputs %d/%d", h.Model, ref.ModelName, len(h.Inputs), len(ref.Inputs))
		}
		for i, in := range ref.Inputs {
			if !slices.Equal(h.Inputs[i].Shape, in.Shape) && len(h.Inputs[i].Shape)+len(in.Shape) > 0 {
				t.Fatalf("input %d shape %v, protobuf %v", i, h.Inputs[i].Shape, in.Shape)
			}
		}
		var stripped pb.ModelInferRequest
		if err := proto.Unmarshal(h.StripVig(in).Materialize(), &stripped); err != nil {
			t.Fatalf("stripped message does not decode: %v", err)
		}
		for k := range stripped.Parameters {
			if strings.HasPrefix(k, vigPrefix) {
				t.Fatalf("parameter %q survived stripping", k)
			}
		}
	})
}
