//go:build linux

package shmring

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/internal/fuzztest"
)

// sealedMemfd is a memfd of n bytes holding data at off, sealed (or not).
func sealedMemfd(t *testing.T, n int, off int, data []byte, seal bool) int {
	t.Helper()
	fd, err := unix.MemfdCreate("vig-extra-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, data, int64(off)); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, requiredSeals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// A payload in an extra region reaches the server in place: it reads the
// client's bytes through the memfd the client passed, and no slot of the
// request ring is loaned, posted or returned (nothing was copied into it).
// A region that is not sealed, or a payload outside the region, fails that
// descriptor only, with the reason; after a drop the id can be added again.
func TestExtraRegionByReference(t *testing.T) {
	requireRing(t)
	c, s, _ := pair(t, ServerConfig{}, DialOptions{})
	frame := bytes.Repeat([]byte("frame-in-the-sensor's-memfd "), 100)
	fd := sealedMemfd(t, 1<<20, 8192, frame, true)
	if err := s.AddRegion(3, fd, 1<<20); err != nil {
		t.Fatal(err)
	}
	loose := sealedMemfd(t, 4096, 0, []byte("x"), false)
	if err := s.AddRegion(4, loose, 4096); err != nil {
		t.Fatal(err)
	}
	post := func(tag uint64, region uint32, off, n uint64) {
		t.Helper()
		d := Descriptor{Tag: tag, Slot: NoSlot, Region: region, PayloadOff: off, PayloadLen: n, Model: "m", NumTensors: 1}
		d.Tensors[0] = Tensor{Name: "INPUT0", Datatype: "UINT8", Rank: 1, Dims: [MaxRank]int64{int64(n)}, Length: n}
		if err := s.Requests.Post(&d); err != nil {
			t.Fatal(err)
		}
	}
	post(1, 3, 8192, uint64(len(frame)))
	post(2, 4, 0, 1)        // unsealed: refused
	post(3, 3, 1<<20-8, 16) // past the region's end
	var req Request
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	if req.Tag != 1 || req.Region != 3 || req.Slot != NoSlot {
		t.Fatalf("received tag %d region %d slot %d, want tag 1 in extra region 3 without a slot", req.Tag, req.Region, req.Slot)
	}
	if got := req.Payload(); !bytes.Equal(got, frame) {
		t.Fatalf("payload %q..., want the client's frame", got[:min(len(got), 32)])
	}
	if err := c.Respond(&req, &Response{Status: StatusOK}); err != nil {
		t.Fatal(err)
	}
	for i := range s.Requests.lay.Slots {
		if st := s.Requests.states[i]; st != slotFree {
			t.Errorf("request slot %d is in state %d: the by-reference payload used the ring's arena", i, st)
		}
	}
	answer := func(want map[uint64]string) {
		t.Helper()
		for range want {
			var d Descriptor
			if err := s.Responses.Next(&d); err != nil {
				t.Fatal(err)
			}
			w, ok := want[d.Tag]
			switch {
			case !ok:
				t.Errorf("answer for tag %d, which was not posted", d.Tag)
			case w == "" && d.Status != StatusOK:
				t.Errorf("tag %d: %v %q, want OK", d.Tag, d.Status, d.Message)
			case w != "" && (d.Status != StatusInvalid || !strings.Contains(d.Message, w)):
				t.Errorf("tag %d: %v %q, want INVALID_ARGUMENT naming %q", d.Tag, d.Status, d.Message, w)
			}
			s.Responses.Release(d.Slot)
		}
	}
	answer(map[uint64]string{1: ""})
	if err := s.DropRegion(3); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRegion(3, fd, 1<<20); err != nil {
		t.Fatal(err)
	}
	post(4, 3, 8192, 4)
	if err := c.Recv(&req); err != nil { // answers 2 and 3 on its way to 4
		t.Fatal(err)
	}
	if req.Tag != 4 || string(req.Payload()) != "fram" {
		t.Errorf("after drop and add again: tag %d payload %q, want tag 4 \"fram\"", req.Tag, req.Payload())
	}
	answer(map[uint64]string{2: "extra region 4 was refused", 3: "past extra region 3 (1048576 B)"})
	c.Release(&req)
}

func TestDecodeRegionMsg(t *testing.T) {
	if _, _, _, err := decodeRegionMsg(encodeRegionMsg(regionOpAdd, 1, 4096)); err != nil {
		t.Errorf("valid add: %v", err)
	}
	for name, b := range map[string][]byte{
		"short":         encodeRegionMsg(regionOpAdd, 1, 4096)[:63],
		"op":            encodeRegionMsg(3, 1, 4096),
		"id 0":          encodeRegionMsg(regionOpAdd, 0, 4096),
		"id past":       encodeRegionMsg(regionOpAdd, MaxExtraRegions+1, 4096),
		"size 0":        encodeRegionMsg(regionOpAdd, 1, 0),
		"drop size":     encodeRegionMsg(regionOpDrop, 1, 8),
		"reserved byte": append(encodeRegionMsg(regionOpAdd, 1, 4096)[:63:63], 1),
	} {
		if _, _, _, err := decodeRegionMsg(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecodeRegionMsg(f *testing.F) {
	f.Add(encodeRegionMsg(regionOpAdd, 1, 4096))
	f.Add(encodeRegionMsg(regionOpDrop, MaxExtraRegions, 0))
	f.Add(make([]byte, regionMsgSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		op, id, size, err := decodeRegionMsg(b)
		if err != nil {
			return
		}
		if id == 0 || id > MaxExtraRegions || (op == regionOpAdd) == (size == 0) || size > maxExtraSize || (op != regionOpAdd && op != regionOpDrop) {
			t.Fatalf("accepted op %d id %d size %d", op, id, size)
		}
		if !bytes.Equal(encodeRegionMsg(op, id, size), b) {
			t.Fatalf("%x does not re-encode to itself", b)
		}
	})
}
