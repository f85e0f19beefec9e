package wire

import (
	"errors"
	"math/bits"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformed reports bytes that are not a valid protobuf message.
var ErrMalformed = errors.New("malformed protobuf message")

// cursor reads protobuf fields out of a message that gRPC delivered as a list of
// buffers (one per HTTP/2 data frame, 16 KiB each for a large message), without
// joining them: large length-delimited fields are skipped in place, and only the
// small fields vig interprets are viewed (or, when they straddle two buffers, copied).
type cursor struct {
	bufs  mem.BufferSlice
	i     int    // current buffer
	cur   []byte // unread part of bufs[i]
	pos   int    // absolute offset of cur[0] in the message
	arena []byte // copies of fields that straddled buffers
}

func (c *cursor) reset(bufs mem.BufferSlice, arena []byte) {
	*c = cursor{bufs: bufs, i: -1, arena: arena[:0]}
	c.advanceEmpty()
}

func (c *cursor) done() bool { return len(c.cur) == 0 }

func (c *cursor) varint() (uint64, error) {
	if v, n := protowire.ConsumeVarint(c.cur); n > 0 {
		c.skipIn(n)
		return v, nil
	}
	// Straddles a buffer boundary (or is invalid): read byte by byte.
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if c.done() {
			return 0, ErrMalformed
		}
		b := c.cur[0]
		c.skipIn(1)
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, ErrMalformed
}

// skipIn consumes n bytes known to lie in the current buffer.
func (c *cursor) skipIn(n int) {
	c.cur = c.cur[n:]
	c.pos += n
	if len(c.cur) == 0 {
		c.advanceEmpty()
	}
}

// advanceEmpty moves past exhausted buffers; pos already points at the next byte.
func (c *cursor) advanceEmpty() {
	for c.i+1 < len(c.bufs) && len(c.cur) == 0 {
		c.i++
		c.cur = c.bufs[c.i].ReadOnlyData()
	}
}

// skip consumes n bytes.
func (c *cursor) skip(n int) error {
	for n > 0 {
		if c.done() {
			return ErrMalformed
		}
		k := min(n, len(c.cur))
		c.skipIn(k)
		n -= k
	}
	return nil
}

// take returns the next n bytes, as a view when they lie in one buffer.
func (c *cursor) take(n int) ([]byte, error) {
	if n <= len(c.cur) {
		b := c.cur[:n:n]
		c.skipIn(n)
		return b, nil
	}
	start := len(c.arena)
	for n > 0 {
		if c.done() {
			return nil, ErrMalformed
		}
		k := min(n, len(c.cur))
		c.arena = append(c.arena, c.cur[:k]...)
		c.skipIn(k)
		n -= k
	}
	return c.arena[start:len(c.arena):len(c.arena)], nil
}

// field reads a field header. For length-delimited fields it also reads the length
// and checks that many bytes remain (limit is the message end).
func (c *cursor) field(limit int) (num protowire.Number, typ protowire.Type, n int, err error) {
	tag, err := c.varint()
	if err != nil {
		return 0, 0, 0, err
	}
	num, typ = protowire.DecodeTag(tag)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return 0, 0, 0, ErrMalformed
	}
	if typ == protowire.BytesType {
		l, err := c.varint()
		if err != nil || l > uint64(limit-c.pos) {
			return 0, 0, 0, ErrMalformed
		}
		n = int(l)
	}
	return num, typ, n, nil
}

// skipValue skips a non-length-delimited value of field num, type typ. Groups are
// not part of this protocol but are valid unknown fields, so they are skipped too.
func (c *cursor) skipValue(num protowire.Number, typ protowire.Type) error {
	return c.skipValueDepth(num, typ, 0)
}

func (c *cursor) skipValueDepth(num protowire.Number, typ protowire.Type, depth int) error {
	switch typ {
	case protowire.VarintType:
		_, err := c.varint()
		return err
	case protowire.Fixed32Type:
		return c.skip(4)
	case protowire.Fixed64Type:
		return c.skip(8)
	case protowire.BytesType:
		l, err := c.varint()
		if err != nil || l > uint64(1<<31) {
			return ErrMalformed
		}
		return c.skip(int(l))
	case protowire.StartGroupType:
		if depth > 64 {
			return ErrMalformed
		}
		for {
			tag, err := c.varint()
			if err != nil {
				return err
			}
			n, t := protowire.DecodeTag(tag)
			if n < protowire.MinValidNumber {
				return ErrMalformed
			}
			if t == protowire.EndGroupType {
				if n != num {
					return ErrMalformed
				}
				return nil
			}
			if err := c.skipValueDepth(n, t, depth+1); err != nil {
				return err
			}
		}
	}
	return ErrMalformed // a stray end-group
}

// sizeVarint is the encoded size of v.
func sizeVarint(v uint64) int { return 1 + (bits.Len64(v|1)-1)/7 }
