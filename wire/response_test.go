package wire

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/internal/fuzztest"
	pb "github.com/vig-edge/vig/proto/inference"
)

// detectorResponse is a three-output answer (boxes, scores, classes), the shape of
// a detector's result.
func detectorResponse() *pb.ModelInferResponse {
	return &pb.ModelInferResponse{
		ModelName: "det", ModelVersion: "1", Id: "cam#3",
		Parameters: map[string]*pb.InferParameter{"x": intParam(1)},
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "boxes", Datatype: "FP32", Shape: []int64{1, 3, 4}},
			{Name: "scores", Datatype: "FP32", Shape: []int64{1, 3}},
			{Name: "classes", Datatype: "INT32", Shape: []int64{1, 3}},
		},
		RawOutputContents: [][]byte{bytes.Repeat([]byte{1}, 48), bytes.Repeat([]byte{2}, 12), bytes.Repeat([]byte{3}, 12)},
	}
}

func TestParseResponseAcrossBuffers(t *testing.T) {
	ref := detectorResponse()
	ref.RawOutputContents[0] = bytes.Repeat([]byte{1}, 40_000) // spans several buffers
	msg, err := proto.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	var r InferResponse
	for _, sizes := range [][]int{{len(msg)}, {16384}, {1}, {3, 7}} {
		in := chunk(msg, sizes...)
		if err := r.ParseResponse(in); err != nil {
			t.Fatalf("chunks %v: %v", sizes, err)
		}
		if string(r.Model) != "det" || string(r.Version) != "1" || string(r.ID) != "cam#3" || len(r.Outputs) != 3 || len(r.Raw) != 3 {
			t.Fatalf("chunks %v: %q %q %q, %d outputs, %d raw", sizes, r.Model, r.Version, r.ID, len(r.Outputs), len(r.Raw))
		}
		for i, o := range ref.Outputs {
			got := r.Outputs[i]
			if string(got.Name) != o.Name || string(got.Datatype) != o.Datatype || !slices.Equal(got.Shape, o.Shape) || got.HasContents {
				t.Errorf("chunks %v: output %d = %q %q %v, want %q %q %v", sizes, i, got.Name, got.Datatype, got.Shape, o.Name, o.Datatype, o.Shape)
			}
			dst := make([]byte, r.Raw[i].Len)
			if n := r.Raw[i].CopyTo(dst, in); n != len(ref.RawOutputContents[i]) || !bytes.Equal(dst, ref.RawOutputContents[i]) {
				t.Errorf("chunks %v: output %d bytes differ (%d copied)", sizes, i, n)
			}
			if !bytes.Equal(r.Raw[i].Slice(in).Materialize(), ref.RawOutputContents[i]) {
				t.Errorf("chunks %v: output %d: Slice differs", sizes, i)
			}
		}
	}
}

func TestParseResponseRefuses(t *testing.T) {
	twoRaw := detectorResponse()
	twoRaw.RawOutputContents = twoRaw.RawOutputContents[:2]
	b, _ := proto.Marshal(twoRaw)
	// An output whose length runs past the end of the message.
	long := protowire.AppendTag(nil, 5, protowire.BytesType)
	long = protowire.AppendVarint(long, 100)
	long = append(long, 0x0a, 0x01, 'x')
	// A shape that ends inside a varint.
	badShape := protowire.AppendTag(nil, 3, protowire.BytesType)
	badShape = protowire.AppendBytes(badShape, []byte{0x80})
	out := protowire.AppendTag(nil, 5, protowire.BytesType)
	out = protowire.AppendBytes(out, badShape)
	for name, msg := range map[string][]byte{"raw count": b, "length past end": long, "truncated shape": out} {
		var r InferResponse
		if err := r.ParseResponse(chunk(msg, 5)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Outputs with typed contents and no raw entries are valid; the flag says so.
	typed := &pb.ModelInferResponse{ModelName: "m", Outputs: []*pb.ModelInferResponse_InferOutputTensor{
		{Name: "o", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{7}}}}}
	b, _ = proto.Marshal(typed)
	var r InferResponse
	if err := r.ParseResponse(chunk(b, 4)); err != nil || len(r.Outputs) != 1 || !r.Outputs[0].HasContents || len(r.Raw) != 0 {
		t.Errorf("typed contents: %v, %+v", err, r.Outputs)
	}
}

// The scanner allocates nothing once its storage has grown.
func TestParseResponseAllocs(t *testing.T) {
	msg, _ := proto.Marshal(detectorResponse())
	in := chunk(msg, 16384)
	var r InferResponse
	if n := testing.AllocsPerRun(100, func() { r.ParseResponse(in) }); n != 0 {
		t.Errorf("%v allocations per parse, want 0", n)
	}
}

// FuzzParseResponse: never panics; every message the protobuf library accepts is
// read the same way; every span lies inside the message.
func FuzzParseResponse(f *testing.F) {
	good, _ := proto.Marshal(detectorResponse())
	f.Add(good, uint8(5))
	f.Add([]byte{0x2a, 0x02, 0x1a, 0x80}, uint8(1))
	f.Add([]byte{0x32, 0x80, 0x80, 0x80, 0x80, 0x10}, uint8(2))
	f.Fuzz(func(t *testing.T, msg []byte, cut uint8) {
		defer fuzztest.Bound(t)()
		in := chunk(msg, int(cut%32)+1)
		var r InferResponse
		vigErr := r.ParseResponse(in)
		if vigErr == nil {
			for i, s := range r.Raw {
				if s.Off < 0 || s.Len < 0 || s.Off+s.Len > len(msg) {
					t.Fatalf("raw %d span %+v outside the %d-byte message", i, s, len(msg))
				}
				if !bytes.Equal(s.Slice(in).Materialize(), msg[s.Off:s.Off+s.Len]) {
					t.Fatalf("raw %d span does not view the message's bytes", i)
				}
			}
		}
		var ref pb.ModelInferResponse
		if proto.Unmarshal(msg, &ref) != nil {
			return
		}
		if vigErr != nil {
			if errors.Is(vigErr, ErrMalformed) {
				t.Fatalf("valid protobuf refused as malformed: %v", vigErr)
			}
			return // raw count rule
		}
		if string(r.Model) != ref.ModelName || len(r.Outputs) != len(ref.Outputs) || len(r.Raw) != len(ref.RawOutputContents) {
			t.Fatalf("disagrees with protobuf: %q/%q outputs %d/%d raw %d/%d", r.Model, ref.ModelName, len(r.Outputs), len(ref.Outputs), len(r.Raw), len(ref.RawOutputContents))
		}
		for i, o := range ref.Outputs {
			if string(r.Outputs[i].Name) != o.Name || string(r.Outputs[i].Datatype) != o.Datatype ||
				(!slices.Equal(r.Outputs[i].Shape, o.Shape) && len(r.Outputs[i].Shape)+len(o.Shape) > 0) {
				t.Fatalf("output %d: %q %q %v, protobuf %q %q %v", i, r.Outputs[i].Name, r.Outputs[i].Datatype, r.Outputs[i].Shape, o.Name, o.Datatype, o.Shape)
			}
		}
		for i, b := range ref.RawOutputContents {
			if !bytes.Equal(r.Raw[i].Slice(in).Materialize(), b) {
				t.Fatalf("raw %d differs", i)
			}
		}
	})
}
