package h2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Reader is the receiving half of a connection: frame headers, control payloads
// and header blocks, HPACK-decoded into Fields. It is used by the connection's
// reader goroutine only.
type Reader struct {
	Br      *Input // the connection, buffered; DATA payloads are read from it directly
	dec     *hpack.Decoder
	Fields  []hpack.HeaderField // decoded fields of the last header block
	listLen int
	tooBig  bool
	// PrioSelf: the last HEADERS frame's priority field made its stream
	// depend on itself (RFC 9113 §5.3.1).
	PrioSelf bool
	block    []byte // header block being assembled (HEADERS + CONTINUATION)
	scratch  []byte // payload of a control frame
	hdr      [FrameHeaderLen]byte
}

// NewReader reads frames from r through a buffer of bufSize bytes.
func NewReader(r io.Reader, bufSize int) *Reader {
	rd := &Reader{Br: NewInput(r, bufSize)}
	rd.dec = hpack.NewDecoder(4096, rd.emit)
	rd.dec.SetMaxStringLength(MaxHeaderList)
	return rd
}

func (r *Reader) emit(f hpack.HeaderField) {
	r.listLen += len(f.Name) + len(f.Value) + 32
	if r.listLen > MaxHeaderList {
		r.tooBig = true
		return
	}
	r.Fields = append(r.Fields, f)
}

// ReadHeader reads the next frame header.
func (r *Reader) ReadHeader() (FrameHeader, error) {
	b := r.hdr[:]
	if err := r.Br.readHeader(b); err != nil {
		return FrameHeader{}, err
	}
	h := FrameHeader{
		Length: uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]),
		Type:   http2.FrameType(b[3]),
		Flags:  http2.Flags(b[4]),
		Stream: binary.BigEndian.Uint32(b[5:]) & 0x7fffffff,
	}
	if h.Length > DefaultMaxFrame {
		return h, ConnError{http2.ErrCodeFrameSize, fmt.Sprintf("%v frame of %d bytes exceeds the %d-byte frame size", h.Type, h.Length, DefaultMaxFrame)}
	}
	return h, nil
}

// Payload reads a whole (control) frame payload into scratch.
func (r *Reader) Payload(h FrameHeader) ([]byte, error) {
	if cap(r.scratch) < int(h.Length) {
		r.scratch = make([]byte, h.Length)
	}
	b := r.scratch[:h.Length]
	return b, r.Br.readFull(b)
}

// DataStart begins a DATA frame: it charges the frame to the connection's receive
// window (*recv, what the peer may still send) and reads the pad length. It returns
// the data bytes to read, then the padding to skip.
func (r *Reader) DataStart(h FrameHeader, recv *int64, who string) (n, pad int, err error) {
	n = int(h.Length)
	r.Br.dataStarted(h)
	*recv -= int64(n)
	if *recv < 0 {
		return 0, 0, ConnError{http2.ErrCodeFlowControl, who + " sent more than the connection window"}
	}
	if !h.Has(http2.FlagDataPadded) {
		return n, 0, nil
	}
	if n < 1 {
		return 0, 0, ProtocolError("padded DATA without a pad length")
	}
	b, err := r.Br.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	pad, n = int(b), n-1
	if pad > n {
		return 0, 0, ProtocolError("DATA padding exceeds the frame")
	}
	return n - pad, pad, nil
}

// WindowIncrement reads a WINDOW_UPDATE frame's increment.
func (r *Reader) WindowIncrement(h FrameHeader) (uint32, error) {
	p, err := r.Payload(h)
	if err != nil {
		return 0, err
	}
	if len(p) != 4 {
		return 0, ConnError{http2.ErrCodeFrameSize, "WINDOW_UPDATE of the wrong size"}
	}
	inc := binary.BigEndian.Uint32(p) & 0x7fffffff
	if inc == 0 {
		return 0, ProtocolError("WINDOW_UPDATE with increment 0")
	}
	return inc, nil
}

// Discard skips n bytes of payload.
func (r *Reader) Discard(n int) error {
	_, err := r.Br.Discard(n)
	return err
}

// HeaderBlock reads the header block that starts with HEADERS frame h (its
// CONTINUATION frames included) and decodes it into r.Fields. endStream reports
// the HEADERS frame's END_STREAM flag.
func (r *Reader) HeaderBlock(h FrameHeader) error {
	p, err := r.Payload(h)
	if err != nil {
		return err
	}
	if h.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 || int(p[0]) > len(p)-1 {
			return ProtocolError("HEADERS padding exceeds the frame")
		}
		p = p[1 : len(p)-int(p[0])]
	}
	r.PrioSelf = false
	if h.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			return ProtocolError("HEADERS priority field truncated")
		}
		r.PrioSelf = binary.BigEndian.Uint32(p)&0x7fffffff == h.Stream
		p = p[5:]
	}
	r.block = append(r.block[:0], p...)
	for end := h.Has(http2.FlagHeadersEndHeaders); !end; {
		c, err := r.ReadHeader()
		if err != nil {
			return err
		}
		if c.Type != http2.FrameContinuation || c.Stream != h.Stream {
			return ProtocolError("expected CONTINUATION of stream %d, got %v on stream %d", h.Stream, c.Type, c.Stream)
		}
		p, err := r.Payload(c)
		if err != nil {
			return err
		}
		if len(r.block)+len(p) > MaxHeaderBlock {
			return ConnError{http2.ErrCodeEnhanceYourCalm, fmt.Sprintf("header block larger than %d bytes", MaxHeaderBlock)}
		}
		r.block = append(r.block, p...)
		end = c.Has(http2.FlagContinuationEndHeaders)
	}
	r.Fields, r.listLen, r.tooBig = r.Fields[:0], 0, false
	if _, err := r.dec.Write(r.block); err != nil {
		return ConnError{http2.ErrCodeCompression, err.Error()}
	}
	if err := r.dec.Close(); err != nil {
		return ConnError{http2.ErrCodeCompression, err.Error()}
	}
	if r.tooBig {
		r.Fields = r.Fields[:0]
		return ErrHeaderListTooBig
	}
	if cap(r.block) > 64<<10 {
		r.block = nil // a huge block once must not pin its buffer
	}
	return nil
}

// ErrHeaderListTooBig refuses one stream, not the connection: the block was still
// decoded, so the HPACK state stays in step with the peer.
var ErrHeaderListTooBig = errors.New("header list too large")
