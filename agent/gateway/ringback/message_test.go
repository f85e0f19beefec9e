package backend

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

// chunks splits msg into buffers of the given sizes (the last takes the rest), as
// gRPC hands over a received message.
func chunks(msg []byte, sizes ...int) mem.BufferSlice {
	var out mem.BufferSlice
	for _, n := range sizes {
		n = min(n, len(msg))
		out = append(out, mem.SliceBuffer(msg[:n]))
		msg = msg[n:]
	}
	return append(out, mem.SliceBuffer(msg))
}

func marshal(t testing.TB, m *pb.ModelInferRequest) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestScanRequest(t *testing.T) {
	a, b := bytes.Repeat([]byte{0xab}, 150_000), []byte("second")
	msg := marshal(t, &pb.ModelInferRequest{
		ModelName: "det", Id: "cam#1",
		Parameters: map[string]*pb.InferParameter{"priority": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 2}}},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "A", Datatype: "UINT8", Shape: []int64{1, 150_000},
				Parameters: map[string]*pb.InferParameter{"x": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}},
			{Name: "B", Datatype: "BYTES", Shape: []int64{6}},
		},
		Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}},
		RawInputContents: [][]byte{a, b},
	})
	// The same message cut everywhere interesting: inside varints, inside the
	// input records, inside the tensor data.
	for _, sizes := range [][]int{nil, {1}, {3, 1, 1, 1}, {20, 7, 150_010}, {40, 40, 40}, {len(msg) - 3}} {
		var l tensorLayout
		if _, err := scanRequest(chunks(msg, sizes...), &l, nil); err != nil {
			t.Fatalf("cut %v: %v", sizes, err)
		}
		if l.inputs != 2 || l.rank[0] != 2 || l.dims[0][0] != 1 || l.dims[0][1] != 150_000 || l.rank[1] != 1 || l.dims[1][0] != 6 {
			t.Errorf("cut %v: shapes %d %v %v", sizes, l.inputs, l.rank, l.dims[:2])
		}
		if l.raws != 2 || !bytes.Equal(msg[l.raw[0].off:l.raw[0].off+l.raw[0].len], a) || !bytes.Equal(msg[l.raw[1].off:l.raw[1].off+l.raw[1].len], b) {
			t.Errorf("cut %v: raw spans %v", sizes, l.raw[:l.raws])
		}
		dst := make([]byte, len(a)+len(b))
		if n := copySpans(dst, chunks(msg, sizes...), l.raw[:l.raws]); n != len(dst) || !bytes.Equal(dst, append(append([]byte(nil), a...), b...)) {
			t.Errorf("cut %v: copySpans wrote %d bytes, not the tensors back to back", sizes, n)
		}
	}
}

// An unpacked shape (each dimension its own field) is as valid as a packed one.
func TestScanUnpackedShape(t *testing.T) {
	var in []byte
	in = protowire.AppendTag(in, 1, protowire.BytesType)
	in = protowire.AppendString(in, "A")
	for _, d := range []uint64{3, 4} {
		in = protowire.AppendTag(in, 3, protowire.VarintType)
		in = protowire.AppendVarint(in, d)
	}
	msg := protowire.AppendTag(nil, 5, protowire.BytesType)
	msg = protowire.AppendBytes(msg, in)
	var l tensorLayout
	if _, err := scanRequest(chunks(msg), &l, nil); err != nil || l.inputs != 1 || l.rank[0] != 2 || l.dims[0][0] != 3 || l.dims[0][1] != 4 {
		t.Errorf("unpacked shape: %v, %+v", err, l)
	}
}

func TestScanRejects(t *testing.T) {
	tensor := func(shape ...int64) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: "A", Datatype: "UINT8", Shape: shape}
	}
	many := &pb.ModelInferRequest{ModelName: "m"}
	for range 7 {
		many.Inputs = append(many.Inputs, tensor(1))
	}
	manyRaw := &pb.ModelInferRequest{ModelName: "m", RawInputContents: make([][]byte, 7)}
	valid := marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor(4)}, RawInputContents: [][]byte{{1, 2, 3, 4}}})
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"seven inputs", marshal(t, many)},
		{"seven raw", marshal(t, manyRaw)},
		{"rank 9", marshal(t, &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor(1, 1, 1, 1, 1, 1, 1, 1, 1)}})},
		{"negative dimension", marshal(t, &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor(-1)}})},
		{"truncated", valid[:len(valid)-1]},
		{"truncated varint", []byte{0x3a, 0x80}},
		{"field 0", []byte{0x02, 0x00}},
		{"group", []byte{0x0b}},
		{"varint of 11 bytes", append([]byte{0x08}, bytes.Repeat([]byte{0xff}, 11)...)},
	} {
		var l tensorLayout
		if _, err := scanRequest(chunks(tc.msg, 1, 2), &l, nil); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
		if _, err := scanRequest(chunks(tc.msg), &l, nil); err == nil {
			t.Errorf("%s (one buffer): accepted", tc.name)
		}
	}
}

// scanRequest reads requests from clients: it must never panic, and whatever it
// accepts it reads as protobuf does.
func FuzzScanRequest(f *testing.F) {
	f.Add(marshal(f, &pb.ModelInferRequest{ModelName: "m", Id: "s#1",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "A", Datatype: "FP32", Shape: []int64{2, 2}}},
		RawInputContents: [][]byte{make([]byte, 16)}}), uint8(3))
	f.Add([]byte{0x2a, 0x02, 0x1a, 0x00}, uint8(1))
	f.Add([]byte{0x3a, 0x05, 1, 2, 3}, uint8(2))
	f.Fuzz(func(t *testing.T, msg []byte, cut uint8) {
		var l tensorLayout
		_, err := scanRequest(chunks(msg, int(cut%64)+1, int(cut%7)+1), &l, nil)
		var m pb.ModelInferRequest
		perr := proto.Unmarshal(msg, &m)
		if err != nil {
			return
		}
		if perr != nil {
			// scanRequest reads less than protobuf does (the other fields are
			// the gateway's business), so it may accept what protobuf refuses
			// elsewhere; but never a bad span.
			for _, s := range l.raw[:l.raws] {
				if s.off < 0 || s.len < 0 || s.off+s.len > len(msg) {
					t.Fatalf("span %v outside a %d-byte message", s, len(msg))
				}
			}
			return
		}
		if l.raws != len(m.RawInputContents) || l.inputs != len(m.Inputs) {
			t.Fatalf("counted %d inputs, %d raw; protobuf %d, %d", l.inputs, l.raws, len(m.Inputs), len(m.RawInputContents))
		}
		for i, s := range l.raw[:l.raws] {
			if !bytes.Equal(msg[s.off:s.off+s.len], m.RawInputContents[i]) {
				t.Fatalf("raw %d differs", i)
			}
		}
		for i := range l.inputs {
			if l.rank[i] != len(m.Inputs[i].Shape) {
				t.Fatalf("input %d: rank %d, protobuf %v", i, l.rank[i], m.Inputs[i].Shape)
			}
			for j, d := range m.Inputs[i].Shape {
				if l.dims[i][j] != d {
					t.Fatalf("input %d: dims %v, protobuf %v", i, l.dims[i][:l.rank[i]], m.Inputs[i].Shape)
				}
			}
		}
	})
}

// The hand-encoded answer is what protobuf decodes, byte sizes included.
func TestAppendResponse(t *testing.T) {
	for _, tc := range []struct {
		model, version, id string
		outs               []output
	}{
		{"det", "1", "cam#7", []output{{name: "OUTPUT0", datatype: "INT64", shape: []int64{2}, data: make([]byte, 16)}}},
		{"det", "", "", nil},
		{"m", "", "x", []output{{name: "A", datatype: "FP32", shape: []int64{1, 300, 300}, data: bytes.Repeat([]byte{1}, 360_000)},
			{name: "E", datatype: "UINT8", shape: []int64{0}}, {name: "S", datatype: "BYTES"}}},
	} {
		n := responseSize([]byte(tc.model), []byte(tc.version), []byte(tc.id), tc.outs)
		b := appendResponse(make([]byte, 0, n), []byte(tc.model), []byte(tc.version), []byte(tc.id), tc.outs)
		if len(b) != n {
			t.Errorf("%s: encoded %d bytes, computed %d", tc.model, len(b), n)
		}
		var r pb.ModelInferResponse
		if err := proto.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.ModelName != tc.model || r.ModelVersion != tc.version || r.Id != tc.id || len(r.Outputs) != len(tc.outs) || len(r.RawOutputContents) != len(tc.outs) {
			t.Fatalf("%s: decoded %v", tc.model, &r)
		}
		for i, o := range tc.outs {
			got := r.Outputs[i]
			if got.Name != o.name || got.Datatype != o.datatype || len(got.Shape) != len(o.shape) || !bytes.Equal(r.RawOutputContents[i], o.data) {
				t.Errorf("%s: output %d: %v", tc.model, i, got)
			}
			for j := range o.shape {
				if got.Shape[j] != o.shape[j] {
					t.Errorf("%s: output %d shape %v", tc.model, i, got.Shape)
				}
			}
		}
	}
}

func TestParseFrameID(t *testing.T) {
	for _, tc := range []struct {
		id     string
		stream string
		frame  uint64
		ok     bool
	}{
		{"cam#42", "cam", 42, true},
		{"a#b#7", "a#b", 7, true},
		{"#7", "", 0, false},
		{"cam#", "", 0, false},
		{"cam#x", "", 0, false},
		{"cam#-1", "", 0, false},
		{"cam#18446744073709551616", "", 0, false},
		{"", "", 0, false},
	} {
		s, f, ok := parseFrameID([]byte(tc.id))
		if string(s) != tc.stream || f != tc.frame || ok != tc.ok {
			t.Errorf("%q: %q %d %v", tc.id, s, f, ok)
		}
	}
}
