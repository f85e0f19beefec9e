package ringfront

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
)

// The ModelInferRequest a gRPC backend is sent for a ring request:
//
//	model_name = 1, id = 3 ("stream#frame"),
//	inputs = 5 { name = 1, datatype = 2, shape = 3 (packed),
//	             by reference: parameters = 4 { shared_memory_region,
//	             shared_memory_byte_size, shared_memory_offset } },
//	copy path: raw_input_contents = 7, one per input, the frame's bytes.
//
// The sizes are computed without encoding (prefixSize) so that the header's raw
// spans are known before the message exists; build encodes exactly those bytes
// (a test holds the two together).

func sizeVarint(v uint64) int { return 1 + (bits.Len64(v|1)-1)/7 }

// field is the size of a length-delimited field (one-byte tag) of n bytes.
func field(n int) int { return 1 + sizeVarint(uint64(n)) + n }

func shapeBytes(t *shmring.Tensor) int {
	n := 0
	for _, d := range t.Shape() {
		n += sizeVarint(uint64(d))
	}
	return n
}

// paramInt64 and paramString are the sizes of InferParameter messages.
func paramInt64(v uint64) int { return 1 + sizeVarint(v) }
func paramString(n int) int   { return field(n) }

// shmRef is where a tensor lies in the registered request arena.
type shmRef struct {
	region       string
	offset, size uint64
}

func (r *request) ref(t *shmring.Tensor) shmRef {
	d := &r.req.Descriptor
	return shmRef{region: r.s.region, offset: uint64(d.Slot)*r.s.lay.SlotSize + d.PayloadOff + t.Offset, size: t.Length}
}

func refParamsSize(ref shmRef) int {
	return field(field(len(wire.ParamShmRegion))+field(paramString(len(ref.region)))) +
		field(field(len(wire.ParamShmByteSize))+field(paramInt64(ref.size))) +
		field(field(len(wire.ParamShmOffset))+field(paramInt64(ref.offset)))
}

func (r *request) inputSize(t *shmring.Tensor) int {
	n := field(len(t.Name)) + field(len(t.Datatype))
	if t.Rank > 0 {
		n += field(shapeBytes(t))
	}
	if r.byRef {
		n += refParamsSize(r.ref(t))
	}
	return n
}

// prefixSize is the size of the message up to its first raw_input_contents.
func (r *request) prefixSize(h *wire.InferHeader, ts []shmring.Tensor) int {
	n := field(len(h.Model)) + field(len(h.ID))
	for i := range ts {
		n += field(r.inputSize(&ts[i]))
	}
	return n
}

func appendField(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

func appendStr(b []byte, num protowire.Number, s string) []byte {
	return append(appendField(b, num, len(s)), s...)
}

func appendRefParams(b []byte, ref shmRef) []byte {
	entry := func(b []byte, key string, valSize int) []byte {
		b = appendField(b, 4, field(len(key))+field(valSize))
		b = appendStr(b, 1, key)
		return appendField(b, 2, valSize)
	}
	b = entry(b, wire.ParamShmRegion, paramString(len(ref.region)))
	b = appendStr(b, 3, ref.region)
	for _, p := range [2]struct {
		key string
		v   uint64
	}{{wire.ParamShmByteSize, ref.size}, {wire.ParamShmOffset, ref.offset}} {
		b = entry(b, p.key, paramInt64(p.v))
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, p.v)
	}
	return b
}

// build encodes the message for c (Call.Build): the small fields into one pooled
// buffer, the frame as views of the client's mapping (sealed region), as views of
// one guarded copy (unsealed region), or not at all (by reference).
func (r *request) build(c *gateway.Call) (mem.BufferSlice, error) {
	h := &c.Header
	ts := r.tensors()
	pool := mem.DefaultBufferPool()
	prefix := r.prefixSize(h, ts)
	hp := pool.Get(prefix + (1+binaryMaxVarint)*len(ts))
	b := appendField((*hp)[:0], 1, len(h.Model))
	b = append(b, h.Model...)
	b = appendField(b, 3, len(h.ID))
	b = append(b, h.ID...)
	for i := range ts {
		t := &ts[i]
		b = appendField(b, 5, r.inputSize(t))
		b = appendStr(b, 1, t.Name)
		b = appendStr(b, 2, t.Datatype)
		if t.Rank > 0 {
			b = appendField(b, 3, shapeBytes(t))
			for _, d := range t.Shape() {
				b = protowire.AppendVarint(b, uint64(d))
			}
		}
		if r.byRef {
			b = appendRefParams(b, r.ref(t))
		}
	}
	if len(b) != prefix {
		pool.Put(hp)
		return nil, status.Errorf(codes.Internal, "ring frontend: encoded %d header bytes, computed %d", len(b), prefix)
	}
	if r.byRef {
		*hp = b
		return mem.BufferSlice{mem.NewBuffer(hp, pool)}, nil
	}
	// Copy path: the raw_input_contents' tags and lengths go after the prefix in
	// the same buffer; the message interleaves slices of it with the frame.
	cuts := [shmring.MaxTensors + 1]int{prefix}
	for i := range ts {
		b = appendField(b, 7, int(ts[i].Length))
		cuts[i+1] = len(b)
	}
	*hp = b
	hdr := mem.NewBuffer(hp, pool)
	defer hdr.Free() // the slices below hold their own references

	var frame mem.Buffer // the frame's bytes as one buffer
	payload := r.req.Payload()
	if r.s.sealed {
		frame = mem.SliceBuffer(payload)
	} else if len(payload) > 0 {
		cp := pool.Get(len(payload))
		n, err := r.req.CopyPayload(*cp)
		if err != nil || n != len(payload) {
			pool.Put(cp)
			return nil, status.Errorf(codes.Unavailable, "ring region faulted while vig copied the frame: %v", err)
		}
		frame = mem.NewBuffer(cp, pool)
		defer frame.Free()
	}
	out := make(mem.BufferSlice, 0, 2*len(ts)+1)
	from := 0
	for i := range ts {
		t := &ts[i]
		out = append(out, hdr.Slice(from, cuts[i+1]))
		from = cuts[i+1]
		if t.Length > 0 {
			out = append(out, frame.Slice(int(t.Offset), int(t.Offset+t.Length)))
		}
	}
	if len(ts) == 0 {
		out = append(out, hdr.Slice(0, prefix))
	}
	return out, nil
}

const binaryMaxVarint = 10

// interner turns names the backend answers with into strings, allocating only
// the first time a name is seen; bounded so that a backend cannot grow it.
type interner struct {
	mu sync.RWMutex
	m  map[string]string
}

const maxInterned = 1024

func (in *interner) get(b []byte) string {
	in.mu.RLock()
	s, ok := in.m[string(b)]
	in.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	in.mu.Lock()
	if in.m == nil {
		in.m = map[string]string{}
	}
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	in.mu.Unlock()
	return s
}
