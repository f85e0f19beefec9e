package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// ABI constants; see the package documentation for the byte layout.
const (
	// ProtocolVersion is the ABI version of the region header, the hello and the
	// descriptors. Version 2 widened the descriptor to 4096 bytes (16 tensor
	// records of 192 bytes, names up to 96 bytes), added tensor records to
	// responses, and the /dev/shm key to the hello. Version 3 (this one)
	// replaced the futex wake-ups with eventfd doorbells handed over with the
	// accepted reply; the layout is version 2's, the seq words now reserved.
	// Peers of another version are refused at the handshake, with the version
	// to use.
	ProtocolVersion = 3

	Magic      uint64 = 0x31474e4952474956 // "VIGRING1"
	HelloMagic uint64 = 0x4f4c4c4548474956 // "VIGHELLO"
	ReplyMagic uint64 = 0x5945524748474956 // "VIGHGREY"

	HeaderSize     = 4096
	DescriptorSize = 4096
	CacheLine      = 128
	PageSize       = 4096 // arena and control-block alignment; not the OS page size

	MaxDescriptors = 4096
	MaxSlots       = 1024
	MaxSlotSize    = 1 << 30

	MaxStreamLen   = 56
	MaxModelLen    = 64
	MaxMessageLen  = 80
	MaxTensors     = 16
	MaxTensorName  = 96
	MaxDatatypeLen = 8
	MaxRank        = 8
	TensorSize     = 192
	MaxKeyLen      = 96 // a /dev/shm key in the hello, leading '/' included

	// NoSlot in a descriptor's payload slot field means "no payload".
	NoSlot = 0xffffffff

	// FlagMemfd is set in the header of a memfd-backed region.
	FlagMemfd = 1

	// FlagExtraRegion in a descriptor's flags: its payload lies in the
	// extra region whose id is in the payload slot field (see the package
	// documentation, Extra regions), not in a slot of the ring's arena.
	FlagExtraRegion = 1
	// MaxExtraRegions bounds the extra region ids of a session (1..64).
	MaxExtraRegions = 64
)

// Header field offsets.
const (
	offMagic      = 0
	offVersion    = 8
	offFlags      = 12
	offRegionSize = 16
	offHeaderSize = 24
	offDescSize   = 28
	offRings      = 32
	ringEntrySize = 32
)

// Ring control-block offsets, relative to the ring offset.
const (
	offHead         = 0
	offTail         = 1 * CacheLine
	offReadySeq     = 2 * CacheLine // reserved since ABI version 3 (was the futex word)
	offReadyWaiters = 2*CacheLine + 4
	offSpaceSeq     = 3 * CacheLine // reserved since ABI version 3
	offSpaceWaiters = 3*CacheLine + 4
	offSlotStates   = 4 * CacheLine
)

// Descriptor field offsets.
const (
	dTag        = 0
	dFrame      = 8
	dCapture    = 16
	dSlot       = 24
	dStatus     = 28
	dPayloadOff = 32
	dPayloadLen = 40
	dStreamLen  = 48
	dModelLen   = 49
	dNTensors   = 50
	dMsgLen     = 51
	dFlags      = 52
	dStream     = 56
	dModel      = 112
	dMessage    = 176
	dTensors    = 256
	dReserved   = dTensors + MaxTensors*TensorSize // 3328: zero up to DescriptorSize

	tDataOff  = 0
	tDataLen  = 8
	tNameLen  = 16
	tTypeLen  = 17
	tRank     = 18
	tReserved = 19
	tType     = 24
	tName     = 32
	tShape    = 128
)

// Ring indexes in a region.
const (
	RequestRing  = 0
	ResponseRing = 1
)

// RingConfig sizes one ring.
type RingConfig struct {
	Descriptors int // a power of two in [2, MaxDescriptors]
	Slots       int // payload slots, in [1, MaxSlots]
	SlotSize    int // bytes per slot; rounded up to a multiple of PageSize
}

// Config sizes a region: one request ring and one response ring.
type Config struct {
	Requests  RingConfig
	Responses RingConfig
}

// DefaultConfig suits camera frames up to 8 MiB with four in flight, and
// responses up to 64 KiB.
var DefaultConfig = Config{
	Requests:  RingConfig{Descriptors: 16, Slots: 4, SlotSize: 8 << 20},
	Responses: RingConfig{Descriptors: 16, Slots: 8, SlotSize: 64 << 10},
}

// RingLayout is where one ring lives inside a region.
type RingLayout struct {
	Descriptors uint32
	Slots       uint32
	SlotSize    uint64
	RingOff     uint64 // control block
	DescOff     uint64 // first descriptor (absolute)
	ArenaOff    uint64
}

// Layout is the computed geometry of a region.
type Layout struct {
	Flags      uint32
	RegionSize uint64
	Rings      [2]RingLayout
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }

func ctrlSize(slots uint32) uint64 {
	return offSlotStates + alignUp(4*uint64(slots), CacheLine)
}

func checkRingParams(desc, slots uint32, slotSize uint64) error {
	switch {
	case desc < 2 || desc > MaxDescriptors || bits.OnesCount32(desc) != 1:
		return fmt.Errorf("descriptor count %d: want a power of two in [2, %d]", desc, MaxDescriptors)
	case slots < 1 || slots > MaxSlots:
		return fmt.Errorf("slot count %d: want [1, %d]", slots, MaxSlots)
	case slotSize == 0 || slotSize > MaxSlotSize || slotSize%PageSize != 0:
		return fmt.Errorf("slot size %d: want a non-zero multiple of %d up to %d", slotSize, PageSize, MaxSlotSize)
	}
	return nil
}

// ComputeLayout lays out a region for cfg. It is the single source of the
// offsets: creators write them into the header, receivers recompute and compare.
func ComputeLayout(cfg Config) (Layout, error) {
	var l Layout
	rcs := [2]RingConfig{cfg.Requests, cfg.Responses}
	for i, rc := range rcs {
		if rc.Descriptors < 0 || rc.Slots < 0 || rc.SlotSize <= 0 || rc.SlotSize > MaxSlotSize {
			return Layout{}, fmt.Errorf("shmring: ring %d: invalid config %+v", i, rc)
		}
		ss := alignUp(uint64(rc.SlotSize), PageSize)
		if err := checkRingParams(uint32(rc.Descriptors), uint32(rc.Slots), ss); err != nil {
			return Layout{}, fmt.Errorf("shmring: ring %d: %w", i, err)
		}
		l.Rings[i] = RingLayout{Descriptors: uint32(rc.Descriptors), Slots: uint32(rc.Slots), SlotSize: ss}
	}
	l.place()
	return l, nil
}

// place fills in the offsets from the counts and sizes (which must be valid).
func (l *Layout) place() {
	off := uint64(HeaderSize)
	for i := range l.Rings {
		r := &l.Rings[i]
		r.RingOff = off
		r.DescOff = off + ctrlSize(r.Slots)
		off = alignUp(r.DescOff+uint64(r.Descriptors)*DescriptorSize, PageSize)
	}
	for i := range l.Rings {
		r := &l.Rings[i]
		r.ArenaOff = off
		off += uint64(r.Slots) * r.SlotSize
	}
	l.RegionSize = off
}

// ErrBadHeader is wrapped by every header validation failure.
var ErrBadHeader = errors.New("shmring: bad region header")

// EncodeHeader writes the header for l into b (at least HeaderSize bytes).
func EncodeHeader(b []byte, l Layout) {
	_ = b[HeaderSize-1]
	clear(b[:HeaderSize])
	le := binary.LittleEndian
	le.PutUint64(b[offMagic:], Magic)
	le.PutUint32(b[offVersion:], ProtocolVersion)
	le.PutUint32(b[offFlags:], l.Flags)
	le.PutUint64(b[offRegionSize:], l.RegionSize)
	le.PutUint32(b[offHeaderSize:], HeaderSize)
	le.PutUint32(b[offDescSize:], DescriptorSize)
	for i, r := range l.Rings {
		e := b[offRings+i*ringEntrySize:]
		le.PutUint32(e[0:], r.Descriptors)
		le.PutUint32(e[4:], r.Slots)
		le.PutUint64(e[8:], r.SlotSize)
		le.PutUint64(e[16:], r.RingOff)
		le.PutUint64(e[24:], r.ArenaOff)
	}
}

// DecodeHeader validates a header read from an untrusted peer. size is the
// actual size of the backing file; the region must fit in it. b must be a
// private copy: the peer can change shared memory between checks.
func DecodeHeader(b []byte, size uint64) (Layout, error) {
	if len(b) < HeaderSize {
		return Layout{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadHeader, len(b), HeaderSize)
	}
	le := binary.LittleEndian
	if m := le.Uint64(b[offMagic:]); m != Magic {
		return Layout{}, fmt.Errorf("%w: magic %#x", ErrBadHeader, m)
	}
	if v := le.Uint32(b[offVersion:]); v != ProtocolVersion {
		return Layout{}, fmt.Errorf("%w: version %d, vig speaks %d", ErrBadHeader, v, ProtocolVersion)
	}
	var l Layout
	l.Flags = le.Uint32(b[offFlags:])
	if l.Flags&^FlagMemfd != 0 {
		return Layout{}, fmt.Errorf("%w: unknown flags %#x", ErrBadHeader, l.Flags)
	}
	if hs, ds := le.Uint32(b[offHeaderSize:]), le.Uint32(b[offDescSize:]); hs != HeaderSize || ds != DescriptorSize {
		return Layout{}, fmt.Errorf("%w: header size %d, descriptor size %d", ErrBadHeader, hs, ds)
	}
	var offs [2][2]uint64
	for i := range l.Rings {
		e := b[offRings+i*ringEntrySize:]
		r := &l.Rings[i]
		r.Descriptors = le.Uint32(e[0:])
		r.Slots = le.Uint32(e[4:])
		r.SlotSize = le.Uint64(e[8:])
		if err := checkRingParams(r.Descriptors, r.Slots, r.SlotSize); err != nil {
			return Layout{}, fmt.Errorf("%w: ring %d: %v", ErrBadHeader, i, err)
		}
		offs[i] = [2]uint64{le.Uint64(e[16:]), le.Uint64(e[24:])}
	}
	for _, c := range b[offRings+2*ringEntrySize : HeaderSize] {
		if c != 0 {
			return Layout{}, fmt.Errorf("%w: reserved bytes not zero", ErrBadHeader)
		}
	}
	l.place()
	for i, r := range l.Rings {
		if offs[i] != [2]uint64{r.RingOff, r.ArenaOff} {
			return Layout{}, fmt.Errorf("%w: ring %d offsets %d/%d, want %d/%d", ErrBadHeader, i, offs[i][0], offs[i][1], r.RingOff, r.ArenaOff)
		}
	}
	if rs := le.Uint64(b[offRegionSize:]); rs != l.RegionSize {
		return Layout{}, fmt.Errorf("%w: region size %d, layout needs %d", ErrBadHeader, rs, l.RegionSize)
	}
	if l.RegionSize > size {
		return Layout{}, fmt.Errorf("%w: region size %d exceeds the file's %d bytes", ErrBadHeader, l.RegionSize, size)
	}
	return l, nil
}
