package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Hello and reply sizes; see the package documentation.
const (
	helloSize      = 128
	helloKeyLen    = 24
	helloKey       = 32
	replyHeadSize  = 16
	maxReasonLen   = 240
	replyMaxSize   = replyHeadSize + maxReasonLen
	handshakeKindM = 1 // sealed memfd
	handshakeKindS = 2 // unlinked /dev/shm file
	handshakeKindK = 3 // /dev/shm file that stays linked under the hello's key
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
	key        string // handshakeKindK only
}

func (h hello) encode() []byte {
	b := make([]byte, helloSize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], HelloMagic)
	le.PutUint32(b[8:], h.version)
	le.PutUint32(b[12:], h.kind)
	le.PutUint64(b[16:], h.regionSize)
	b[helloKeyLen] = uint8(copy(b[helloKey:helloKey+MaxKeyLen], h.key))
	return b
}

// decodeHello parses an untrusted hello. The magic and the version are read
// first, so that a peer of another ABI version (whose hello may have another
// size) is told which version to speak; the hello is then returned filled in,
// with an error wrapping ErrVersion.
func decodeHello(b []byte) (hello, error) {
	le := binary.LittleEndian
	if len(b) < 12 {
		return hello{}, fmt.Errorf("hello of %d bytes, want %d", len(b), helloSize)
	}
	if m := le.Uint64(b[0:]); m != HelloMagic {
		return hello{}, fmt.Errorf("hello magic %#x", m)
	}
	if v := le.Uint32(b[8:]); v != ProtocolVersion {
		return hello{version: v}, fmt.Errorf("%w: the client speaks ring ABI version %d, vig speaks version %d: "+
			"update the client library to ABI version %d (shmring/doc.go)", ErrVersion, v, ProtocolVersion, ProtocolVersion)
	}
	if len(b) != helloSize {
		return hello{}, fmt.Errorf("hello of %d bytes, want %d", len(b), helloSize)
	}
	h := hello{version: ProtocolVersion, kind: le.Uint32(b[12:]), regionSize: le.Uint64(b[16:])}
	kl := int(b[helloKeyLen])
	if kl > MaxKeyLen {
		return hello{}, fmt.Errorf("hello key length %d > %d", kl, MaxKeyLen)
	}
	for i, c := range b[helloKeyLen+1 : helloKey] {
		if c != 0 {
			return hello{}, fmt.Errorf("hello reserved byte %d not zero", helloKeyLen+1+i)
		}
	}
	for _, c := range b[helloKey+kl:] {
		if c != 0 {
			return hello{}, errors.New("hello key padding not zero")
		}
	}
	h.key = string(b[helloKey : helloKey+kl])
	switch h.kind {
	case handshakeKindM, handshakeKindS:
		if kl != 0 {
			return hello{}, fmt.Errorf("hello region kind %d carries a key", h.kind)
		}
	case handshakeKindK:
		if err := CheckKey(h.key); err != nil {
			return hello{}, fmt.Errorf("hello: %w", err)
		}
	default:
		return hello{}, fmt.Errorf("hello region kind %d", h.kind)
	}
	return h, nil
}

// CheckKey applies the rule for a /dev/shm key in a hello: what shm_open and
// Triton's system shared memory accept (a leading '/', no other '/'), restricted
// to [A-Za-z0-9._-] after the slash, at most MaxKeyLen bytes.
func CheckKey(key string) error {
	if len(key) < 2 || len(key) > MaxKeyLen || key[0] != '/' || key == "/." || key == "/.." {
		return fmt.Errorf("shared-memory key %q: want '/' and 1 to %d of [A-Za-z0-9._-]", key, MaxKeyLen-1)
	}
	for _, c := range []byte(key[1:]) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("shared-memory key %q: byte %q not in [A-Za-z0-9._-]", key, c)
		}
	}
	return nil
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
		return fmt.Errorf("%w: vig speaks ring ABI version %d, this client %d: %s", ErrVersion, v, ProtocolVersion, reason)
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
