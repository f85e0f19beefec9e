//go:build linux

package shmring

import (
	"bytes"
	"strings"
	"testing"
	"time"

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
	gen3, err := s.AddRegion(3, fd, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	loose := sealedMemfd(t, 4096, 0, []byte("x"), false)
	gen4, err := s.AddRegion(4, loose, 4096)
	if err != nil {
		t.Fatal(err)
	}
	post := func(tag uint64, region, gen uint32, off, n uint64) {
		t.Helper()
		postExtra(t, s, tag, region, gen, off, n)
	}
	post(1, 3, gen3, 8192, uint64(len(frame)))
	post(2, 4, gen4, 0, 1)        // unsealed: refused
	post(3, 3, gen3, 1<<20-8, 16) // past the region's end
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
	post(4, 3, gen3, 0, 0)
	if err := c.Recv(&req); err != nil { // answers 2 and 3 on its way to 4
		t.Fatal(err)
	}
	if err := c.Respond(&req, &Response{Status: StatusOK}); err != nil {
		t.Fatal(err)
	}
	answer(map[uint64]string{2: "extra region 4 was refused", 3: "past extra region 3 (1048576 B)", 4: ""})
	// Every request naming region 3 is answered: it may be dropped, and its id
	// added again.
	if err := s.DropRegion(3); err != nil {
		t.Fatal(err)
	}
	if gen3, err = s.AddRegion(3, fd, 1<<20); err != nil {
		t.Fatal(err)
	}
	post(5, 3, gen3, 8192, 4)
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	if req.Tag != 5 || string(req.Payload()) != "fram" {
		t.Errorf("after drop and add again: tag %d payload %q, want tag 5 \"fram\"", req.Tag, req.Payload())
	}
	c.Release(&req)
}

// postExtra posts a request whose n bytes at off lie in extra region id of
// generation gen.
func postExtra(t *testing.T, s *Session, tag uint64, id, gen uint32, off, n uint64) {
	t.Helper()
	d := Descriptor{Tag: tag, Slot: NoSlot, Region: id, RegionGen: gen, PayloadOff: off, PayloadLen: n, Model: "m", NumTensors: 1}
	d.Tensors[0] = Tensor{Name: "INPUT0", Datatype: "UINT8", Rank: 1, Dims: [MaxRank]int64{int64(n)}, Length: n}
	if err := s.Requests.Post(&d); err != nil {
		t.Fatal(err)
	}
}

// An id dropped and added again names a new registration: a descriptor naming
// it that the server reads before the drop and the add (the socket and the
// ring are two channels) waits for them instead of resolving to the old
// region, another client's bytes. The test posts such a descriptor before it
// sends the drop and the add, the order the race produces.
func TestExtraRegionReusedIDWaitsForItsRegistration(t *testing.T) {
	requireRing(t)
	c, s, _ := pair(t, ServerConfig{}, DialOptions{})
	oldFd := sealedMemfd(t, 4096, 0, []byte("old client's frame"), true)
	newFd := sealedMemfd(t, 4096, 0, []byte("new client's frame"), true)
	gen, err := s.AddRegion(7, oldFd, 4096)
	if err != nil {
		t.Fatal(err)
	}
	postExtra(t, s, 1, 7, gen, 0, 18)
	var req Request
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	if got := string(req.Payload()); got != "old client's frame" {
		t.Fatalf("first registration: payload %q", got)
	}
	if err := c.Respond(&req, &Response{Status: StatusOK}); err != nil {
		t.Fatal(err)
	}

	// The next generation Session.AddRegion will hand out.
	next := (s.xgen.Load() + 1) & MaxRegionGen
	waits := c.extra.waits.Load()
	postExtra(t, s, 2, 7, next, 0, 18)
	got := make(chan string, 1)
	go func() {
		var req Request
		if err := c.Recv(&req); err != nil {
			got <- "Recv: " + err.Error()
			return
		}
		got <- string(req.Payload())
		c.Release(&req)
	}()
	// Recv has the descriptor with no registration of its generation yet: it
	// must wait, not answer from the old region. The drop and the add follow.
	for c.extra.waits.Load() == waits {
		select {
		case p := <-got:
			t.Fatalf("a descriptor naming a registration of id 7 not yet made was read against the old one: %q", p)
		case <-time.After(time.Millisecond):
		}
	}
	if err := s.DropRegion(7); err != nil {
		t.Fatal(err)
	}
	if gen, err = s.AddRegion(7, newFd, 4096); err != nil {
		t.Fatal(err)
	}
	if gen != next {
		t.Fatalf("AddRegion handed out generation %d, the test expected %d", gen, next)
	}
	if p := <-got; p != "new client's frame" {
		t.Errorf("a descriptor naming the new registration of id 7 read %q, want the new client's frame", p)
	}

	// A descriptor naming the dropped registration (the client broke the
	// rule: drop only once answered) is refused with the reason, not waited on.
	postExtra(t, s, 3, 7, gen-1, 0, 18)
	postExtra(t, s, 4, 7, gen, 0, 3)
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	if req.Tag != 4 || string(req.Payload()) != "new" {
		t.Errorf("tag %d payload %q, want tag 4 \"new\"", req.Tag, req.Payload())
	}
	c.Release(&req)
	for _, want := range []uint64{1, 3} { // 2 and 4 were released unanswered
		var d Descriptor
		if err := s.Responses.Next(&d); err != nil {
			t.Fatal(err)
		}
		s.Responses.Release(d.Slot)
		if d.Tag != want {
			t.Fatalf("answer for tag %d, want %d", d.Tag, want)
		}
		if want == 3 && (d.Status != StatusInvalid || !strings.Contains(d.Message, "was dropped")) {
			t.Errorf("a descriptor naming a dropped registration: %v %q, want INVALID_ARGUMENT saying it was dropped", d.Status, d.Message)
		}
	}
}

// A drop names the registration it ends: one of another generation ends the
// session (the client lost track of its ids).
func TestExtraRegionDropOfAnotherGeneration(t *testing.T) {
	var tab extraRegions
	tab.init()
	fd, err := unix.MemfdCreate("vig-extra-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	unix.Ftruncate(fd, 4096)
	if err := tab.handle(encodeRegionMsg(regionOpAdd, 5, 9, 4096), []int{fd}); err != nil {
		t.Fatal(err)
	}
	err = tab.handle(encodeRegionMsg(regionOpDrop, 5, 8, 0), nil)
	if err == nil || !strings.Contains(err.Error(), "generation 8, registered as generation 9") {
		t.Errorf("drop of generation 8 while 9 is registered: %v", err)
	}
	if err := tab.handle(encodeRegionMsg(regionOpDrop, 5, 9, 0), nil); err != nil {
		t.Errorf("drop of the registered generation: %v", err)
	}
	tab.close()
}

func TestDecodeRegionMsg(t *testing.T) {
	if _, _, _, _, err := decodeRegionMsg(encodeRegionMsg(regionOpAdd, 1, MaxRegionGen, 4096)); err != nil {
		t.Errorf("valid add: %v", err)
	}
	for name, b := range map[string][]byte{
		"short":         encodeRegionMsg(regionOpAdd, 1, 1, 4096)[:63],
		"op":            encodeRegionMsg(3, 1, 1, 4096),
		"id 0":          encodeRegionMsg(regionOpAdd, 0, 1, 4096),
		"id past":       encodeRegionMsg(regionOpAdd, MaxExtraRegions+1, 1, 4096),
		"generation":    encodeRegionMsg(regionOpAdd, 1, MaxRegionGen+1, 4096),
		"size 0":        encodeRegionMsg(regionOpAdd, 1, 1, 0),
		"drop size":     encodeRegionMsg(regionOpDrop, 1, 1, 8),
		"reserved byte": append(encodeRegionMsg(regionOpAdd, 1, 1, 4096)[:63:63], 1),
	} {
		if _, _, _, _, err := decodeRegionMsg(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecodeRegionMsg(f *testing.F) {
	f.Add(encodeRegionMsg(regionOpAdd, 1, 1, 4096))
	f.Add(encodeRegionMsg(regionOpDrop, MaxExtraRegions, MaxRegionGen, 0))
	f.Add(make([]byte, regionMsgSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		op, id, gen, size, err := decodeRegionMsg(b)
		if err != nil {
			return
		}
		if id == 0 || id > MaxExtraRegions || gen > MaxRegionGen || (op == regionOpAdd) == (size == 0) || size > maxExtraSize || (op != regionOpAdd && op != regionOpDrop) {
			t.Fatalf("accepted op %d id %d generation %d size %d", op, id, gen, size)
		}
		if !bytes.Equal(encodeRegionMsg(op, id, gen, size), b) {
			t.Fatalf("%x does not re-encode to itself", b)
		}
	})
}
