// Package h2test builds HTTP/2 byte streams for vig's tests and fuzz seeds:
// the frames a peer sends, illegal ones included.
package h2test

import (
	"bytes"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Frames is a peer's byte stream, written frame by frame through Fr (which
// allows illegal writes) with header blocks from Block.
type Frames struct {
	Fr   *http2.Framer
	buf  bytes.Buffer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

// NewFrames is an empty stream.
func NewFrames() *Frames {
	f := &Frames{}
	f.Fr = http2.NewFramer(&f.buf, nil)
	f.Fr.AllowIllegalWrites = true
	f.enc = hpack.NewEncoder(&f.hbuf)
	return f
}

// Block is the HPACK header block of the name, value pairs kv, encoded with
// the stream's encoder (its dynamic table carries over).
func (f *Frames) Block(kv ...string) []byte {
	f.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		f.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), f.hbuf.Bytes()...)
}

// Bytes is a copy of what was written so far.
func (f *Frames) Bytes() []byte { return append([]byte(nil), f.buf.Bytes()...) }
