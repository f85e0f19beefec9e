package restfront

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// The model configuration as JSON. vig's protocol carries ModelConfig as opaque
// bytes (it forwards it, never interprets it); for the HTTP answer it reads the
// fields a client looks at from Triton's model_config.proto: ModelConfig{name=1,
// platform=2, max_batch_size=4, input=5, output=6, backend=17}, ModelInput{name=1,
// data_type=2, dims=4}, ModelOutput{name=1, data_type=2, dims=3}. The other
// fields (instance groups, batching, optimization…) are left out of the answer.

type modelIO struct {
	Name     string  `json:"name"`
	DataType string  `json:"data_type"`
	Dims     []int64 `json:"dims"`
}

type modelConfig struct {
	Name         string    `json:"name"`
	Platform     string    `json:"platform"`
	Backend      string    `json:"backend"`
	MaxBatchSize int32     `json:"max_batch_size"`
	Input        []modelIO `json:"input"`
	Output       []modelIO `json:"output"`
}

// dataTypes are the names of model_config.proto's DataType values.
var dataTypes = []string{"TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64",
	"TYPE_INT8", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16"}

func decodeModelConfig(b []byte) (*modelConfig, error) {
	c := &modelConfig{Input: []modelIO{}, Output: []modelIO{}}
	err := fields(b, func(num protowire.Number, v []byte, x uint64) error {
		switch num {
		case 1:
			c.Name = string(v)
		case 2:
			c.Platform = string(v)
		case 17:
			c.Backend = string(v)
		case 4:
			c.MaxBatchSize = int32(x)
		case 5, 6:
			io := modelIO{Dims: []int64{}}
			dimsField := protowire.Number(4)
			if num == 6 {
				dimsField = 3
			}
			if err := fields(v, func(n protowire.Number, v []byte, x uint64) error {
				switch {
				case n == 1:
					io.Name = string(v)
				case n == 2:
					if x < uint64(len(dataTypes)) {
						io.DataType = dataTypes[x]
					} else {
						io.DataType = fmt.Sprintf("TYPE_%d", x)
					}
				case n == dimsField && v != nil: // packed
					for len(v) > 0 {
						d, n := protowire.ConsumeVarint(v)
						if n < 0 {
							return protowire.ParseError(n)
						}
						io.Dims = append(io.Dims, int64(d))
						v = v[n:]
					}
				case n == dimsField:
					io.Dims = append(io.Dims, int64(x))
				}
				return nil
			}); err != nil {
				return err
			}
			if num == 5 {
				c.Input = append(c.Input, io)
			} else {
				c.Output = append(c.Output, io)
			}
		}
		return nil
	})
	return c, err
}

// fields calls fn with each field of message b: v for length-delimited fields
// (never nil, even when empty), x for varints.
func fields(b []byte, fn func(num protowire.Number, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if v == nil {
				v = []byte{}
			}
			if err := fn(num, v, 0); err != nil {
				return err
			}
			b = b[n:]
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if err := fn(num, nil, x); err != nil {
				return err
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
