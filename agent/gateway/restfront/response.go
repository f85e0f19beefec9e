package restfront

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

// The infer answer: the backend's ModelInferResponse as Triton's HTTP server
// writes it. Outputs asked for in binary carry parameter binary_data_size and
// their raw bytes follow the JSON header in output order (the header's length
// in Inference-Header-Content-Length); the others carry a JSON "data" array.
// An output written to shared memory carries neither parameters nor data. As
// at Triton, only a binary output has "parameters" (binary_data_size, which
// Triton's C++ client requires wherever "parameters" is present): the
// backend's parameters of an output go with it there, and nowhere else.

// answer is an encoded infer answer: the JSON header, then the binary parts.
type answer struct {
	json   []byte
	binary [][]byte
}

// encodeAnswer turns the backend's answer b into the HTTP answer for req.
func encodeAnswer(b []byte, req *inferRequest) (*answer, error) {
	var r pb.ModelInferResponse
	if err := proto.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("backend answer: %v", err)
	}
	if len(r.RawOutputContents) != 0 && len(r.RawOutputContents) != len(r.Outputs) {
		return nil, fmt.Errorf("backend answer: %d raw_output_contents for %d outputs", len(r.RawOutputContents), len(r.Outputs))
	}
	a := &answer{}
	j := append(make([]byte, 0, 256), `{"model_name":`...)
	j = appendString(j, []byte(r.ModelName))
	j = append(j, `,"model_version":`...)
	j = appendString(j, []byte(r.ModelVersion))
	if r.Id != "" {
		j = append(j, `,"id":`...)
		j = appendString(j, []byte(r.Id))
	}
	if len(r.Parameters) > 0 {
		j = append(j, `,"parameters":`...)
		j = appendParams(j, r.Parameters, nil)
	}
	j = append(j, `,"outputs":[`...)
	for i, o := range r.Outputs {
		if i > 0 {
			j = append(j, ',')
		}
		j = append(j, `{"name":`...)
		j = appendString(j, []byte(o.Name))
		j = append(j, `,"datatype":`...)
		j = appendString(j, []byte(o.Datatype))
		j = append(j, `,"shape":[`...)
		for k, d := range o.Shape {
			if k > 0 {
				j = append(j, ',')
			}
			j = strconv.AppendInt(j, d, 10)
		}
		j = append(j, ']')
		var raw []byte
		if len(r.RawOutputContents) > 0 {
			raw = r.RawOutputContents[i]
		} else if o.Contents != nil {
			var err error
			if raw, err = contentsBytes(o.Datatype, o.Contents); err != nil {
				return nil, fmt.Errorf("output '%s': %v", o.Name, err)
			}
		}
		if _, ok := req.shmOut[o.Name]; ok {
			j = append(j, '}') // its data is in the region: no parameters, no data
			continue
		}
		binary, named := req.binaryOut[o.Name]
		if !named {
			binary = req.allBinary
		}
		if binary {
			j = append(j, `,"parameters":`...)
			j = appendParams(j, o.Parameters, &binarySize{int64(len(raw))})
			a.binary = append(a.binary, raw)
		} else {
			j = append(j, `,"data":`...)
			var err error
			if j, err = appendData(j, o.Datatype, raw); err != nil {
				return nil, &errRequest{fmt.Sprintf("output '%s': %v", o.Name, err)}
			}
		}
		j = append(j, '}')
	}
	a.json = append(j, "]}"...)
	return a, nil
}

type binarySize struct{ n int64 }

// appendParams appends Triton parameters as a JSON object (keys sorted), with
// binary_data_size last when extra is set.
func appendParams(j []byte, ps map[string]*pb.InferParameter, extra *binarySize) []byte {
	keys := make([]string, 0, len(ps))
	for k := range ps {
		if extra != nil && k == paramBinarySize {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	j = append(j, '{')
	for i, k := range keys {
		if i > 0 {
			j = append(j, ',')
		}
		j = appendString(j, []byte(k))
		j = append(j, ':')
		switch v := ps[k].GetParameterChoice().(type) {
		case *pb.InferParameter_BoolParam:
			j = strconv.AppendBool(j, v.BoolParam)
		case *pb.InferParameter_Int64Param:
			j = strconv.AppendInt(j, v.Int64Param, 10)
		case *pb.InferParameter_Uint64Param:
			j = strconv.AppendUint(j, v.Uint64Param, 10)
		case *pb.InferParameter_DoubleParam:
			if math.IsNaN(v.DoubleParam) || math.IsInf(v.DoubleParam, 0) {
				j = append(j, "null"...)
			} else {
				j = strconv.AppendFloat(j, v.DoubleParam, 'g', -1, 64)
			}
		case *pb.InferParameter_StringParam:
			j = appendString(j, []byte(v.StringParam))
		default:
			j = append(j, "null"...)
		}
	}
	if extra != nil {
		if len(keys) > 0 {
			j = append(j, ',')
		}
		j = append(j, `"binary_data_size":`...)
		j = strconv.AppendInt(j, extra.n, 10)
	}
	return append(j, '}')
}

// contentsBytes converts typed InferTensorContents (a backend that does not
// answer raw_output_contents) into the raw little-endian bytes.
func contentsBytes(dt string, c *pb.InferTensorContents) ([]byte, error) {
	var b []byte
	size, ok := elemSize(dt)
	if !ok {
		return nil, fmt.Errorf("unknown datatype %q", dt)
	}
	switch dt {
	case "BOOL":
		for _, v := range c.BoolContents {
			b = appendLE(b, map[bool]uint64{false: 0, true: 1}[v], 1)
		}
	case "INT8", "INT16", "INT32":
		for _, v := range c.IntContents {
			b = appendLE(b, uint64(v), size)
		}
	case "INT64":
		for _, v := range c.Int64Contents {
			b = appendLE(b, uint64(v), 8)
		}
	case "UINT8", "UINT16", "UINT32":
		for _, v := range c.UintContents {
			b = appendLE(b, uint64(v), size)
		}
	case "UINT64":
		for _, v := range c.Uint64Contents {
			b = appendLE(b, v, 8)
		}
	case "FP32":
		for _, v := range c.Fp32Contents {
			b = appendLE(b, uint64(math.Float32bits(v)), 4)
		}
	case "FP64":
		for _, v := range c.Fp64Contents {
			b = appendLE(b, math.Float64bits(v), 8)
		}
	case "BYTES":
		for _, v := range c.BytesContents {
			b = appendLE(b, uint64(len(v)), 4)
			b = append(b, v...)
		}
	default:
		return nil, fmt.Errorf("%s has no typed contents", dt)
	}
	return b, nil
}
