package shmring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
)

// TestABIOffsets pins the byte offsets documented in doc.go. They are
// constants, so this holds on every GOARCH; it runs under qemu-aarch64 too.
func TestABIOffsets(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"header magic", offMagic, 0}, {"header version", offVersion, 8}, {"header flags", offFlags, 12},
		{"header region size", offRegionSize, 16}, {"header header size", offHeaderSize, 24},
		{"header desc size", offDescSize, 28}, {"header rings", offRings, 32}, {"ring entry", ringEntrySize, 32},
		{"head", offHead, 0}, {"tail", offTail, 128}, {"ready seq", offReadySeq, 256},
		{"ready waiters", offReadyWaiters, 260}, {"space seq", offSpaceSeq, 384},
		{"space waiters", offSpaceWaiters, 388}, {"slot states", offSlotStates, 512},
		{"d tag", dTag, 0}, {"d frame", dFrame, 8}, {"d capture", dCapture, 16}, {"d slot", dSlot, 24},
		{"d status", dStatus, 28}, {"d payload off", dPayloadOff, 32}, {"d payload len", dPayloadLen, 40},
		{"d stream len", dStreamLen, 48}, {"d model len", dModelLen, 49}, {"d ntensors", dNTensors, 50},
		{"d msg len", dMsgLen, 51}, {"d flags", dFlags, 52}, {"d stream", dStream, 56}, {"d model", dModel, 112},
		{"d message", dMessage, 176}, {"d tensors", dTensors, 256},
		{"t data off", tDataOff, 0}, {"t data len", tDataLen, 8}, {"t name len", tNameLen, 16},
		{"t type len", tTypeLen, 17}, {"t rank", tRank, 18}, {"t reserved", tReserved, 19}, {"t type", tType, 24},
		{"t name", tName, 32}, {"t shape", tShape, 128}, {"d reserved", dReserved, 3328},
		{"descriptor size", DescriptorSize, 4096}, {"tensor size", TensorSize, 192}, {"max tensors", MaxTensors, 16},
		{"max tensor name", MaxTensorName, 96}, {"version", ProtocolVersion, 3},
	} {
		if c.got != c.want {
			t.Errorf("%s at %d, ABI says %d", c.name, c.got, c.want)
		}
	}
	// Field ends match the next field's start and the record sizes.
	if dStream+MaxStreamLen != dModel || dModel+MaxModelLen != dMessage || dMessage+MaxMessageLen != dTensors {
		t.Error("descriptor string fields overlap or leave gaps")
	}
	if dTensors+MaxTensors*TensorSize > DescriptorSize || tShape+8*MaxRank != TensorSize ||
		tType+MaxDatatypeLen != tName || tName+MaxTensorName != tShape || DescriptorSize%CacheLine != 0 {
		t.Error("descriptor or tensor record size mismatch")
	}
	// Every 8-byte field is 8-aligned and every counter has its own line.
	for _, off := range []int{offHead, offTail, dTag, dFrame, dCapture, dPayloadOff, dPayloadLen, tDataOff, tDataLen, tShape} {
		if off%8 != 0 {
			t.Errorf("8-byte field at %d is not 8-aligned", off)
		}
	}
	lines := map[int]bool{}
	for _, off := range []int{offHead, offTail, offReadySeq, offSpaceSeq} {
		if lines[off/CacheLine] {
			t.Errorf("counter at %d shares a cache line", off)
		}
		lines[off/CacheLine] = true
	}
}

func TestComputeLayout(t *testing.T) {
	l, err := ComputeLayout(Config{
		Requests:  RingConfig{Descriptors: 16, Slots: 4, SlotSize: 1000},
		Responses: RingConfig{Descriptors: 8, Slots: 40, SlotSize: 8192},
	})
	if err != nil {
		t.Fatal(err)
	}
	// ring 0: control 512+128, 16 descriptors: 4096+640+65536 = 70272 → 73728.
	// ring 1: control 512+256, 8 descriptors: 73728+768+32768 = 107264 → 110592.
	// arenas: 4×4096 at 110592, then 40×8192 at 126976, ending at 454656.
	want := Layout{
		RegionSize: 454656,
		Rings: [2]RingLayout{
			{Descriptors: 16, Slots: 4, SlotSize: 4096, RingOff: 4096, DescOff: 4736, ArenaOff: 110592},
			{Descriptors: 8, Slots: 40, SlotSize: 8192, RingOff: 73728, DescOff: 74496, ArenaOff: 126976},
		},
	}
	if l != want {
		t.Fatalf("layout\n got %+v\nwant %+v", l, want)
	}
	for _, bad := range []Config{
		{Requests: RingConfig{3, 1, 4096}, Responses: RingConfig{2, 1, 4096}},
		{Requests: RingConfig{2, 0, 4096}, Responses: RingConfig{2, 1, 4096}},
		{Requests: RingConfig{2, 1, 0}, Responses: RingConfig{2, 1, 4096}},
		{Requests: RingConfig{8192, 1, 4096}, Responses: RingConfig{2, 1, 4096}},
		{Requests: RingConfig{2, 1, 4096}, Responses: RingConfig{2, MaxSlots + 1, 4096}},
		{Requests: RingConfig{2, 1, MaxSlotSize + 1}, Responses: RingConfig{2, 1, 4096}},
	} {
		if _, err := ComputeLayout(bad); err == nil {
			t.Errorf("ComputeLayout(%+v) accepted", bad)
		}
	}
}

func encodedHeader(t testing.TB, cfg Config) ([]byte, Layout) {
	l, err := ComputeLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, HeaderSize)
	EncodeHeader(b, l)
	return b, l
}

func TestHeaderRoundTrip(t *testing.T) {
	b, l := encodedHeader(t, DefaultConfig)
	got, err := DecodeHeader(b, l.RegionSize)
	if err != nil || got != l {
		t.Fatalf("DecodeHeader = %+v, %v; want %+v", got, err, l)
	}
	le := binary.LittleEndian
	for _, c := range []struct {
		name string
		mut  func(b []byte)
		size uint64
	}{
		{"magic", func(b []byte) { b[0] ^= 1 }, l.RegionSize},
		{"version 1", func(b []byte) { le.PutUint32(b[offVersion:], 1) }, l.RegionSize},
		{"flags", func(b []byte) { le.PutUint32(b[offFlags:], 4) }, l.RegionSize},
		{"header size", func(b []byte) { le.PutUint32(b[offHeaderSize:], 8192) }, l.RegionSize},
		{"desc size", func(b []byte) { le.PutUint32(b[offDescSize:], 512) }, l.RegionSize},
		{"desc count", func(b []byte) { le.PutUint32(b[offRings:], 12) }, l.RegionSize},
		{"slot count", func(b []byte) { le.PutUint32(b[offRings+ringEntrySize+4:], 0) }, l.RegionSize},
		{"slot size", func(b []byte) { le.PutUint64(b[offRings+8:], 4097) }, l.RegionSize},
		{"ring offset", func(b []byte) { le.PutUint64(b[offRings+16:], 0) }, l.RegionSize},
		{"arena offset", func(b []byte) { le.PutUint64(b[offRings+ringEntrySize+24:], 1<<62) }, l.RegionSize},
		{"region size", func(b []byte) { le.PutUint64(b[offRegionSize:], l.RegionSize-4096) }, l.RegionSize},
		{"reserved", func(b []byte) { b[HeaderSize-1] = 1 }, l.RegionSize},
		{"file too small", func(b []byte) {}, l.RegionSize - 1},
	} {
		m := bytes.Clone(b)
		c.mut(m)
		if _, err := DecodeHeader(m, c.size); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: err = %v, want ErrBadHeader", c.name, err)
		}
	}
}

func sampleDescriptor() Descriptor {
	d := Descriptor{
		Tag: 7, Frame: 1234, CaptureNs: 987654321, Slot: 2, Status: StatusOK,
		PayloadOff: 64, PayloadLen: 640 * 480 * 3,
		Stream: "detector", Model: "detector_small", NumTensors: 2,
	}
	d.Tensors[0] = Tensor{Name: "images", Datatype: "UINT8", Rank: 4, Dims: [MaxRank]int64{1, 480, 640, 3}, Offset: 0, Length: 640 * 480 * 3}
	d.Tensors[1] = Tensor{Name: "scale", Datatype: "FP32", Rank: 1, Dims: [MaxRank]int64{1}, Offset: 0, Length: 4}
	return d
}

func TestDescriptorRoundTrip(t *testing.T) {
	d := sampleDescriptor()
	b := make([]byte, DescriptorSize)
	d.Encode(b)
	got, err := DecodeDescriptor(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, d)
	}
	if s := got.Tensors[0].Shape(); !reflect.DeepEqual(s, []int64{1, 480, 640, 3}) {
		t.Errorf("Shape() = %v", s)
	}
}

// TestDescriptorRoundTripProperty encodes random valid descriptors and checks
// that decoding returns them unchanged.
func TestDescriptorRoundTripProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	str := func(n int) string {
		const alpha = "abcdefghijklmnopqrstuvwxyz_0123456789é"
		var sb strings.Builder
		for sb.Len() < n {
			sb.WriteByte(alpha[rng.IntN(36)])
		}
		return sb.String()
	}
	b := make([]byte, DescriptorSize)
	for range 2000 {
		d := Descriptor{
			Tag: rng.Uint64(), Frame: rng.Uint64(), CaptureNs: rng.Int64() - rng.Int64(),
			Slot: uint32(rng.IntN(MaxSlots)), Status: Status(rng.Uint32()),
			PayloadOff: rng.Uint64N(1 << 30), PayloadLen: rng.Uint64N(1 << 30),
			Stream: str(rng.IntN(MaxStreamLen + 1)), Model: str(rng.IntN(MaxModelLen + 1)),
			Message: str(rng.IntN(MaxMessageLen + 1)), NumTensors: rng.IntN(MaxTensors + 1),
		}
		if rng.IntN(4) == 0 { // the payload in an extra region
			d.Slot, d.Region = NoSlot, uint32(1+rng.IntN(MaxExtraRegions))
		}
		for i := range d.NumTensors {
			tt := &d.Tensors[i]
			tt.Name, tt.Datatype, tt.Rank = str(rng.IntN(MaxTensorName+1)), str(rng.IntN(MaxDatatypeLen+1)), rng.IntN(MaxRank+1)
			for j := range tt.Rank {
				tt.Dims[j] = rng.Int64N(1 << 40)
			}
			tt.Offset = rng.Uint64N(d.PayloadLen + 1)
			tt.Length = rng.Uint64N(d.PayloadLen - tt.Offset + 1)
		}
		// Fill with garbage first: Encode must overwrite every byte that matters.
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		d.Encode(b)
		got, err := DecodeDescriptor(b)
		if err != nil {
			t.Fatalf("decode of %+v: %v", d, err)
		}
		if !reflect.DeepEqual(got, d) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, d)
		}
	}
}

func TestDescriptorRejects(t *testing.T) {
	d := sampleDescriptor()
	good := make([]byte, DescriptorSize)
	d.Encode(good)
	le := binary.LittleEndian
	t0 := dTensors
	for _, c := range []struct {
		name string
		mut  func(b []byte)
	}{
		{"stream len", func(b []byte) { b[dStreamLen] = MaxStreamLen + 1 }},
		{"model len", func(b []byte) { b[dModelLen] = MaxModelLen + 1 }},
		{"tensor count", func(b []byte) { b[dNTensors] = MaxTensors + 1 }},
		{"message len", func(b []byte) { b[dMsgLen] = MaxMessageLen + 1 }},
		{"flags", func(b []byte) { b[dFlags] = 2 }},
		{"extra region 0", func(b []byte) { b[dFlags] = FlagExtraRegion; le.PutUint32(b[dSlot:], 0) }},
		{"extra region past the last", func(b []byte) { b[dFlags] = FlagExtraRegion; le.PutUint32(b[dSlot:], MaxExtraRegions+1) }},
		{"payload without slot", func(b []byte) { le.PutUint32(b[dSlot:], NoSlot) }},
		{"stream utf8", func(b []byte) { b[dStream] = 0xff }},
		{"tensor name len", func(b []byte) { b[t0+tNameLen] = MaxTensorName + 1 }},
		{"tensor type len", func(b []byte) { b[t0+tTypeLen] = MaxDatatypeLen + 1 }},
		{"tensor rank", func(b []byte) { b[t0+tRank] = MaxRank + 1 }},
		{"tensor reserved", func(b []byte) { b[t0+tReserved+2] = 1 }},
		{"descriptor reserved tail", func(b []byte) { b[DescriptorSize-1] = 1 }},
		{"last tensor record on too high a count", func(b []byte) { b[dNTensors] = MaxTensors; b[dReserved-TensorSize+tRank] = MaxRank + 1 }},
		{"tensor past payload", func(b []byte) { le.PutUint64(b[t0+tDataOff:], 1) }},
		{"tensor offset overflow", func(b []byte) {
			le.PutUint64(b[t0+tDataOff:], 1<<63)
			le.PutUint64(b[t0+tDataLen:], 1<<63)
		}},
		{"negative dim", func(b []byte) { le.PutUint64(b[t0+tShape:], ^uint64(0)) }},
		{"type utf8", func(b []byte) { b[t0+tType] = 0xc0 }},
	} {
		b := bytes.Clone(good)
		c.mut(b)
		if _, err := DecodeDescriptor(b); !errors.Is(err, ErrBadDescriptor) {
			t.Errorf("%s: err = %v, want ErrBadDescriptor", c.name, err)
		}
	}
	if _, err := DecodeDescriptor(good[:100]); !errors.Is(err, ErrBadDescriptor) {
		t.Errorf("short buffer: err = %v", err)
	}
}

func TestCheckPayload(t *testing.T) {
	r := RingLayout{Descriptors: 4, Slots: 3, SlotSize: 8192}
	for _, c := range []struct {
		slot     uint32
		off, len uint64
		ok       bool
	}{
		{NoSlot, 0, 0, true}, {0, 0, 8192, true}, {2, 8191, 1, true}, {2, 8192, 0, true},
		{3, 0, 1, false}, {0, 8192, 1, false}, {0, 1, 8192, false}, {1, 1 << 63, 1 << 63, false},
		{0, ^uint64(0), 2, false},
	} {
		d := Descriptor{Slot: c.slot, PayloadOff: c.off, PayloadLen: c.len}
		if err := d.CheckPayload(r); (err == nil) != c.ok {
			t.Errorf("slot %d %d+%d: err = %v, want ok=%v", c.slot, c.off, c.len, err, c.ok)
		}
	}
}

func TestCheckEncodable(t *testing.T) {
	for _, d := range []Descriptor{
		{Stream: strings.Repeat("s", MaxStreamLen+1)},
		{Model: strings.Repeat("m", MaxModelLen+1)},
		{Message: strings.Repeat("x", MaxMessageLen+1)},
		{NumTensors: MaxTensors + 1},
		{NumTensors: 1, Tensors: [MaxTensors]Tensor{{Name: strings.Repeat("n", MaxTensorName+1)}}},
		{NumTensors: 1, Tensors: [MaxTensors]Tensor{{Datatype: "FLOAT_32_X"}}},
		{NumTensors: 1, Tensors: [MaxTensors]Tensor{{Rank: MaxRank + 1}}},
	} {
		if err := d.CheckEncodable(); !errors.Is(err, ErrBadDescriptor) {
			t.Errorf("CheckEncodable(%+v) = %v", d, err)
		}
	}
}

func FuzzDecodeDescriptor(f *testing.F) {
	d := sampleDescriptor()
	b := make([]byte, DescriptorSize)
	d.Encode(b)
	f.Add(b)
	f.Add(make([]byte, DescriptorSize))
	f.Add(bytes.Repeat([]byte{0xff}, DescriptorSize))
	f.Add(b[:17])
	x := d
	x.Slot, x.Region = NoSlot, 7
	xb := make([]byte, DescriptorSize)
	x.Encode(xb)
	f.Add(xb)
	r := RingLayout{Descriptors: 16, Slots: 4, SlotSize: 8 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		d, err := DecodeDescriptor(b)
		if err != nil {
			return
		}
		// Whatever decodes must satisfy the invariants the server relies on,
		// and re-encode to the same meaning.
		if d.NumTensors > MaxTensors || len(d.Stream) > MaxStreamLen || len(d.Model) > MaxModelLen {
			t.Fatalf("bounds violated: %+v", d)
		}
		for i := range d.NumTensors {
			tt := d.Tensors[i]
			if tt.Offset > d.PayloadLen || tt.Offset+tt.Length > d.PayloadLen || tt.Rank > MaxRank {
				t.Fatalf("tensor %d outside payload: %+v", i, tt)
			}
		}
		if d.Region != 0 && (d.Slot != NoSlot || d.Region > MaxExtraRegions || d.PayloadOff+d.PayloadLen < d.PayloadOff) {
			t.Fatalf("extra region payload accepted: %+v", d)
		}
		if d.CheckPayload(r) == nil && d.Slot != NoSlot {
			end := uint64(d.Slot)*r.SlotSize + d.PayloadOff + d.PayloadLen
			if end > uint64(r.Slots)*r.SlotSize {
				t.Fatalf("payload ends at %d past the arena", end)
			}
		}
		out := make([]byte, DescriptorSize)
		d.Encode(out)
		d2, err := DecodeDescriptor(out)
		if err != nil || !reflect.DeepEqual(d, d2) {
			t.Fatalf("re-encode: %v\n%+v\n%+v", err, d, d2)
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	b, l := encodedHeader(f, DefaultConfig)
	f.Add(b, l.RegionSize)
	b2, l2 := encodedHeader(f, Config{Requests: RingConfig{2, 1, 4096}, Responses: RingConfig{4096, 1024, 4096}})
	f.Add(b2, l2.RegionSize)
	f.Add(make([]byte, HeaderSize), uint64(1<<20))
	f.Fuzz(func(t *testing.T, b []byte, size uint64) {
		defer fuzztest.Bound(t)()
		l, err := DecodeHeader(b, size)
		if err != nil {
			return
		}
		if l.RegionSize > size {
			t.Fatalf("region %d larger than file %d", l.RegionSize, size)
		}
		prevEnd := uint64(HeaderSize)
		for i, r := range l.Rings {
			if r.RingOff < prevEnd || r.DescOff+uint64(r.Descriptors)*DescriptorSize > l.RegionSize {
				t.Fatalf("ring %d control block out of place: %+v", i, r)
			}
			prevEnd = r.DescOff + uint64(r.Descriptors)*DescriptorSize
		}
		for i, r := range l.Rings {
			if r.ArenaOff < prevEnd || r.ArenaOff+uint64(r.Slots)*r.SlotSize > l.RegionSize {
				t.Fatalf("ring %d arena out of place: %+v", i, r)
			}
			prevEnd = r.ArenaOff + uint64(r.Slots)*r.SlotSize
		}
		out := make([]byte, HeaderSize)
		EncodeHeader(out, l)
		if !bytes.Equal(out, b[:HeaderSize]) {
			t.Fatal("accepted header does not re-encode identically")
		}
	})
}
