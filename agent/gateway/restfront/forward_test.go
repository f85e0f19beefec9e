package restfront_test

import (
	"context"
	"encoding/binary"
	"net/http"
	"regexp"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

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
