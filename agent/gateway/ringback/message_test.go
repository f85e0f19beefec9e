package ringback

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

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
		{"cam#18446744073709551615", "cam", 18446744073709551615, true},
		{"", "", 0, false},
	} {
		s, f, ok := parseFrameID([]byte(tc.id))
		if string(s) != tc.stream || f != tc.frame || ok != tc.ok {
			t.Errorf("%q: %q %d %v", tc.id, s, f, ok)
		}
	}
}

func marshal(t testing.TB, m *pb.ModelInferRequest) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
