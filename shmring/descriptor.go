package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Status is the outcome carried by a response descriptor. The values follow
// gRPC codes where one exists so a ring response maps 1:1 onto a Triton answer.
type Status uint32

const (
	StatusOK               Status = 0
	StatusAborted          Status = 10 // superseded by a newer frame of the stream
	StatusInvalid          Status = 3  // the request descriptor was malformed
	StatusDeadlineExceeded Status = 4  // would have been stale on completion
	StatusNotFound         Status = 5
	StatusExhausted        Status = 8  // queue full
	StatusUnimplemented    Status = 12 // the request or result needs what a ring cannot carry
	StatusInternal         Status = 13
	StatusUnavailable      Status = 14 // backend down or vig draining
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "OK"
	case StatusAborted:
		return "ABORTED"
	case StatusInvalid:
		return "INVALID_ARGUMENT"
	case StatusDeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case StatusNotFound:
		return "NOT_FOUND"
	case StatusExhausted:
		return "RESOURCE_EXHAUSTED"
	case StatusUnimplemented:
		return "UNIMPLEMENTED"
	case StatusInternal:
		return "INTERNAL"
	case StatusUnavailable:
		return "UNAVAILABLE"
	}
	return fmt.Sprintf("Status(%d)", uint32(s))
}

// Tensor describes one tensor inside a descriptor's payload.
type Tensor struct {
	Name     string
	Datatype string
	Rank     int
	Dims     [MaxRank]int64
	Offset   uint64 // inside the payload
	Length   uint64
}

// Shape returns the used dimensions.
func (t *Tensor) Shape() []int64 { return t.Dims[:t.Rank] }

// Descriptor is the decoded form of one 1024-byte ring entry.
type Descriptor struct {
	Tag       uint64
	Frame     uint64
	CaptureNs int64
	Slot      uint32 // NoSlot when there is no payload in the ring's arena
	// Region is the extra region the payload lies in (1..MaxExtraRegions), 0
	// for the ring's own arena; with a Region, Slot is NoSlot and PayloadOff
	// is an offset into that region.
	Region uint32
	// RegionGen is the generation of Region's registration the payload lies
	// in (Session.AddRegion returns it; 0..MaxRegionGen).
	RegionGen  uint32
	Status     Status
	PayloadOff uint64
	PayloadLen uint64
	Stream     string
	Model      string
	Message    string
	NumTensors int
	Tensors    [MaxTensors]Tensor
}

// ErrBadDescriptor is wrapped by every descriptor validation failure.
var ErrBadDescriptor = errors.New("shmring: bad descriptor")

func badDesc(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadDescriptor, fmt.Sprintf(format, args...))
}

// CheckEncodable reports whether d fits the fixed-size encoding.
func (d *Descriptor) CheckEncodable() error {
	switch {
	case len(d.Stream) > MaxStreamLen:
		return badDesc("stream name %d bytes > %d", len(d.Stream), MaxStreamLen)
	case len(d.Model) > MaxModelLen:
		return badDesc("model name %d bytes > %d", len(d.Model), MaxModelLen)
	case len(d.Message) > MaxMessageLen:
		return badDesc("message %d bytes > %d", len(d.Message), MaxMessageLen)
	case d.NumTensors < 0 || d.NumTensors > MaxTensors:
		return badDesc("%d tensors > %d", d.NumTensors, MaxTensors)
	case d.Region > MaxExtraRegions:
		return badDesc("extra region %d > %d", d.Region, MaxExtraRegions)
	case d.RegionGen > MaxRegionGen || (d.Region == 0 && d.RegionGen != 0):
		return badDesc("extra region generation %d (region %d)", d.RegionGen, d.Region)
	case d.Region != 0 && d.Slot != NoSlot:
		return badDesc("payload in extra region %d and in slot %d", d.Region, d.Slot)
	}
	for i := range d.Tensors[:d.NumTensors] {
		t := &d.Tensors[i]
		switch {
		case len(t.Name) > MaxTensorName:
			return badDesc("tensor %d name %d bytes > %d", i, len(t.Name), MaxTensorName)
		case len(t.Datatype) > MaxDatatypeLen:
			return badDesc("tensor %d datatype %d bytes > %d", i, len(t.Datatype), MaxDatatypeLen)
		case t.Rank < 0 || t.Rank > MaxRank:
			return badDesc("tensor %d rank %d > %d", i, t.Rank, MaxRank)
		}
	}
	return nil
}

// Encode writes d into b (DescriptorSize bytes). It panics if d does not fit;
// call CheckEncodable first for untrusted input.
func (d *Descriptor) Encode(b []byte) {
	if err := d.CheckEncodable(); err != nil {
		panic(err)
	}
	d.encode(b)
}

func (d *Descriptor) encode(b []byte) {
	_ = b[DescriptorSize-1]
	le := binary.LittleEndian
	le.PutUint64(b[dTag:], d.Tag)
	le.PutUint64(b[dFrame:], d.Frame)
	le.PutUint64(b[dCapture:], uint64(d.CaptureNs))
	flags := uint32(0)
	if d.Region != 0 {
		le.PutUint32(b[dSlot:], d.Region|d.RegionGen<<8)
		flags = FlagExtraRegion
	} else {
		le.PutUint32(b[dSlot:], d.Slot)
	}
	le.PutUint32(b[dStatus:], uint32(d.Status))
	le.PutUint64(b[dPayloadOff:], d.PayloadOff)
	le.PutUint64(b[dPayloadLen:], d.PayloadLen)
	b[dStreamLen] = uint8(len(d.Stream))
	b[dModelLen] = uint8(len(d.Model))
	b[dNTensors] = uint8(d.NumTensors)
	b[dMsgLen] = uint8(len(d.Message))
	le.PutUint32(b[dFlags:], flags)
	putField(b[dStream:dStream+MaxStreamLen], d.Stream)
	putField(b[dModel:dModel+MaxModelLen], d.Model)
	putField(b[dMessage:dMessage+MaxMessageLen], d.Message)
	for i := range MaxTensors {
		tb := b[dTensors+i*TensorSize : dTensors+(i+1)*TensorSize]
		if i >= d.NumTensors {
			clear(tb)
			continue
		}
		t := &d.Tensors[i]
		le.PutUint64(tb[tDataOff:], t.Offset)
		le.PutUint64(tb[tDataLen:], t.Length)
		tb[tNameLen] = uint8(len(t.Name))
		tb[tTypeLen] = uint8(len(t.Datatype))
		tb[tRank] = uint8(t.Rank)
		clear(tb[tReserved:tType])
		putField(tb[tName:tName+MaxTensorName], t.Name)
		putField(tb[tType:tType+MaxDatatypeLen], t.Datatype)
		for j := range MaxRank {
			v := int64(0)
			if j < t.Rank {
				v = t.Dims[j]
			}
			le.PutUint64(tb[tShape+8*j:], uint64(v))
		}
	}
	clear(b[dReserved:DescriptorSize])
}

func putField(dst []byte, s string) {
	n := copy(dst, s)
	clear(dst[n:])
}

// interner turns names read from the ring into strings without allocating
// once a name has been seen. It is bounded so a peer cannot grow it.
type interner map[string]string

const maxInterned = 256

func (in interner) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := in[string(b)]; ok { // no allocation: the compiler special-cases this lookup
		return s
	}
	s := string(b)
	if in != nil && len(in) < maxInterned {
		in[s] = s
	}
	return s
}

// DecodeDescriptor decodes and validates an untrusted descriptor. b must be a
// private copy of the DescriptorSize bytes. Payload bounds against the ring's
// geometry are checked separately by CheckPayload.
func DecodeDescriptor(b []byte) (Descriptor, error) {
	var d Descriptor
	err := d.decode(b, nil)
	return d, err
}

func (d *Descriptor) decode(b []byte, in interner) error {
	if len(b) != DescriptorSize {
		return badDesc("%d bytes, want %d", len(b), DescriptorSize)
	}
	le := binary.LittleEndian
	d.Tag = le.Uint64(b[dTag:])
	d.Frame = le.Uint64(b[dFrame:])
	d.CaptureNs = int64(le.Uint64(b[dCapture:]))
	d.Slot, d.Region, d.RegionGen = le.Uint32(b[dSlot:]), 0, 0
	flags := le.Uint32(b[dFlags:])
	if flags&FlagExtraRegion != 0 {
		d.Slot, d.Region, d.RegionGen = NoSlot, d.Slot&0xff, d.Slot>>8
	}
	d.Status = Status(le.Uint32(b[dStatus:]))
	d.PayloadOff = le.Uint64(b[dPayloadOff:])
	d.PayloadLen = le.Uint64(b[dPayloadLen:])
	sl, ml, nt, gl := int(b[dStreamLen]), int(b[dModelLen]), int(b[dNTensors]), int(b[dMsgLen])
	switch {
	case sl > MaxStreamLen:
		return badDesc("stream length %d > %d", sl, MaxStreamLen)
	case ml > MaxModelLen:
		return badDesc("model length %d > %d", ml, MaxModelLen)
	case nt > MaxTensors:
		return badDesc("tensor count %d > %d", nt, MaxTensors)
	case gl > MaxMessageLen:
		return badDesc("message length %d > %d", gl, MaxMessageLen)
	case flags&^FlagExtraRegion != 0:
		return badDesc("reserved flags %#x", flags&^FlagExtraRegion)
	case flags&FlagExtraRegion != 0 && (d.Region == 0 || d.Region > MaxExtraRegions):
		return badDesc("extra region %d outside 1..%d", d.Region, MaxExtraRegions)
	case d.Region != 0 && d.PayloadOff+d.PayloadLen < d.PayloadOff:
		return badDesc("payload %d+%d overflows", d.PayloadOff, d.PayloadLen)
	case d.Region == 0 && d.Slot == NoSlot && (d.PayloadOff != 0 || d.PayloadLen != 0):
		return badDesc("payload %d+%d without a slot", d.PayloadOff, d.PayloadLen)
	}
	for _, c := range b[dReserved:] {
		if c != 0 {
			return badDesc("reserved bytes %d..%d not zero", dReserved, DescriptorSize)
		}
	}
	stream, model, msg := b[dStream:dStream+sl], b[dModel:dModel+ml], b[dMessage:dMessage+gl]
	if !utf8.Valid(stream) || !utf8.Valid(model) || !utf8.Valid(msg) {
		return badDesc("names must be UTF-8")
	}
	d.Stream, d.Model, d.Message = in.get(stream), in.get(model), in.get(msg)
	d.NumTensors = nt
	for i := range nt {
		tb := b[dTensors+i*TensorSize : dTensors+(i+1)*TensorSize]
		t := &d.Tensors[i]
		t.Offset = le.Uint64(tb[tDataOff:])
		t.Length = le.Uint64(tb[tDataLen:])
		nl, tl, rk := int(tb[tNameLen]), int(tb[tTypeLen]), int(tb[tRank])
		switch {
		case nl > MaxTensorName:
			return badDesc("tensor %d name length %d > %d", i, nl, MaxTensorName)
		case tl > MaxDatatypeLen:
			return badDesc("tensor %d datatype length %d > %d", i, tl, MaxDatatypeLen)
		case rk > MaxRank:
			return badDesc("tensor %d rank %d > %d", i, rk, MaxRank)
		case t.Offset > d.PayloadLen || t.Length > d.PayloadLen-t.Offset:
			return badDesc("tensor %d bytes %d+%d outside the %d-byte payload", i, t.Offset, t.Length, d.PayloadLen)
		}
		for _, c := range tb[tReserved:tType] {
			if c != 0 {
				return badDesc("tensor %d reserved bytes not zero", i)
			}
		}
		name, dt := tb[tName:tName+nl], tb[tType:tType+tl]
		if !utf8.Valid(name) || !utf8.Valid(dt) {
			return badDesc("tensor %d names must be UTF-8", i)
		}
		t.Name, t.Datatype, t.Rank = in.get(name), in.get(dt), rk
		for j := range MaxRank {
			v := int64(le.Uint64(tb[tShape+8*j:]))
			if j < rk && v < 0 {
				return badDesc("tensor %d dimension %d is %d", i, j, v)
			}
			if j >= rk {
				v = 0
			}
			t.Dims[j] = v
		}
	}
	for i := nt; i < MaxTensors; i++ {
		d.Tensors[i] = Tensor{}
	}
	return nil
}

// CheckPayload verifies that d's payload lies inside one slot of a ring with
// the given geometry. A payload in an extra region is checked against that
// region when it is received (Conn.Recv).
func (d *Descriptor) CheckPayload(r RingLayout) error {
	if d.Slot == NoSlot {
		return nil
	}
	if d.Slot >= r.Slots {
		return badDesc("payload slot %d of %d", d.Slot, r.Slots)
	}
	if d.PayloadOff > r.SlotSize || d.PayloadLen > r.SlotSize-d.PayloadOff {
		return badDesc("payload %d+%d outside the %d-byte slot", d.PayloadOff, d.PayloadLen, r.SlotSize)
	}
	return nil
}
