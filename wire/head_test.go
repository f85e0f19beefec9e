package wire

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/internal/fuzztest"
	pb "github.com/vig-edge/vig/proto/inference"
)

// readByHead reads msg as a frontend that forwards it as it arrives does: the
// head from its first got bytes (ParseInferHead), then the rest through a
// RawScan in pieces of step bytes. ok false: the head was not found in got.
func readByHead(h *InferHeader, msg []byte, got, step int) (ok bool, err error) {
	got = min(got, len(msg))
	head, ok := h.ParseInferHead(chunk(msg[:got], 7, 16384), len(msg))
	if !ok {
		return false, nil
	}
	var s RawScan
	s.Start(h, head)
	for rest := msg[head:]; len(rest) > 0; {
		n := min(step, len(rest))
		if err := s.Scan(rest[:n]); err != nil {
			return true, err
		}
		rest = rest[n:]
	}
	if err := s.End(); err != nil {
		return true, err
	}
	s.Fill(h)
	return true, nil
}

func TestParseInferHeadAgrees(t *testing.T) {
	msg, err := proto.Marshal(sampleRequest(150_000))
	if err != nil {
		t.Fatal(err)
	}
	var whole InferHeader
	if err := whole.ParseInfer(chunk(msg, 16384)); err != nil {
		t.Fatal(err)
	}
	for _, got := range []int{200, 16384, 48 << 10} {
		for _, step := range []int{1, 3, 16384, len(msg)} {
			var h InferHeader
			ok, err := readByHead(&h, msg, got, step)
			if !ok || err != nil {
				t.Fatalf("got %d step %d: ok %v err %v", got, step, ok, err)
			}
			if string(h.Model) != string(whole.Model) || string(h.ID) != string(whole.ID) ||
				string(h.Stream) != string(whole.Stream) || h.Capture != whole.Capture ||
				h.RawInputs != whole.RawInputs || h.RawBytes != whole.RawBytes || h.Size != whole.Size ||
				len(h.Inputs) != len(whole.Inputs) || len(h.Raw) != 1 {
				t.Fatalf("got %d step %d: head path read %s, ParseInfer %s", got, step, describe(&h), describe(&whole))
			}
		}
	}
	// The head is not all there: asked again with more.
	var h InferHeader
	if _, ok := h.ParseInferHead(chunk(msg[:20], 20), len(msg)); ok {
		t.Fatal("a head of 20 bytes was taken as whole")
	}
}

// The raw spans the scan reports are those of the stripped message, as StripVig
// leaves ParseInfer's.
func TestRawScanSpansAfterStrip(t *testing.T) {
	msg, _ := proto.Marshal(sampleRequest(1000))
	var whole, h InferHeader
	if err := whole.ParseInfer(chunk(msg, len(msg))); err != nil {
		t.Fatal(err)
	}
	whole.StripVig(chunk(msg, len(msg))).Free()
	head, ok := h.ParseInferHead(chunk(msg, len(msg)-500), len(msg))
	if !ok {
		t.Fatal("head not found")
	}
	h.StripVig(chunk(msg[:head], head)).Free()
	var s RawScan
	s.Start(&h, head)
	if err := s.Scan(msg[head:]); err != nil {
		t.Fatal(err)
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	s.Fill(&h)
	if h.Raw[0] != whole.Raw[0] {
		t.Fatalf("raw span %+v, ParseInfer and StripVig %+v", h.Raw[0], whole.Raw[0])
	}
}

func TestRawScanRefuses(t *testing.T) {
	good, _ := proto.Marshal(sampleRequest(1000))
	// A field after raw_input_contents (valid protobuf, not what encoders write).
	late := protowire.AppendTag(bytes.Clone(good), 3, protowire.BytesType)
	late = protowire.AppendString(late, "late-id")
	// The message ends inside a second entry's header.
	short := append(bytes.Clone(good), 7<<3|2)
	// Two inputs, one raw entry: the second has no data.
	r := sampleRequest(1000)
	r.Inputs = append(r.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: "MASK", Datatype: "UINT8", Shape: []int64{3}})
	two, _ := proto.Marshal(r)
	for _, c := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"field after raw_input_contents", late, ErrRawNotLast},
		{"truncated", short, ErrMalformed},
		{"one raw entry for two inputs", two, nil},
	} {
		var h InferHeader
		ok, err := readByHead(&h, c.msg, 200, 64)
		if !ok || err == nil {
			t.Errorf("%s: ok %v err %v, want refused", c.name, ok, err)
			continue
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzParseInferHead: reading a request by its head and then scanning the rest
// agrees with ParseInfer of the whole: whatever it accepts ParseInfer accepts,
// with the same header; what ParseInfer refuses it refuses (or does not take
// as a head); it refuses a message ParseInfer accepts only for ErrRawNotLast.
func FuzzParseInferHead(f *testing.F) {
	good, _ := proto.Marshal(sampleRequest(64))
	f.Add(good, uint16(40), uint8(5))
	f.Add(protowire.AppendBytes(protowire.AppendTag(bytes.Clone(good), 7, protowire.BytesType), nil), uint16(300), uint8(1))
	f.Add([]byte{0x0a, 0x01, 'm', 0x3a, 0x00}, uint16(4), uint8(1))
	f.Fuzz(func(t *testing.T, msg []byte, got uint16, step uint8) {
		defer fuzztest.Bound(t)()
		var whole, h InferHeader
		wholeErr := whole.ParseInfer(chunk(msg, 5, 16384))
		ok, err := readByHead(&h, msg, int(got), int(step)+1)
		switch {
		case !ok:
		case err == nil && wholeErr != nil:
			t.Fatalf("the head path accepts what ParseInfer refuses (%v)", wholeErr)
		case err == nil:
			if string(h.Model) != string(whole.Model) || string(h.ID) != string(whole.ID) ||
				string(h.Stream) != string(whole.Stream) || h.Capture != whole.Capture ||
				h.RawInputs != whole.RawInputs || h.RawBytes != whole.RawBytes ||
				len(h.Inputs) != len(whole.Inputs) || len(h.Outputs) != len(whole.Outputs) {
				t.Fatalf("head path read %s, ParseInfer %s", describe(&h), describe(&whole))
			}
		case wholeErr == nil && !errors.Is(err, ErrRawNotLast):
			t.Fatalf("the head path refuses what ParseInfer accepts: %v", err)
		}
	})
}

func describe(h *InferHeader) string {
	return fmt.Sprintf("model %q id %q stream %q capture %d raw %d/%d bytes inputs %d outputs %d size %d",
		h.Model, h.ID, h.Stream, h.Capture, h.RawInputs, h.RawBytes, len(h.Inputs), len(h.Outputs), h.Size)
}
