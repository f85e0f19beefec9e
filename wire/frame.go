package wire

import (
	"fmt"
	"reflect"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Frame is one gRPC message as the bytes that crossed the wire, held in gRPC's pooled
// buffers. vig forwards frames without decoding and re-encoding them: a 6 MB camera
// frame costs one receive and one send, nothing more.
//
// Ownership: receiving into a Frame takes a reference on the buffers; sending a Frame
// hands that reference to gRPC, which frees it once written (the Frame is then empty).
// A Frame that is not sent must be released with Free.
type Frame struct {
	buf mem.BufferSlice
}

// Len is the message size in bytes.
func (f *Frame) Len() int { return f.buf.Len() }

// Free releases the buffers of a Frame that will not be sent.
func (f *Frame) Free() {
	f.buf.Free()
	f.buf = nil
}

// Set replaces the frame's buffers; the frame takes ownership of b.
func (f *Frame) Set(b mem.BufferSlice) {
	f.buf.Free()
	f.buf = b
}

// rawBytes reports whether v is a []byte-kinded value (a test's `type raw []byte`).
func rawBytes(v any) ([]byte, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8 {
		return rv.Bytes(), true
	}
	return nil, false
}

// codec is the gRPC codec of every vig connection. *Frame values pass through as raw
// bytes; anything else (the health service's messages) is ordinary protobuf.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2(proto.Name)} }

// Name is "proto": on the wire vig is indistinguishable from any protobuf gRPC peer.
func (codec) Name() string { return proto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*Frame); ok {
		b := f.buf
		f.buf = nil // gRPC frees b after writing it
		if b == nil {
			// gRPC needs at least one buffer reference for an empty message.
			return mem.BufferSlice{mem.SliceBuffer(nil)}, nil
		}
		return b, nil
	}
	if b, ok := rawBytes(v); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*Frame); ok {
		data.Ref()
		f.Set(data)
		return nil
	}
	if c.proto == nil {
		return fmt.Errorf("gateway: no protobuf codec registered for %T", v)
	}
	return c.proto.Unmarshal(data, v)
}

// RawCodec returns vig's codec, for peers (tests, benchmarks) that speak raw bytes:
// it moves *Frame values untouched, and also encodes a []byte-based message type
// (any named []byte, e.g. `type raw []byte`) as its bytes.
func RawCodec() encoding.CodecV2 { return newCodec() }

// Bytes returns the frame's bytes as one slice (a copy when they span buffers).
func (f *Frame) Bytes() []byte { return f.buf.Materialize() }

// Buffers returns the frame's buffers without giving up ownership.
func (f *Frame) Buffers() mem.BufferSlice { return f.buf }

// Take returns the frame's buffers and leaves the frame empty: the caller now owns
// (and must free or send) them.
func (f *Frame) Take() mem.BufferSlice {
	b := f.buf
	f.buf = nil
	return b
}
