package mockbackend

import (
	"context"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/internal/fuzztest"
	"github.com/vig-edge/vig/proto/inference"
)

// FuzzInfer feeds arbitrary request bytes (what a client controls) to the request
// checks and the shared-memory bounds: the server must answer every one with a
// Triton status code and never touch memory outside a region.
func FuzzInfer(f *testing.F) {
	s, err := New(Config{Models: []Model{{Name: "m"}}, Spin: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(shmDir); err == nil && fi.IsDir() {
		key := "/vig-mock-fuzz-" + randomSuffix()
		file, err := os.Create(shmDir + key)
		if err != nil {
			f.Fatal(err)
		}
		defer os.Remove(shmDir + key)
		defer file.Close()
		if err := file.Truncate(4096); err != nil {
			f.Fatal(err)
		}
		if err := s.shm.register(&inference.SystemSharedMemoryRegisterRequest{Name: "r", Key: key, Offset: 100, ByteSize: 1000}); err != nil {
			f.Fatal(err)
		}
	}
	seed := func(req *inference.ModelInferRequest) {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(rawRequest("m", "s#1", []byte("abc")))
	seed(&inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x",
		Parameters: map[string]*inference.InferParameter{paramRegion: str("r"), paramByteSize: i64(10), paramOffset: i64(990)}}},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: OutputName,
			Parameters: map[string]*inference.InferParameter{paramRegion: str("r"), paramByteSize: i64(16), paramOffset: i64(984)}}}})
	seed(&inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x",
		Contents: &inference.InferTensorContents{BytesContents: [][]byte{{1}}}}}})

	allowed := map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		var req inference.ModelInferRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		resp, err := s.infer(context.Background(), &req)
		if c := status.Code(err); !allowed[c] {
			t.Fatalf("code %v: %v", c, err)
		}
		if err != nil {
			return
		}
		if len(resp.RawOutputContents) != len(resp.Outputs) {
			t.Fatalf("%d outputs, %d raw entries", len(resp.Outputs), len(resp.RawOutputContents))
		}
		for _, raw := range resp.RawOutputContents {
			if len(raw) != 0 && len(raw) != outputBytes {
				t.Fatalf("raw output of %d bytes", len(raw))
			}
		}
	})
}
