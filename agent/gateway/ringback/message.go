package ringback

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// output is one tensor of the answer.
type output struct {
	name, datatype string
	shape          []int64
	data           []byte
}

// responseSize is the encoded size of a ModelInferResponse.
func responseSize(model, version, id []byte, outs []output) int {
	n := bytesField(len(model)) + bytesField(len(version)) + bytesField(len(id))
	for i := range outs {
		n += alwaysField(outputSize(&outs[i])) + alwaysField(len(outs[i].data))
	}
	return n
}

func outputSize(o *output) int {
	n := bytesField(len(o.name)) + bytesField(len(o.datatype))
	if s := shapeSize(o.shape); s > 0 {
		n += bytesField(s)
	}
	return n
}

func shapeSize(shape []int64) int {
	n := 0
	for _, d := range shape {
		n += protowire.SizeVarint(uint64(d))
	}
	return n
}

// bytesField is the size of a length-delimited field (one-byte tag) of n bytes; an
// empty string field is not encoded (proto3).
func bytesField(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// alwaysField is the size of a length-delimited field encoded even when empty
// (an element of a repeated field).
func alwaysField(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// appendResponse encodes a ModelInferResponse (model_name=1, model_version=2, id=3,
// outputs=5, raw_output_contents=6) into b, whose capacity is responseSize.
func appendResponse(b, model, version, id []byte, outs []output) []byte {
	b = appendBytes(b, 1, model)
	b = appendBytes(b, 2, version)
	b = appendBytes(b, 3, id)
	for i := range outs {
		o := &outs[i]
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(outputSize(o)))
		b = appendString(b, 1, o.name)
		b = appendString(b, 2, o.datatype)
		if s := shapeSize(o.shape); s > 0 {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(s))
			for _, d := range o.shape {
				b = protowire.AppendVarint(b, uint64(d))
			}
		}
	}
	for i := range outs {
		// Every output has its raw entry, empty ones included, so that
		// raw_output_contents[i] belongs to outputs[i].
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, outs[i].data)
	}
	return b
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendString(b []byte, num protowire.Number, v string) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}
