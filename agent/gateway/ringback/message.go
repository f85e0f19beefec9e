package backend

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vig-edge/vig/shmring"
)

// maxInputDesc bounds one InferInputTensor message (name, datatype, shape,
// parameters: no data, since tensors with contents are refused before). The ring
// has no use for larger ones, and the bound keeps the scratch copy small.
const maxInputDesc = 64 << 10

// span is where one raw_input_contents entry lies in the request message.
type span struct{ off, len int }

// tensorLayout is what the ring needs of a ModelInferRequest beyond the gateway's
// header: each input's shape and where each raw_input_contents entry lies in the
// message that is actually sent (the gateway has removed vig's own parameters).
type tensorLayout struct {
	inputs int
	rank   [shmring.MaxTensors]int
	dims   [shmring.MaxTensors][shmring.MaxRank]int64
	raws   int
	raw    [shmring.MaxTensors]span
}

var errTruncated = errors.New("message truncated")

// scanRequest walks the top-level fields of a ModelInferRequest held in msg and
// fills l. Only the inputs (field 5, as length-delimited records) and
// raw_input_contents (field 7) are read; everything else is skipped, as protobuf
// skips a known field of an unexpected wire type. scratch is reused for the input
// records and returned, possibly grown. The message comes from a client: every
// length is checked against what is left.
func scanRequest(msg mem.BufferSlice, l *tensorLayout, scratch []byte) ([]byte, error) {
	*l = tensorLayout{}
	r := reader{bufs: msg}
	size := msg.Len()
	for r.pos < size {
		tag, err := r.uvarint()
		if err != nil {
			return scratch, err
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		if num <= 0 {
			return scratch, fmt.Errorf("invalid field number %d", num)
		}
		switch typ {
		case protowire.VarintType:
			_, err = r.uvarint()
		case protowire.Fixed32Type:
			err = r.skip(4)
		case protowire.Fixed64Type:
			err = r.skip(8)
		case protowire.BytesType:
			var n uint64
			if n, err = r.uvarint(); err != nil {
				break
			}
			if n > uint64(size-r.pos) {
				return scratch, errTruncated
			}
			switch num {
			case 5:
				if l.inputs == shmring.MaxTensors {
					return scratch, fmt.Errorf("more than %d input tensors (a ring descriptor carries at most %d)", shmring.MaxTensors, shmring.MaxTensors)
				}
				if n > maxInputDesc {
					return scratch, fmt.Errorf("input %d: a %d-byte tensor description (at most %d without contents)", l.inputs, n, maxInputDesc)
				}
				if uint64(cap(scratch)) < n {
					scratch = make([]byte, n)
				}
				scratch = scratch[:n]
				if err = r.read(scratch); err != nil {
					break
				}
				if err = parseShape(scratch, &l.rank[l.inputs], &l.dims[l.inputs]); err != nil {
					return scratch, fmt.Errorf("input %d: %w", l.inputs, err)
				}
				l.inputs++
			case 7:
				if l.raws == shmring.MaxTensors {
					return scratch, fmt.Errorf("more than %d raw_input_contents (a ring descriptor carries at most %d tensors)", shmring.MaxTensors, shmring.MaxTensors)
				}
				l.raw[l.raws] = span{off: r.pos, len: int(n)}
				l.raws++
				err = r.skip(n)
			default:
				err = r.skip(n)
			}
		default:
			return scratch, fmt.Errorf("field %d: unsupported wire type %d", num, typ)
		}
		if err != nil {
			return scratch, err
		}
	}
	return scratch, nil
}

// parseShape reads the shape (field 3, packed or not) of an InferInputTensor.
func parseShape(b []byte, rank *int, dims *[shmring.MaxRank]int64) error {
	add := func(v uint64) error {
		if int64(v) < 0 {
			return fmt.Errorf("negative dimension %d in the shape", int64(v))
		}
		if *rank == shmring.MaxRank {
			return fmt.Errorf("rank above %d (the most a ring descriptor carries)", shmring.MaxRank)
		}
		dims[*rank] = int64(v)
		*rank++
		return nil
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 3 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			n = m
			for len(v) > 0 {
				d, m := protowire.ConsumeVarint(v)
				if m < 0 {
					return protowire.ParseError(m)
				}
				if err := add(d); err != nil {
					return err
				}
				v = v[m:]
			}
		case num == 3 && typ == protowire.VarintType:
			d, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if err := add(d); err != nil {
				return err
			}
			n = m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
		}
		b = b[n:]
	}
	return nil
}

// reader reads a message held in several buffers, front to back.
type reader struct {
	bufs mem.BufferSlice
	next int    // index of the next buffer
	cur  []byte // unread part of the current buffer
	pos  int    // absolute offset of cur[0]
}

func (r *reader) fill() bool {
	for len(r.cur) == 0 {
		if r.next == len(r.bufs) {
			return false
		}
		r.cur = r.bufs[r.next].ReadOnlyData()
		r.next++
	}
	return true
}

func (r *reader) uvarint() (uint64, error) {
	if len(r.cur) >= binaryMaxVarint {
		v, n := protowire.ConsumeVarint(r.cur)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		r.cur, r.pos = r.cur[n:], r.pos+n
		return v, nil
	}
	var v uint64
	for i := range binaryMaxVarint {
		if !r.fill() {
			return 0, errTruncated
		}
		c := r.cur[0]
		r.cur, r.pos = r.cur[1:], r.pos+1
		if i == binaryMaxVarint-1 && c > 1 {
			return 0, errors.New("varint overflows 64 bits")
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("varint overflows 64 bits")
}

const binaryMaxVarint = 10

func (r *reader) skip(n uint64) error {
	for n > 0 {
		if !r.fill() {
			return errTruncated
		}
		k := min(n, uint64(len(r.cur)))
		r.cur, r.pos, n = r.cur[k:], r.pos+int(k), n-k
	}
	return nil
}

func (r *reader) read(dst []byte) error {
	for len(dst) > 0 {
		if !r.fill() {
			return errTruncated
		}
		k := copy(dst, r.cur)
		r.cur, r.pos, dst = r.cur[k:], r.pos+k, dst[k:]
	}
	return nil
}

// copySpans copies the spans of msg, back to back, into dst (large enough) and
// returns the number of bytes written. The spans are in message order.
func copySpans(dst []byte, msg mem.BufferSlice, spans []span) int {
	w, pos, i := 0, 0, 0
	for _, b := range msg {
		if i == len(spans) {
			break
		}
		data := b.ReadOnlyData()
		end := pos + len(data)
		for i < len(spans) {
			s := spans[i]
			lo, hi := max(s.off, pos), min(s.off+s.len, end)
			if lo < hi {
				w += copy(dst[w:], data[lo-pos:hi-pos])
			}
			if s.off+s.len > end {
				break // continues in the next buffer
			}
			i++
		}
		pos = end
	}
	return w
}

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
