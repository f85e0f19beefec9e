package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Hello and reply sizes; see the package documentation.
const (
	helloSize      = 64
	replyHeadSize  = 16
	maxReasonLen   = 240
	replyMaxSize   = replyHeadSize + maxReasonLen
	handshakeKindM = 1 // sealed memfd
	handshakeKindS = 2 // /dev/shm file
)

// HandshakeStatus is vig's answer to a client's hello.
type HandshakeStatus uint32

const (
	HandshakeOK         HandshakeStatus = 0
	HandshakeBadHello   HandshakeStatus = 1 // malformed hello or missing fd
	HandshakeVersion    HandshakeStatus = 2 // protocol version not spoken
	HandshakeUnsealed   HandshakeStatus = 3 // fd lacks the required seals
	HandshakeBadRegion  HandshakeStatus = 4 // header or size invalid
	HandshakeNotAllowed HandshakeStatus = 5 // refused by policy
)

func (s HandshakeStatus) String() string {
	switch s {
	case HandshakeOK:
		return "ok"
	case HandshakeBadHello:
		return "bad hello"
	case HandshakeVersion:
		return "version mismatch"
	case HandshakeUnsealed:
		return "unsealed region"
	case HandshakeBadRegion:
		return "bad region"
	case HandshakeNotAllowed:
		return "not allowed"
	}
	return fmt.Sprintf("HandshakeStatus(%d)", uint32(s))
}

// ErrVersion is wrapped when the two sides speak different protocol versions.
var ErrVersion = errors.New("shmring: protocol version mismatch")

// hello is the client's first message.
type hello struct {
	version    uint32
	kind       uint32
	regionSize uint64
}

func (h hello) encode() []byte {
	b := make([]byte, helloSize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], HelloMagic)
	le.PutUint32(b[8:], h.version)
	le.PutUint32(b[12:], h.kind)
	le.PutUint64(b[16:], h.regionSize)
	return b
}

// decodeHello parses an untrusted hello. A version mismatch is reported with
// the hello still filled in, so the server can answer HandshakeVersion.
func decodeHello(b []byte) (hello, error) {
	if len(b) != helloSize {
		return hello{}, fmt.Errorf("hello of %d bytes, want %d", len(b), helloSize)
	}
	le := binary.LittleEndian
	if m := le.Uint64(b[0:]); m != HelloMagic {
		return hello{}, fmt.Errorf("hello magic %#x", m)
	}
	h := hello{version: le.Uint32(b[8:]), kind: le.Uint32(b[12:]), regionSize: le.Uint64(b[16:])}
	for _, c := range b[24:] {
		if c != 0 {
			return hello{}, errors.New("hello reserved bytes not zero")
		}
	}
	if h.version != ProtocolVersion {
		return h, fmt.Errorf("%w: client speaks %d, vig %d", ErrVersion, h.version, ProtocolVersion)
	}
	if h.kind != handshakeKindM && h.kind != handshakeKindS {
		return hello{}, fmt.Errorf("hello region kind %d", h.kind)
	}
	return h, nil
}

func encodeReply(status HandshakeStatus, reason string) []byte {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
		for !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	b := make([]byte, replyHeadSize+len(reason))
	le := binary.LittleEndian
	le.PutUint64(b[0:], ReplyMagic)
	le.PutUint32(b[8:], ProtocolVersion)
	le.PutUint32(b[12:], uint32(status))
	copy(b[replyHeadSize:], reason)
	return b
}

// decodeReply parses vig's answer and turns a refusal into an error.
func decodeReply(b []byte) error {
	if len(b) < replyHeadSize || len(b) > replyMaxSize {
		return fmt.Errorf("shmring: handshake reply of %d bytes", len(b))
	}
	le := binary.LittleEndian
	if m := le.Uint64(b[0:]); m != ReplyMagic {
		return fmt.Errorf("shmring: handshake reply magic %#x", m)
	}
	v, st := le.Uint32(b[8:]), HandshakeStatus(le.Uint32(b[12:]))
	reason := string(b[replyHeadSize:])
	if !utf8.ValidString(reason) {
		reason = fmt.Sprintf("%q", reason)
	}
	switch {
	case st == HandshakeOK && v == ProtocolVersion:
		return nil
	case st == HandshakeOK || st == HandshakeVersion:
		return fmt.Errorf("%w: vig speaks %d, client %d: %s", ErrVersion, v, ProtocolVersion, reason)
	case st == HandshakeUnsealed:
		return fmt.Errorf("%w: vig refused the region: %s", ErrUnsealed, reason)
	}
	return fmt.Errorf("shmring: vig refused the session (%v): %s", st, reason)
}

// PeerCred is the peer process's identity from SO_PEERCRED.
type PeerCred struct {
	PID int32
	UID uint32
	GID uint32
}
