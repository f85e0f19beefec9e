package wire

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Renaming a request: a frame of a logical model is sent to the server under
// the name of the variant chosen for it (ModelInferRequest.model_name, field
// 1). The tensor bytes are not copied: the result is the new name field
// followed by views of the message's buffers around every model_name field it
// had (a protobuf parser keeps the last of a repeated scalar field, so all of
// them go).

// ModelNameField encodes model_name = name, the field RenameModel puts first.
// It is immutable: one per variant serves every request renamed to it.
func ModelNameField(name string) mem.Buffer {
	b := protowire.AppendTag(make([]byte, 0, len(name)+3), 1, protowire.BytesType)
	return mem.SliceBuffer(protowire.AppendString(b, name))
}

// RenameModel returns msg, a ModelInferRequest, with its model_name replaced
// by field (from ModelNameField). The result views msg's buffers, each view
// with its own reference (the caller frees the result; msg keeps its own);
// field is not copied. dst, when it has room, holds the result's list.
func RenameModel(dst, msg mem.BufferSlice, field mem.Buffer) (mem.BufferSlice, error) {
	// The spans to cut: every top-level model_name field.
	var cuts [4][2]int
	cut := cuts[:0]
	var c cursor
	c.reset(msg, nil)
	size := msg.Len()
	for !c.done() {
		start := c.pos
		num, typ, n, err := c.field(size)
		if err != nil {
			return nil, err
		}
		if typ != protowire.BytesType {
			if err := c.skipValue(num, typ); err != nil {
				return nil, err
			}
			continue
		}
		if err := c.skip(n); err != nil {
			return nil, err
		}
		if num == 1 {
			cut = append(cut, [2]int{start, c.pos})
		}
	}
	out := append(dst[:0], field)
	pos, k := 0, 0 // absolute offset of the buffer; next cut
	for _, b := range msg {
		blen := b.Len()
		from := 0
		for from < blen {
			for k < len(cut) && cut[k][1] <= pos+from {
				k++
			}
			keepEnd := blen
			if k < len(cut) && cut[k][0]-pos < blen {
				keepEnd = max(cut[k][0]-pos, from)
			}
			if keepEnd > from {
				out = append(out, b.Slice(from, keepEnd))
			}
			if keepEnd == blen {
				break
			}
			from = min(cut[k][1]-pos, blen)
		}
		pos += blen
	}
	return out, nil
}
