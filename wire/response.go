package wire

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Output is what vig reads of one InferOutputTensor of a ModelInferResponse.
type Output struct {
	Name, Datatype []byte
	Shape          []int64
	HasContents    bool // the tensor's data is in InferTensorContents, not raw
}

// InferResponse is what vig reads of a ModelInferResponse from a backend: the
// outputs' names, datatypes and shapes, and where each raw_output_contents entry
// lies in the message. Byte slices view the message's buffers (or, for fields that
// straddle two buffers, a copy) and are valid while the message is held; the
// tensor bytes themselves are not touched (Span.Slice or Span.CopyTo reach them).
//
// The message comes from a backend vig does not control: every length is checked
// against the message, and raw_output_contents must number zero or one per output.
type InferResponse struct {
	Model, Version, ID []byte
	Outputs            []Output
	Raw                []Span // raw_output_contents[i], the bytes of Outputs[i]
	Size               int

	cur cursor
}

// Reset empties the response for reuse, keeping its storage.
func (r *InferResponse) Reset() {
	r.Model, r.Version, r.ID = nil, nil, nil
	r.Outputs = r.Outputs[:0]
	r.Raw = r.Raw[:0]
	r.Size = 0
}

// ParseResponse reads a ModelInferResponse held in msg.
func (r *InferResponse) ParseResponse(msg mem.BufferSlice) error {
	r.Reset()
	c := &r.cur
	c.reset(msg, c.arena)
	r.Size = msg.Len()
	for !c.done() {
		num, typ, n, err := c.field(r.Size)
		if err != nil {
			return err
		}
		if typ != protowire.BytesType {
			if err := c.skipValue(num, typ); err != nil {
				return err
			}
			continue
		}
		switch num {
		case 1:
			r.Model, err = c.takeString(n)
		case 2:
			r.Version, err = c.takeString(n)
		case 3:
			r.ID, err = c.takeString(n)
		case 5:
			if len(r.Outputs) >= maxTensorsPerInfer {
				return fmt.Errorf("more than %d outputs", maxTensorsPerInfer)
			}
			r.Outputs = nextOutput(r.Outputs)
			err = r.parseOutput(&r.Outputs[len(r.Outputs)-1], c.pos+n)
		case 6:
			if len(r.Raw) >= maxTensorsPerInfer {
				return fmt.Errorf("more than %d raw_output_contents", maxTensorsPerInfer)
			}
			r.Raw = append(r.Raw, Span{Off: c.pos, Len: n})
			err = c.skip(n)
		default: // parameters and unknown fields
			err = c.skip(n)
		}
		if err != nil {
			return err
		}
	}
	if len(r.Raw) > 0 && len(r.Raw) != len(r.Outputs) {
		return fmt.Errorf("%d raw_output_contents for %d outputs (want one per output)", len(r.Raw), len(r.Outputs))
	}
	return nil
}

func nextOutput(os []Output) []Output {
	if len(os) < cap(os) {
		os = os[:len(os)+1]
	} else {
		os = append(os, Output{})
	}
	o := &os[len(os)-1]
	*o = Output{Shape: o.Shape[:0]}
	return os
}

// parseOutput reads an InferOutputTensor that ends at the absolute offset end.
func (r *InferResponse) parseOutput(o *Output, end int) error {
	c := &r.cur
	for c.pos < end {
		num, typ, n, err := c.field(end)
		if err != nil {
			return err
		}
		if typ != protowire.BytesType {
			if num == 3 && typ == protowire.VarintType { // an unpacked dimension
				v, err := c.varint()
				if err != nil {
					return err
				}
				o.Shape = append(o.Shape, int64(v))
				continue
			}
			if err := c.skipValue(num, typ); err != nil {
				return err
			}
			continue
		}
		switch num {
		case 1:
			o.Name, err = c.takeString(n)
		case 2:
			o.Datatype, err = c.takeString(n)
		case 3:
			var b []byte
			if b, err = c.take(n); err == nil {
				o.Shape, err = appendPacked(o.Shape, b)
			}
		case 5:
			o.HasContents = true
			err = c.skip(n)
		default:
			err = c.skip(n)
		}
		if err != nil {
			return err
		}
	}
	if c.pos != end {
		return ErrMalformed
	}
	return nil
}

// CopyTo copies the span's bytes of msg into dst (at least s.Len bytes) and returns
// the number copied.
func (s Span) CopyTo(dst []byte, msg mem.BufferSlice) int {
	w, pos := 0, 0
	for _, b := range msg {
		data := b.ReadOnlyData()
		lo, hi := max(s.Off-pos, 0), min(s.Off+s.Len-pos, len(data))
		if lo < hi {
			w += copy(dst[w:], data[lo:hi])
		}
		pos += len(data)
		if pos >= s.Off+s.Len {
			break
		}
	}
	return w
}
