package wire

import (
	"fmt"
	"hash/maphash"

	"google.golang.org/protobuf/encoding/protowire"
)

// Triton's sequence parameters (its sequence batcher): which sequence a request
// belongs to, and whether it starts or ends it.
const (
	ParamSequenceID    = "sequence_id"
	ParamSequenceStart = "sequence_start"
	ParamSequenceEnd   = "sequence_end"
)

// Sequence is what a request says of its sequence.
type Sequence struct {
	// ID names the sequence: its sequence_id, a string id hashed (never 0 for
	// a non-empty string); 0: the request belongs to no sequence.
	ID         uint64
	Start, End bool
}

// seqSeed hashes string sequence ids: fixed per process, which is as long as
// vig keeps sequence state.
var seqSeed = maphash.MakeSeed()

// Sequence reads the request's sequence parameters as Triton does: sequence_id
// an int64_param, uint64_param or string_param, sequence_start and sequence_end
// bool_params. The error is meant for the client.
func (h *InferHeader) Sequence() (Sequence, error) {
	var s Sequence
	if p, ok := h.Param(ParamSequenceID); ok {
		switch p.Kind {
		case ParamInt64:
			s.ID = uint64(p.Int)
		case ParamUint64:
			s.ID = p.Uint
		case ParamString:
			if len(p.Str) > 0 {
				s.ID = maphash.Bytes(seqSeed, p.Str) | 1 // never 0: 0 is "no sequence"
			}
		default:
			return s, fmt.Errorf("parameter %s must be an int64_param, uint64_param or string_param", ParamSequenceID)
		}
	}
	for _, f := range [2]struct {
		key string
		v   *bool
	}{{ParamSequenceStart, &s.Start}, {ParamSequenceEnd, &s.End}} {
		if p, ok := h.Param(f.key); ok {
			if p.Kind != ParamBool {
				return s, fmt.Errorf("parameter %s must be a bool_param", f.key)
			}
			*f.v = p.Bool
		}
	}
	return s, nil
}

// ModelInferRequest.parameters and the InferParameter oneof cases vig writes.
const (
	fieldInferParameters = 4 // ModelInferRequest.parameters (map<string, InferParameter>)
	fieldParamInt64      = 2 // InferParameter.int64_param
	fieldParamUint64     = 5 // InferParameter.uint64_param
)

// AppendInt64Param appends a request-level parameters entry key = v
// (int64_param) to b, an encoded ModelInferRequest or its end: protobuf
// parsers merge fields in any order, and for a map the last entry of a key
// wins, so appending overrides a value the client gave without re-encoding
// the message.
func AppendInt64Param(b []byte, key string, v int64) []byte {
	return appendParam(b, key, fieldParamInt64, uint64(v))
}

// AppendUint64Param is AppendInt64Param for a uint64_param.
func AppendUint64Param(b []byte, key string, v uint64) []byte {
	return appendParam(b, key, fieldParamUint64, v)
}

func appendParam(b []byte, key string, field protowire.Number, v uint64) []byte {
	val := protowire.SizeTag(field) + protowire.SizeVarint(v)
	entry := protowire.SizeTag(1) + protowire.SizeBytes(len(key)) + protowire.SizeTag(2) + protowire.SizeBytes(val)
	b = protowire.AppendTag(b, fieldInferParameters, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(entry))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(val))
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}
