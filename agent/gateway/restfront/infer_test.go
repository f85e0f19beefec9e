package restfront_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/vig-edge/vig/agent/gateway/restfront"
	"github.com/vig-edge/vig/mockbackend"
	pb "github.com/vig-edge/vig/proto/inference"
)

type obj = map[string]any

// Binary tensors of 0 B, 150 KB and 6.2 MB: the backend sees exactly their bytes
// (the mock's digest), and the answer's binary output is byte-equal to what the
// gRPC frontend answers for the same frame.
func TestInferBinary(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	g := r.grpcClient(t)
	for i, n := range []int{0, 150_000, 6_200_000} {
		frame := uint64(i + 1)
		data := frameBytes(n, byte(i))
		hdr := obj{"id": id(frame), "parameters": obj{"vig_stream": "cam"},
			"inputs":  []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{n}, "parameters": obj{"binary_data_size": n}}},
			"outputs": []obj{{"name": "OUTPUT0", "parameters": obj{"binary_data": true}}}}
		body, h := binaryBody(t, hdr, data)
		rep := r.do(t, "POST", "/v2/models/det/infer", body, h)
		m, bin := splitAnswer(t, rep)
		want := output0(mockbackend.Digest([][]byte{data}), frame)
		if !bytes.Equal(bin, want) {
			t.Errorf("%d B: binary output %x, want %x", n, bin, want)
		}
		outs := m["outputs"].([]any)
		o := outs[0].(obj)
		if m["model_name"] != "det" || m["id"] != id(frame) || o["name"] != "OUTPUT0" || o["datatype"] != "INT64" ||
			o["parameters"].(obj)["binary_data_size"] != json.Number("16") {
			t.Errorf("%d B: answer header %v", n, m)
		}
		// The gRPC path, same frame.
		resp, err := g.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "det", Id: id(frame),
			Parameters:       map[string]*pb.InferParameter{"vig_stream": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "cam"}}},
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{int64(n)}}},
			RawInputContents: [][]byte{data}})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp.RawOutputContents[0], bin) {
			t.Errorf("%d B: gRPC answered %x, HTTP %x", n, resp.RawOutputContents[0], bin)
		}
	}
}

// jsonCase is a JSON "data" array and the bytes Triton makes of it.
type jsonCase struct {
	dt   string
	data any
	want []byte
}

func le(vs ...uint64) func(size int) []byte {
	return func(size int) []byte {
		var b []byte
		for _, v := range vs {
			switch size {
			case 1:
				b = append(b, byte(v))
			case 2:
				b = binary.LittleEndian.AppendUint16(b, uint16(v))
			case 4:
				b = binary.LittleEndian.AppendUint32(b, uint32(v))
			default:
				b = binary.LittleEndian.AppendUint64(b, v)
			}
		}
		return b
	}
}

func bytesElems(ss ...string) []byte {
	var b []byte
	for _, s := range ss {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

var jsonCases = []jsonCase{
	{"BOOL", []any{true, false, true, true}, []byte{1, 0, 1, 1}},
	{"UINT8", []any{0, 1, 255, 7}, le(0, 1, 255, 7)(1)},
	{"INT8", []any{-128, -1, 0, 127}, le(0x80, 0xff, 0, 127)(1)},
	{"UINT16", []any{0, 65535, 2, 3}, le(0, 65535, 2, 3)(2)},
	{"INT16", []any{-32768, -1, 0, 32767}, le(0x8000, 0xffff, 0, 32767)(2)},
	{"UINT32", []any{0, 4294967295, 2, 3}, le(0, 4294967295, 2, 3)(4)},
	{"INT32", []any{-2147483648, -1, 0, 2147483647}, le(0x80000000, 0xffffffff, 0, 2147483647)(4)},
	{"UINT64", []any{json.Number("18446744073709551615"), 0, 1, 2}, le(math.MaxUint64, 0, 1, 2)(8)},
	{"INT64", []any{json.Number("-9223372036854775808"), -1, 0, json.Number("9223372036854775807")}, le(1<<63, math.MaxUint64, 0, math.MaxInt64)(8)},
	{"FP32", []any{1.5, -0.25, 3.4028234663852886e38, 1e-45},
		le(uint64(math.Float32bits(1.5)), uint64(math.Float32bits(-0.25)), uint64(math.Float32bits(math.MaxFloat32)), uint64(math.Float32bits(1e-45)))(4)},
	{"FP64", []any{1.5, -0.1, 1e300, 5e-324}, le(math.Float64bits(1.5), math.Float64bits(-0.1), math.Float64bits(1e300), math.Float64bits(5e-324))(8)},
	{"BYTES", []any{"a", "héllo", "\x00x\"\\", ""}, bytesElems("a", "héllo", "\x00x\"\\", "")},
}

// JSON tensors of every datatype Triton carries in JSON, nested and flat: the
// backend sees the bytes Triton would make of them (the digest of the same bytes
// sent raw over gRPC), and the JSON output is the gRPC output's values.
func TestInferJSONDatatypes(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	g := r.grpcClient(t)
	for i, c := range jsonCases {
		t.Run(c.dt, func(t *testing.T) {
			frame := uint64(100 + i)
			nested := []any{c.data.([]any)[:2], c.data.([]any)[2:]} // shape [2, 2], sent nested
			for k, data := range []any{c.data, nested} {
				hdr := obj{"id": id(frame), "parameters": obj{"vig_stream": "cam"},
					"inputs": []obj{{"name": "INPUT0", "datatype": c.dt, "shape": []int{2, 2}, "data": data}}}
				body, _ := json.Marshal(hdr)
				rep := r.do(t, "POST", "/v2/models/det/infer", body, nil)
				m, bin := splitAnswer(t, rep)
				if len(bin) != 0 || rep.header.Get("Content-Type") != "application/json" {
					t.Fatalf("JSON request answered %d binary bytes, Content-Type %q", len(bin), rep.header.Get("Content-Type"))
				}
				o := m["outputs"].([]any)[0].(obj)
				got := o["data"].([]any)
				digest := mockbackend.Digest([][]byte{c.want})
				if len(got) != 2 || got[0] != json.Number(strconv.FormatInt(int64(digest), 10)) || got[1] != json.Number(strconv.FormatUint(frame, 10)) {
					t.Errorf("form %d: data %v, want [%d %d] (the digest of %x)", k, got, digest, frame, c.want)
				}
			}
			resp, err := g.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "det", Id: id(frame),
				Parameters:       map[string]*pb.InferParameter{"vig_stream": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "cam"}}},
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: c.dt, Shape: []int64{2, 2}}},
				RawInputContents: [][]byte{c.want}})
			if err != nil {
				t.Fatal(err)
			}
			if want := output0(mockbackend.Digest([][]byte{c.want}), frame); !bytes.Equal(resp.RawOutputContents[0], want) {
				t.Errorf("gRPC path: %x, want %x", resp.RawOutputContents[0], want)
			}
		})
	}
}

// FP16 and BF16 travel as binary data only, as Triton has them: JSON data is
// refused (400, nothing forwarded), binary data goes through untouched.
func TestInferHalfFloats(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	for _, dt := range []string{"FP16", "BF16"} {
		before := r.toBack.Load()
		body, _ := json.Marshal(obj{"inputs": []obj{{"name": "INPUT0", "datatype": dt, "shape": []int{2}, "data": []float64{1, 2}}}})
		rep := r.do(t, "POST", "/v2/models/det/infer", body, nil)
		if rep.code != http.StatusBadRequest || !bytes.Contains(rep.body, []byte("binary")) {
			t.Errorf("%s JSON data: HTTP %d %s, want 400 naming the binary data extension", dt, rep.code, rep.body)
		}
		if d := r.toBack.Load() - before; d >= maxControlBytes {
			t.Errorf("%s JSON data: %d bytes forwarded to the backend", dt, d)
		}
		data := []byte{0x00, 0x3c, 0x00, 0x40} // 1.0, 2.0 in FP16
		body, h := binaryBody(t, obj{"id": id(7), "parameters": obj{"vig_stream": "cam"},
			"inputs": []obj{{"name": "INPUT0", "datatype": dt, "shape": []int{2}, "parameters": obj{"binary_data_size": 4}}}}, data)
		m, _ := splitAnswer(t, r.do(t, "POST", "/v2/models/det/infer", body, h))
		got := m["outputs"].([]any)[0].(obj)["data"].([]any)
		if d := mockbackend.Digest([][]byte{data}); got[0] != json.Number(strconv.FormatInt(int64(d), 10)) {
			t.Errorf("%s binary: digest %v, want %d", dt, got[0], d)
		}
	}
}

// A detector's FP32 and INT32 outputs in JSON are the values of its binary
// outputs; binary_data_output asks for all of them in binary.
func TestInferOutputsJSONAndBinary(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	data := frameBytes(1000, 3)
	want := mockbackend.DetectorOutputs(mockbackend.Digest([][]byte{data}), 42)
	in := []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{1000}, "parameters": obj{"binary_data_size": 1000}}}

	body, h := binaryBody(t, obj{"id": "cam_detector#42", "inputs": in}, data)
	m, bin := splitAnswer(t, r.do(t, "POST", "/v2/models/cam_detector/infer", body, h))
	if len(bin) != 0 {
		t.Errorf("%d binary bytes without binary outputs asked", len(bin))
	}
	outs := m["outputs"].([]any)
	for i, w := range want {
		o := outs[i].(obj)
		vals := o["data"].([]any)
		var got []byte
		for _, v := range vals {
			n := v.(json.Number)
			if w.Datatype == "FP32" {
				f, _ := n.Float64()
				got = binary.LittleEndian.AppendUint32(got, math.Float32bits(float32(f)))
			} else {
				k, _ := n.Int64()
				got = binary.LittleEndian.AppendUint32(got, uint32(int32(k)))
			}
		}
		var shape []int64
		for _, d := range o["shape"].([]any) {
			k, _ := d.(json.Number).Int64()
			shape = append(shape, k)
		}
		if o["name"] != w.Name || o["datatype"] != w.Datatype || !slices.Equal(shape, w.Shape) || !bytes.Equal(got, w.Data) {
			t.Errorf("output %d: %v, want %s %s %v %x", i, o, w.Name, w.Datatype, w.Shape, w.Data)
		}
	}

	body, h = binaryBody(t, obj{"id": "cam_detector#42", "inputs": in, "parameters": obj{"binary_data_output": true}}, data)
	m, bin = splitAnswer(t, r.do(t, "POST", "/v2/models/cam_detector/infer", body, h))
	var all []byte
	for _, w := range want {
		all = append(all, w.Data...)
	}
	if !bytes.Equal(bin, all) {
		t.Errorf("binary outputs %x, want %x", bin, all)
	}
	for i, o := range m["outputs"].([]any) {
		if _, ok := o.(obj)["data"]; ok {
			t.Errorf("output %d has JSON data beside binary_data_output", i)
		}
	}

	// Named outputs: binary_data_output for those without binary_data, their
	// own binary_data for the others.
	body, h = binaryBody(t, obj{"id": "cam_detector#42", "inputs": in, "parameters": obj{"binary_data_output": true},
		"outputs": []obj{{"name": "boxes"}, {"name": "scores", "parameters": obj{"binary_data": false}}}}, data)
	m, bin = splitAnswer(t, r.do(t, "POST", "/v2/models/cam_detector/infer", body, h))
	outs = m["outputs"].([]any)
	if len(outs) != 2 || !bytes.Equal(bin, want[0].Data) || outs[0].(obj)["data"] != nil || outs[1].(obj)["data"] == nil {
		t.Errorf("boxes in binary, scores in JSON: %v, %d binary bytes", outs, len(bin))
	}
}

// The raw binary request (Inference-Header-Content-Length: 0): the body is
// the model's one input, named and shaped from its configuration.
func TestRawBinaryRequest(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	data := frameBytes(1000, 3)
	m, _ := splitAnswer(t, r.do(t, "POST", "/v2/models/det/infer", data, map[string]string{"Inference-Header-Content-Length": "0"}))
	out := m["outputs"].([]any)[0].(obj)
	d := out["data"].([]any)
	want := int64(mockbackend.Digest([][]byte{data}))
	if fmt.Sprint(d[0]) != strconv.FormatInt(want, 10) {
		t.Errorf("output %v, want the digest %d of the body as INPUT0", out, want)
	}
}
