package restfront

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// The model configuration as JSON, as Triton's HTTP server answers
// GET /v2/models/{m}/config. vig's protocol carries ModelConfig as opaque bytes
// (it forwards them and never interprets them); for the HTTP answer it renders
// them from a description of Triton's model_config.proto (field numbers, names
// and enum names; configSchema below) the way Triton does: protobuf's JSON with
// the proto field names, every scalar and repeated field of a message present
// (defaults included), int64 values as numbers, messages only when present.
// Parts of the config no client reads (optimization, model_warmup,
// model_operations, model_repository_agents, model_metrics, the rate limiter and
// secondary devices of an instance group, the sequence batcher's settings) are
// left out, and fields of a newer Triton than vig knows are skipped.

type fieldKind int

const (
	kString fieldKind = iota
	kBool
	kInt32
	kInt64
	kUint32
	kUint64
	kEnum
	kMsg     // a message: msg
	kMapStr  // map<string, string>
	kMapMsg  // map<string, msg>
	kPresent // a message rendered as {} when present (its settings are not decoded)
)

type protoField struct {
	num      protowire.Number
	name     string
	kind     fieldKind
	repeated bool
	enum     []string
	msg      []protoField
}

// dataTypes are the names of model_config.proto's DataType values.
var dataTypes = []string{"TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64",
	"TYPE_INT8", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16"}

var (
	reshapeSchema = []protoField{{num: 1, name: "shape", kind: kInt64, repeated: true}}
	inputSchema   = []protoField{
		{num: 1, name: "name", kind: kString},
		{num: 2, name: "data_type", kind: kEnum, enum: dataTypes},
		{num: 3, name: "format", kind: kEnum, enum: []string{"FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"}},
		{num: 4, name: "dims", kind: kInt64, repeated: true},
		{num: 5, name: "reshape", kind: kMsg, msg: reshapeSchema},
		{num: 6, name: "is_shape_tensor", kind: kBool},
		{num: 7, name: "allow_ragged_batch", kind: kBool},
		{num: 8, name: "optional", kind: kBool},
		{num: 9, name: "is_non_linear_format_io", kind: kBool},
	}
	outputSchema = []protoField{
		{num: 1, name: "name", kind: kString},
		{num: 2, name: "data_type", kind: kEnum, enum: dataTypes},
		{num: 3, name: "dims", kind: kInt64, repeated: true},
		{num: 5, name: "reshape", kind: kMsg, msg: reshapeSchema},
		{num: 4, name: "label_filename", kind: kString},
		{num: 6, name: "is_shape_tensor", kind: kBool},
		{num: 7, name: "is_non_linear_format_io", kind: kBool},
	}
	batchInputSchema = []protoField{
		{num: 1, name: "kind", kind: kEnum, enum: []string{"BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT",
			"BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "BATCH_ITEM_SHAPE", "BATCH_ITEM_SHAPE_FLATTEN"}},
		{num: 2, name: "target_name", kind: kString, repeated: true},
		{num: 3, name: "data_type", kind: kEnum, enum: dataTypes},
		{num: 4, name: "source_input", kind: kString, repeated: true},
	}
	batchOutputSchema = []protoField{
		{num: 1, name: "target_name", kind: kString, repeated: true},
		{num: 2, name: "kind", kind: kEnum, enum: []string{"BATCH_SCATTER_WITH_INPUT_SHAPE"}},
		{num: 3, name: "source_input", kind: kString, repeated: true},
	}
	versionPolicySchema = []protoField{
		{num: 1, name: "latest", kind: kMsg, msg: []protoField{{num: 1, name: "num_versions", kind: kUint32}}},
		{num: 2, name: "all", kind: kMsg, msg: []protoField{}},
		{num: 3, name: "specific", kind: kMsg, msg: []protoField{{num: 1, name: "versions", kind: kInt64, repeated: true}}},
	}
	dynamicBatchingSchema = []protoField{
		{num: 1, name: "preferred_batch_size", kind: kInt32, repeated: true},
		{num: 2, name: "max_queue_delay_microseconds", kind: kUint64},
		{num: 3, name: "preserve_ordering", kind: kBool},
		{num: 4, name: "priority_levels", kind: kUint64},
	}
	ensembleSchema = []protoField{
		{num: 1, name: "step", kind: kMsg, repeated: true, msg: []protoField{
			{num: 1, name: "model_name", kind: kString},
			{num: 2, name: "model_version", kind: kInt64},
			{num: 3, name: "input_map", kind: kMapStr},
			{num: 4, name: "output_map", kind: kMapStr},
		}},
	}
	instanceGroupSchema = []protoField{
		{num: 1, name: "name", kind: kString},
		{num: 4, name: "kind", kind: kEnum, enum: []string{"KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"}},
		{num: 2, name: "count", kind: kInt32},
		{num: 3, name: "gpus", kind: kInt32, repeated: true},
		{num: 5, name: "profile", kind: kString, repeated: true},
		{num: 7, name: "passive", kind: kBool},
		{num: 9, name: "host_policy", kind: kString},
	}
	configSchema = []protoField{
		{num: 1, name: "name", kind: kString},
		{num: 2, name: "platform", kind: kString},
		{num: 17, name: "backend", kind: kString},
		{num: 25, name: "runtime", kind: kString},
		{num: 3, name: "version_policy", kind: kMsg, msg: versionPolicySchema},
		{num: 4, name: "max_batch_size", kind: kInt32},
		{num: 5, name: "input", kind: kMsg, repeated: true, msg: inputSchema},
		{num: 6, name: "output", kind: kMsg, repeated: true, msg: outputSchema},
		{num: 20, name: "batch_input", kind: kMsg, repeated: true, msg: batchInputSchema},
		{num: 21, name: "batch_output", kind: kMsg, repeated: true, msg: batchOutputSchema},
		{num: 11, name: "dynamic_batching", kind: kMsg, msg: dynamicBatchingSchema},
		{num: 13, name: "sequence_batching", kind: kPresent},
		{num: 15, name: "ensemble_scheduling", kind: kMsg, msg: ensembleSchema},
		{num: 7, name: "instance_group", kind: kMsg, repeated: true, msg: instanceGroupSchema},
		{num: 8, name: "default_model_filename", kind: kString},
		{num: 9, name: "cc_model_filenames", kind: kMapStr},
		{num: 10, name: "metric_tags", kind: kMapStr},
		{num: 14, name: "parameters", kind: kMapMsg, msg: []protoField{{num: 1, name: "string_value", kind: kString}}},
		{num: 19, name: "model_transaction_policy", kind: kMsg, msg: []protoField{{num: 1, name: "decoupled", kind: kBool}}},
		{num: 24, name: "response_cache", kind: kMsg, msg: []protoField{{num: 1, name: "enable", kind: kBool}}},
	}
)

// protoValue is one occurrence of a field: v for length-delimited, x for varints.
type protoValue struct {
	v []byte
	x uint64
}

// decodeModelConfig renders a ModelConfig message as Triton's JSON.
func decodeModelConfig(b []byte) (json.RawMessage, error) {
	var out bytes.Buffer
	if err := renderMessage(&out, b, configSchema); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func renderMessage(out *bytes.Buffer, b []byte, schema []protoField) error {
	seen := map[protowire.Number][]protoValue{}
	if err := fields(b, func(num protowire.Number, v []byte, x uint64) error {
		seen[num] = append(seen[num], protoValue{v, x})
		return nil
	}); err != nil {
		return err
	}
	out.WriteByte('{')
	first := true
	for _, f := range schema {
		vals, present := seen[f.num]
		if !present && (f.kind == kMsg && !f.repeated || f.kind == kPresent) {
			continue // an unset message is left out
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		writeString(out, f.name)
		out.WriteByte(':')
		if err := renderField(out, f, vals); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	out.WriteByte('}')
	return nil
}

func renderField(out *bytes.Buffer, f protoField, vals []protoValue) error {
	switch f.kind {
	case kPresent:
		out.WriteString("{}")
		return nil
	case kMapStr, kMapMsg:
		return renderMap(out, f, vals)
	}
	if !f.repeated {
		var last protoValue // proto3: the last occurrence wins; absent is the default
		have := len(vals) > 0
		if have {
			last = vals[len(vals)-1]
		}
		if f.kind == kMsg {
			return renderMessage(out, last.v, f.msg)
		}
		if have && last.v != nil && f.kind != kString {
			return fmt.Errorf("a length-delimited value for a scalar field")
		}
		renderScalar(out, f, last)
		return nil
	}
	out.WriteByte('[')
	n := 0
	for _, val := range vals {
		if f.kind == kMsg {
			if n > 0 {
				out.WriteByte(',')
			}
			if err := renderMessage(out, val.v, f.msg); err != nil {
				return err
			}
			n++
			continue
		}
		if val.v != nil && f.kind != kString { // packed varints
			for p := val.v; len(p) > 0; {
				x, k := protowire.ConsumeVarint(p)
				if k < 0 {
					return protowire.ParseError(k)
				}
				if n > 0 {
					out.WriteByte(',')
				}
				renderScalar(out, f, protoValue{x: x})
				n++
				p = p[k:]
			}
			continue
		}
		if n > 0 {
			out.WriteByte(',')
		}
		renderScalar(out, f, val)
		n++
	}
	out.WriteByte(']')
	return nil
}

// renderMap renders map entries (messages of key=1 and value=2) as an object,
// keys sorted as protobuf's JSON printer sorts them.
func renderMap(out *bytes.Buffer, f protoField, vals []protoValue) error {
	entries := map[string][]byte{}
	for _, val := range vals {
		var key string
		var value []byte
		if err := fields(val.v, func(num protowire.Number, v []byte, _ uint64) error {
			switch num {
			case 1:
				key = string(v)
			case 2:
				value = v
			}
			return nil
		}); err != nil {
			return err
		}
		entries[key] = value
	}
	out.WriteByte('{')
	for i, k := range sortedKeys(entries) {
		if i > 0 {
			out.WriteByte(',')
		}
		writeString(out, k)
		out.WriteByte(':')
		if f.kind == kMapStr {
			writeString(out, string(entries[k]))
			continue
		}
		if err := renderMessage(out, entries[k], f.msg); err != nil {
			return err
		}
	}
	out.WriteByte('}')
	return nil
}

func renderScalar(out *bytes.Buffer, f protoField, val protoValue) {
	switch f.kind {
	case kString:
		writeString(out, string(val.v))
	case kBool:
		out.WriteString(strconv.FormatBool(val.x != 0))
	case kInt32:
		out.WriteString(strconv.FormatInt(int64(int32(val.x)), 10))
	case kInt64:
		out.WriteString(strconv.FormatInt(int64(val.x), 10))
	case kUint32:
		out.WriteString(strconv.FormatUint(uint64(uint32(val.x)), 10))
	case kUint64:
		out.WriteString(strconv.FormatUint(val.x, 10))
	case kEnum:
		if val.x < uint64(len(f.enum)) {
			writeString(out, f.enum[val.x])
		} else {
			out.WriteString(strconv.FormatInt(int64(int32(val.x)), 10)) // a value this vig has no name for
		}
	}
}

func writeString(out *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // never fails for a string; invalid UTF-8 becomes U+FFFD
	out.Write(b)
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
