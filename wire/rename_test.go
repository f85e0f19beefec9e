package wire

import (
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/internal/fuzztest"
	pb "github.com/vig-edge/vig/proto/inference"
)

// renamed decodes a renamed message and checks it is the original but for
// its model name.
func checkRenamed(t testing.TB, orig []byte, out mem.BufferSlice, name string) {
	t.Helper()
	var want, got pb.ModelInferRequest
	if err := proto.Unmarshal(orig, &want); err != nil {
		t.Fatal(err)
	}
	want.ModelName = name
	if err := proto.Unmarshal(out.Materialize(), &got); err != nil {
		t.Fatalf("renamed message does not decode: %v", err)
	}
	if !proto.Equal(&want, &got) {
		t.Fatalf("renamed message differs:\n got %v\nwant %v", &got, &want)
	}
	var c cursor
	c.reset(out, nil)
	names := 0
	for !c.done() {
		num, typ, n, err := c.field(out.Len())
		if err != nil {
			t.Fatal(err)
		}
		if typ != protowire.BytesType {
			c.skipValue(num, typ)
			continue
		}
		c.skip(n)
		if num == 1 {
			names++
		}
	}
	if names != 1 {
		t.Fatalf("%d model_name fields, want 1", names)
	}
}

func TestRenameModel(t *testing.T) {
	msg, err := proto.Marshal(sampleRequest(40_000))
	if err != nil {
		t.Fatal(err)
	}
	// A model_name written twice (the parser keeps the last) and none at all.
	twice := append(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "other"), msg...)
	twice = protowire.AppendString(protowire.AppendTag(twice, 1, protowire.BytesType), "third")
	none, _ := proto.Marshal(&pb.ModelInferRequest{Id: "x", RawInputContents: [][]byte{{1, 2, 3}}})
	field := ModelNameField("detector_dla0")
	for _, m := range [][]byte{msg, twice, none} {
		for _, sizes := range [][]int{{len(m)}, {16384}, {1}, {3, 7}, {5, 16384, 2}} {
			in := chunk(m, sizes...)
			out, err := RenameModel(nil, in, field)
			if err != nil {
				t.Fatalf("sizes %v: %v", sizes, err)
			}
			checkRenamed(t, m, out, "detector_dla0")
			out.Free()
		}
	}
	if _, err := RenameModel(nil, chunk([]byte{0x0a, 0x09, 'x'}, 8), field); err == nil {
		t.Fatal("a truncated message was renamed")
	}
}

// The rename copies no tensor bytes and, with its list reused, allocates at
// most the view of the buffer the old name is cut from (gRPC pools those).
func TestRenameModelAllocs(t *testing.T) {
	msg, _ := proto.Marshal(sampleRequest(1 << 20))
	var in mem.BufferSlice // as gRPC delivers it: pooled buffers of 16 KiB
	for b := msg; len(b) > 0; b = b[min(16384, len(b)):] {
		in = append(in, mem.Copy(b[:min(16384, len(b))], mem.DefaultBufferPool()))
	}
	field := ModelNameField("detector_dla0")
	dst := make(mem.BufferSlice, 0, len(in)+2)
	allocs := testing.AllocsPerRun(50, func() {
		out, err := RenameModel(dst, in, field)
		if err != nil || out.Len() != len(msg)-len("detector_small")+len("detector_dla0") {
			t.Fatalf("%v, %d bytes", err, out.Len())
		}
		out.Free()
	})
	if allocs > 1 {
		t.Fatalf("%.0f allocations per rename of a 1 MiB message, want at most 1", allocs)
	}
}

func FuzzRenameModel(f *testing.F) {
	good, _ := proto.Marshal(sampleRequest(64))
	f.Add(good, uint8(5), "detector_gpu")
	f.Add([]byte{0x0a, 0x01, 'm', 0x0a, 0x01, 'n'}, uint8(1), "")
	f.Fuzz(func(t *testing.T, msg []byte, cut uint8, name string) {
		defer fuzztest.Bound(t)()
		var ref pb.ModelInferRequest
		refErr := proto.Unmarshal(msg, &ref)
		out, err := RenameModel(nil, chunk(msg, int(cut%32)+1), ModelNameField(name))
		switch {
		case refErr != nil:
			return // not a message: whatever RenameModel says, nothing is sent
		case err != nil:
			t.Fatalf("a valid message was not renamed: %v", err)
		}
		if !utf8.ValidString(name) {
			return // protobuf refuses a string field that is not UTF-8
		}
		checkRenamed(t, msg, out, name)
	})
}

func BenchmarkRenameModel(b *testing.B) {
	msg, _ := proto.Marshal(sampleRequest(6 << 20))
	var in mem.BufferSlice
	for p := msg; len(p) > 0; p = p[min(16384, len(p)):] {
		in = append(in, mem.Copy(p[:min(16384, len(p))], mem.DefaultBufferPool()))
	}
	field := ModelNameField("detector_dla0")
	dst := make(mem.BufferSlice, 0, len(in)+2)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		out, err := RenameModel(dst, in, field)
		if err != nil {
			b.Fatal(err)
		}
		out.Free()
	}
}
