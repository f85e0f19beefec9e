package mockbackend

import (
	"encoding/binary"
	"math"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/proto/inference"
)

// DetectorSuffix marks a detector model: a model whose name ends with it (e.g.
// "yolo_detector") answers like an object detector, with three outputs of distinct
// datatypes and shapes instead of OUTPUT0:
//
//	boxes    FP32  [1, 3, 4]  box k = (d+4k, d+4k+1, d+4k+2, d+4k+3), d = digest mod 1000
//	scores   FP32  [1, 3]     score k = (frame mod 100)/100 + k/10
//	classes  INT32 [1, 3]     class k = byte k of the digest
//
// all little endian in raw_output_contents, where digest is Digest(inputs). A
// request may name any of the three as its outputs (answered in the order named);
// they cannot be placed in shared memory.
const DetectorSuffix = "_detector"

// IsDetector reports whether the mock serves model as a detector.
func IsDetector(model string) bool { return strings.HasSuffix(model, DetectorSuffix) }

// Output is one output tensor of a mock answer.
type Output struct {
	Name, Datatype string
	Shape          []int64
	Data           []byte
}

// The detector's outputs, in the order it answers them when none are named.
var detectorNames = []string{"boxes", "scores", "classes"}

// DetectorOutputs are a detector model's outputs for a frame whose inputs have
// the given Digest, in the order boxes, scores, classes.
func DetectorOutputs(digest, frame uint64) []Output {
	const n = 3
	boxes := make([]byte, 4*4*n)
	d := float32(digest % 1000)
	for k := range 4 * n {
		binary.LittleEndian.PutUint32(boxes[4*k:], math.Float32bits(d+float32(k)))
	}
	scores := make([]byte, 4*n)
	classes := make([]byte, 4*n)
	for k := range n {
		binary.LittleEndian.PutUint32(scores[4*k:], math.Float32bits(float32(frame%100)/100+float32(k)/10))
		binary.LittleEndian.PutUint32(classes[4*k:], uint32(int32(byte(digest>>(8*k)))))
	}
	return []Output{
		{Name: "boxes", Datatype: "FP32", Shape: []int64{1, n, 4}, Data: boxes},
		{Name: "scores", Datatype: "FP32", Shape: []int64{1, n}, Data: scores},
		{Name: "classes", Datatype: "INT32", Shape: []int64{1, n}, Data: classes},
	}
}

// prepareDetector checks a detector request's requested outputs.
func prepareDetector(j *job, m *model, req *inference.ModelInferRequest) error {
	for _, o := range req.Outputs {
		known := false
		for _, n := range detectorNames {
			known = known || o.Name == n
		}
		if !known {
			return status.Errorf(codes.InvalidArgument, "unexpected inference output '%s' for model '%s' (it has boxes, scores and classes)", o.Name, m.Name)
		}
		if sh, err := shmParams(o.Name, o.Parameters); err != nil {
			return err
		} else if sh.region != "" {
			return status.Errorf(codes.InvalidArgument, "output '%s' of model '%s': the mock's detector outputs cannot go to shared memory", o.Name, m.Name)
		}
		j.outputs = append(j.outputs, &output{name: o.Name})
	}
	return nil
}

// detectorOutputs are the outputs the job asked for (all three when it named none).
func detectorOutputs(j *job, digest, frame uint64) []Output {
	all := DetectorOutputs(digest, frame)
	if len(j.outputs) == 0 {
		return all
	}
	var out []Output
	for _, o := range j.outputs {
		for _, a := range all {
			if a.Name == o.name {
				out = append(out, a)
			}
		}
	}
	return out
}
