package wire

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

func TestSequenceParams(t *testing.T) {
	b := func(v bool) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: v}}
	}
	for _, tc := range []struct {
		name    string
		params  map[string]*pb.InferParameter
		id      uint64 // 1: any non-zero
		start   bool
		end     bool
		wantErr bool
	}{
		{name: "none"},
		{name: "int64", params: map[string]*pb.InferParameter{"sequence_id": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 7}}, "sequence_start": b(true)}, id: 7, start: true},
		{name: "uint64 above int64", params: map[string]*pb.InferParameter{"sequence_id": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1 << 63}}, "sequence_end": b(true)}, id: 1 << 63, end: true},
		{name: "string", params: map[string]*pb.InferParameter{"sequence_id": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "cam"}}}, id: 1},
		{name: "empty string", params: map[string]*pb.InferParameter{"sequence_id": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: ""}}}},
		{name: "double id", params: map[string]*pb.InferParameter{"sequence_id": {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 1}}}, wantErr: true},
		{name: "int start", params: map[string]*pb.InferParameter{"sequence_start": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 1}}}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "m", Parameters: tc.params})
			if err != nil {
				t.Fatal(err)
			}
			var h InferHeader
			if err := h.ParseInfer(mem.BufferSlice{mem.SliceBuffer(msg)}); err != nil {
				t.Fatal(err)
			}
			s, err := h.Sequence()
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if (tc.id == 1 && s.ID == 0) || (tc.id != 1 && s.ID != tc.id) || s.Start != tc.start || s.End != tc.end {
				t.Errorf("%+v, want id %d start %v end %v", s, tc.id, tc.start, tc.end)
			}
		})
	}
}

// An appended entry overrides the client's own for a protobuf parser, and for
// vig's: the last entry of a key wins.
func TestAppendParamOverrides(t *testing.T) {
	msg, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "m", Parameters: map[string]*pb.InferParameter{
		"timeout": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 9000}}},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "UINT8", Shape: []int64{1}}}, RawInputContents: [][]byte{{1}}})
	if err != nil {
		t.Fatal(err)
	}
	msg = AppendInt64Param(msg, ParamTimeout, 1234)
	msg = AppendUint64Param(msg, ParamPriority, 2)
	var got pb.ModelInferRequest
	if err := proto.Unmarshal(msg, &got); err != nil {
		t.Fatal(err)
	}
	if got.Parameters["timeout"].GetInt64Param() != 1234 || got.Parameters["priority"].GetUint64Param() != 2 || len(got.RawInputContents) != 1 {
		t.Errorf("decoded %v", &got)
	}
	var h InferHeader
	if err := h.ParseInfer(mem.BufferSlice{mem.SliceBuffer(msg)}); err != nil {
		t.Fatal(err)
	}
	if p, ok := h.Param(ParamTimeout); !ok || p.Int != 1234 {
		t.Errorf("vig reads timeout %+v, want the last entry, 1234", p)
	}
}
