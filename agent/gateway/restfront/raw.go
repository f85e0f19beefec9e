package restfront

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"

	pb "github.com/vig-edge/vig/proto/inference"
)

// The raw binary request of Triton's HTTP protocol: Inference-Header-Content-
// Length 0, and the whole body is the data of the model's one input. Triton
// takes the input's name, datatype and shape from the model configuration
// (TRITONSERVER_InferenceRequestAddRawInput): the batch dimension 1 when the
// model batches, then the configured dims, a variable one (-1) deduced from
// the body's size; a BYTES input must be of one element, its body the one
// string (length-prefixed here, as Triton does). vig asks the backend for the
// configuration (one ModelConfig call per such request; a logical model's is
// its first variant's, whose inputs every variant has) and sends the
// ModelInferRequest a gRPC client would have; every output is answered, as
// JSON.

// rawConfig is what the raw binary request needs of a model configuration.
type rawConfig struct {
	MaxBatchSize int64 `json:"max_batch_size"`
	Input        []struct {
		Name     string  `json:"name"`
		DataType string  `json:"data_type"`
		Dims     []int64 `json:"dims"`
	} `json:"input"`
}

func (f *Frontend) parseRaw(r *http.Request, model, version string, src *bodySrc) (*inferRequest, error) {
	var resp pb.ModelConfigResponse
	if err := f.call(r, "ModelConfig", &pb.ModelConfigRequest{Name: model, Version: version}, &resp); err != nil {
		return nil, err
	}
	js, err := decodeModelConfig(resp.Config)
	if err != nil {
		return nil, badRequest("model '%s': its configuration cannot be read for a raw binary request: %v", model, err)
	}
	var cfg rawConfig
	if err := json.Unmarshal(js, &cfg); err != nil {
		return nil, badRequest("model '%s': its configuration cannot be read for a raw binary request: %v", model, err)
	}
	if len(cfg.Input) != 1 {
		return nil, badRequest("'raw_input' can only be used with models having exactly one input; model '%s' has %d (send a JSON header: Inference-Header-Content-Length above 0)", model, len(cfg.Input))
	}
	in := cfg.Input[0]
	dt := strings.TrimPrefix(in.DataType, "TYPE_")
	if dt == "STRING" {
		dt = "BYTES"
	}
	size, known := elemSize(dt)
	if !known {
		return nil, badRequest("model '%s': input '%s' has datatype %s, which a raw binary request cannot carry", model, in.Name, in.DataType)
	}
	var shape []int64
	if cfg.MaxBatchSize != 0 {
		shape = append(shape, 1)
	}
	dynamic, count := -1, int64(1)
	for _, d := range in.Dims {
		if d == -1 {
			if dynamic >= 0 {
				return nil, badRequest("the shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension", in.Name)
			}
			dynamic = len(shape)
		} else {
			count *= d
		}
		shape = append(shape, d)
	}
	raw := entry{off: 0, n: src.n}
	switch {
	case dt == "BYTES":
		if dynamic >= 0 || count != 1 {
			return nil, badRequest("for BYTE datatype raw input '%s', the model must have input shape [1]", in.Name)
		}
		b := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+src.n), uint32(src.n))
		raw = entry{off: -1, b: append(b, src.bytes()...)}
	case dynamic >= 0:
		if count == 0 || int64(src.n)%(count*int64(size)) != 0 {
			return nil, badRequest("raw input '%s': %d bytes are not a whole number of %s elements of the configured shape %v", in.Name, src.n, dt, in.Dims)
		}
		shape[dynamic] = int64(src.n) / count / int64(size)
	}
	m := &pb.ModelInferRequest{ModelName: model, ModelVersion: version,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: in.Name, Datatype: dt, Shape: shape}}}
	msg, err := encode(m, []entry{raw}, src)
	if err != nil {
		return nil, err
	}
	return &inferRequest{msg: msg, binaryOut: map[string]bool{}}, nil
}
