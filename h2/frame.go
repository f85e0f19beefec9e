package h2

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/http2"
)

const (
	// FrameHeaderLen is the size of a frame header.
	FrameHeaderLen = 9
	// DefaultMaxFrame is the frame size every HTTP/2 peer accepts (RFC 9113
	// §4.2); vig neither asks for more nor sends more than its peer allows.
	DefaultMaxFrame = 16384
	// InitialWindow is HTTP/2's initial flow-control window.
	InitialWindow = 65535
	// MaxHeaderBlock bounds a header block (HEADERS + CONTINUATION), compressed.
	MaxHeaderBlock = 1 << 20
	// MaxHeaderList bounds the decoded header fields of one block (names and
	// values, plus 32 bytes each as RFC 9113 §6.5.2 counts them).
	MaxHeaderList = 1 << 20
)

// ClientPreface opens every client connection (RFC 9113 §3.4).
const ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ConnError is an HTTP/2 connection error (§5.4.1): the connection is ended with
// GOAWAY carrying Code.
type ConnError struct {
	Code http2.ErrCode
	Msg  string
}

// Error implements error.
func (e ConnError) Error() string { return fmt.Sprintf("http2 %v: %s", e.Code, e.Msg) }

// ProtocolError is a connection error PROTOCOL_ERROR.
func ProtocolError(format string, args ...any) error {
	return ConnError{http2.ErrCodeProtocol, fmt.Sprintf(format, args...)}
}

// FrameHeader is a decoded frame header.
type FrameHeader struct {
	Length uint32
	Type   http2.FrameType
	Flags  http2.Flags
	Stream uint32
}

// Has reports whether flag f is set.
func (h FrameHeader) Has(f http2.Flags) bool { return h.Flags&f != 0 }

// AppendFrameHeader appends a frame header.
func AppendFrameHeader(b []byte, length int, typ http2.FrameType, flags http2.Flags, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(typ), byte(flags),
		byte(stream>>24)&0x7f, byte(stream>>16), byte(stream>>8), byte(stream))
}

// AppendSettings appends a SETTINGS frame.
func AppendSettings(b []byte, settings ...http2.Setting) []byte {
	b = AppendFrameHeader(b, 6*len(settings), http2.FrameSettings, 0, 0)
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, uint16(s.ID))
		b = binary.BigEndian.AppendUint32(b, s.Val)
	}
	return b
}

// AppendWindowUpdate appends a WINDOW_UPDATE frame.
func AppendWindowUpdate(b []byte, stream, inc uint32) []byte {
	b = AppendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(b, inc&0x7fffffff)
}

// AppendRST appends a RST_STREAM frame.
func AppendRST(b []byte, stream uint32, code http2.ErrCode) []byte {
	b = AppendFrameHeader(b, 4, http2.FrameRSTStream, 0, stream)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

// AppendGoAway appends a GOAWAY frame.
func AppendGoAway(b []byte, last uint32, code http2.ErrCode, debug string) []byte {
	b = AppendFrameHeader(b, 8+len(debug), http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last&0x7fffffff)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	return append(b, debug...)
}
