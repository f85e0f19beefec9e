package wire

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

// rawRuleCases are requests against Triton's rule on raw_input_contents (its
// gRPC server, src/grpc/infer_handler.cc, InferGRPCToInput): refuse is the
// error Triton gives, "" when it accepts the request. mockbackend's tests run
// the same shapes against the mock.
func rawRuleCases() []struct {
	name   string
	req    *pb.ModelInferRequest
	refuse string
} {
	shm := func(name string) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "UINT8", Shape: []int64{4},
			Parameters: map[string]*pb.InferParameter{ParamShmRegion: strParam("r"), ParamShmByteSize: intParam(4)}}
	}
	data := func(name string) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "UINT8", Shape: []int64{4}}
	}
	contents := func(name string) *pb.ModelInferRequest_InferInputTensor {
		t := data(name)
		t.Contents = &pb.InferTensorContents{UintContents: []uint32{1, 2, 3, 4}}
		return t
	}
	req := func(raw int, in ...*pb.ModelInferRequest_InferInputTensor) *pb.ModelInferRequest {
		r := &pb.ModelInferRequest{ModelName: "m", Inputs: in}
		for i := 0; i < raw; i++ {
			r.RawInputContents = append(r.RawInputContents, []byte{byte(i), 1, 2, 3})
		}
		return r
	}
	return []struct {
		name   string
		req    *pb.ModelInferRequest
		refuse string
	}{
		// What tritonclient.grpc sends for one input in shared memory and one as data.
		{"shm then data, one entry", req(1, shm("A"), data("B")), ""},
		{"data then shm, one entry", req(1, data("A"), shm("B")), ""},
		{"data, shm, data: two entries", req(2, data("A"), shm("B"), data("C")), ""},
		{"all in shm, no entry", req(0, shm("A"), shm("B")), ""},
		{"all contents, no entry", req(0, contents("A"), contents("B")), ""},
		{"contents and shm", req(0, contents("A"), shm("B")), ""},
		{"an entry left over (ignored)", req(2, shm("A"), data("B")), ""},
		{"one entry per input", req(2, data("A"), data("B")), ""},
		{"one entry for two data inputs", req(1, data("A"), data("B")), `input "B" has no data`},
		{"no entry, no contents", req(0, shm("A"), data("B")), `input "B" has no data`},
		{"contents beside an entry", req(1, contents("A"), data("B")), `input "A": contents must not be set`},
		{"entry for one, contents for the other", req(1, data("A"), contents("B")), `input "B": contents must not be set`},
	}
}

func TestRawRule(t *testing.T) {
	for _, c := range rawRuleCases() {
		msg, err := proto.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		var h InferHeader
		err = h.ParseInfer(chunk(msg, 5))
		check := func(path string, err error) {
			switch {
			case c.refuse == "" && err != nil:
				t.Errorf("%s (%s): refused: %v", c.name, path, err)
			case c.refuse != "" && (err == nil || !strings.Contains(err.Error(), c.refuse)):
				t.Errorf("%s (%s): err %v, want %q", c.name, path, err, c.refuse)
			}
		}
		check("ParseInfer", err)
		if len(c.req.RawInputContents) == 0 {
			continue // no head to forward ahead of raw entries
		}
		var hh InferHeader
		ok, err := readByHead(&hh, msg, len(msg), 3)
		if !ok {
			t.Errorf("%s: ParseInferHead found no head", c.name)
			continue
		}
		check("RawScan", err)
	}
}
