package restfront_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"regexp"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vig-edge/vig/agent/gateway/restfront"
	pb "github.com/vig-edge/vig/proto/inference"
)

// recordingBackend answers ModelInfer and keeps the last request.
type recordingBackend struct {
	pb.UnimplementedGRPCInferenceServiceServer
	last chan *pb.ModelInferRequest
	md   metadata.MD // of the last request
}

func (b *recordingBackend) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	b.md, _ = metadata.FromIncomingContext(ctx)
	b.last <- req
	return &pb.ModelInferResponse{ModelName: req.ModelName, Id: req.Id,
		Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "OUTPUT0", Datatype: "INT64", Shape: []int64{1}}},
		RawOutputContents: [][]byte{binary.LittleEndian.AppendUint64(nil, 1)}}, nil
}

// Headers whose names match the forward pattern reach the backend as string
// parameters (Triton's --http-header-forward-pattern); others do not. The
// trace context (traceparent) goes on as gRPC metadata.
func TestForwardHeaders(t *testing.T) {
	rb := &recordingBackend{last: make(chan *pb.ModelInferRequest, 1)}
	r := newRig(t, restfront.Options{ForwardHeaders: regexp.MustCompile("^x-fwd-")},
		func(s *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(s, rb) })
	body, h := binaryBody(t, obj{"id": id(1), "parameters": obj{"x-fwd-json": "from json"},
		"inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{4}, "parameters": obj{"binary_data_size": 4}}}}, []byte{1, 2, 3, 4})
	h["X-Fwd-User"] = "alice"
	h["X-Fwd-Json"] = "from a header"
	h["X-Other"] = "kept back"
	h["Traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if rep := r.do(t, "POST", "/v2/models/det/infer", body, h); rep.code != http.StatusOK {
		t.Fatalf("HTTP %d %s", rep.code, rep.body)
	}
	req := <-rb.last
	if p := req.Parameters["x-fwd-user"]; p.GetStringParam() != "alice" {
		t.Errorf("x-fwd-user: %v, want string_param alice", p)
	}
	if p := req.Parameters["x-fwd-json"]; p.GetStringParam() != "from json" {
		t.Errorf("x-fwd-json: %v, want the JSON header's own parameter to win", p)
	}
	if _, ok := req.Parameters["x-other"]; ok {
		t.Errorf("x-other forwarded: it does not match the pattern")
	}
	if tp := rb.md.Get("traceparent"); len(tp) != 1 || tp[0] != h["Traceparent"] {
		t.Errorf("traceparent metadata at the backend %q, want %q", tp, h["Traceparent"])
	}
	if len(req.RawInputContents) != 1 || len(req.RawInputContents[0]) != 4 {
		t.Errorf("raw entries %d, want the one binary input's", len(req.RawInputContents))
	}
}

// A sequence_id above 2^63-1 reaches the backend as the int64_param of the
// same bits (Triton's gRPC refuses a uint64_param sequence_id; its
// correlation id is the uint64 of those bits).
func TestLargeSequenceID(t *testing.T) {
	rb := &recordingBackend{last: make(chan *pb.ModelInferRequest, 1)}
	r := newRig(t, restfront.Options{}, func(s *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(s, rb) })
	body := []byte(`{"id":"cam#1","parameters":{"sequence_id":18446744073709551615,"sequence_start":true},` +
		`"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[1],"data":[1]}]}`)
	if rep := r.do(t, "POST", "/v2/models/det/infer", body, nil); rep.code != http.StatusOK {
		t.Fatalf("HTTP %d %s", rep.code, rep.body)
	}
	p := (<-rb.last).Parameters["sequence_id"]
	if v, ok := p.GetParameterChoice().(*pb.InferParameter_Int64Param); !ok || uint64(v.Int64Param) != 18446744073709551615 {
		t.Errorf("sequence_id %v, want int64_param -1 (the bits of 2^64-1)", p)
	}
}

// configBackend is a recordingBackend whose models have the configuration
// cfg (Triton's ModelConfig message).
type configBackend struct {
	recordingBackend
	cfg []byte
}

func (b *configBackend) ModelConfig(context.Context, *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	return &pb.ModelConfigResponse{Config: b.cfg}, nil
}

// modelConfig encodes a ModelConfig{max_batch_size = 4, input = 5
// {name = 1, data_type = 2, dims = 4}} with the given inputs.
func modelConfig(maxBatch uint64, inputs ...struct {
	name     string
	dataType uint64
	dims     []int64
}) []byte {
	var b []byte
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, maxBatch)
	for _, in := range inputs {
		var m, dims []byte
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendString(m, in.name)
		m = protowire.AppendTag(m, 2, protowire.VarintType)
		m = protowire.AppendVarint(m, in.dataType)
		for _, d := range in.dims {
			dims = protowire.AppendVarint(dims, uint64(d))
		}
		m = protowire.AppendTag(m, 4, protowire.BytesType)
		m = protowire.AppendBytes(m, dims)
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b
}

// The raw binary request takes its input's name, datatype and shape from the
// configuration as Triton's AddRawInput does.
func TestRawBinaryShapes(t *testing.T) {
	type input = struct {
		name     string
		dataType uint64
		dims     []int64
	}
	const typeFP32, typeString = 11, 13
	for _, c := range []struct {
		name  string
		cfg   []byte
		body  []byte
		code  int
		dt    string
		shape []int64
		raw   []byte
	}{
		{"batching, one variable dim", modelConfig(8, input{"X", typeFP32, []int64{3, -1}}), make([]byte, 24), 200, "FP32", []int64{1, 3, 2}, make([]byte, 24)},
		{"fixed dims", modelConfig(0, input{"X", typeFP32, []int64{2}}), make([]byte, 8), 200, "FP32", []int64{2}, make([]byte, 8)},
		{"BYTES of one element", modelConfig(0, input{"S", typeString, []int64{1}}), []byte("hello"), 200, "BYTES", []int64{1}, []byte("\x05\x00\x00\x00hello")},
		{"BYTES of a variable dim", modelConfig(0, input{"S", typeString, []int64{-1}}), []byte("hello"), 400, "", nil, nil},
		{"two variable dims", modelConfig(0, input{"X", typeFP32, []int64{-1, -1}}), make([]byte, 8), 400, "", nil, nil},
		{"not whole elements", modelConfig(0, input{"X", typeFP32, []int64{-1}}), make([]byte, 7), 400, "", nil, nil},
		{"two inputs", modelConfig(0, input{"X", typeFP32, []int64{-1}}, input{"Y", typeFP32, []int64{-1}}), make([]byte, 8), 400, "", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cb := &configBackend{recordingBackend: recordingBackend{last: make(chan *pb.ModelInferRequest, 1)}, cfg: c.cfg}
			r := newRig(t, restfront.Options{}, func(s *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(s, cb) })
			rep := r.do(t, "POST", "/v2/models/det/infer", c.body, map[string]string{"Inference-Header-Content-Length": "0"})
			if rep.code != c.code {
				t.Fatalf("HTTP %d %s, want %d", rep.code, rep.body, c.code)
			}
			if c.code != 200 {
				return
			}
			req := <-cb.last
			in := req.Inputs[0]
			if len(req.Inputs) != 1 || in.Datatype != c.dt || !slices.Equal(in.Shape, c.shape) || len(req.RawInputContents) != 1 || !bytes.Equal(req.RawInputContents[0], c.raw) {
				t.Errorf("backend got input %v with raw %q, want %s %v with %q", in, req.RawInputContents, c.dt, c.shape, c.raw)
			}
		})
	}
}
