//go:build linux

package shmring

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/vig-edge/vig/internal/fuzztest"
	"github.com/vig-edge/vig/platform/shmprobe"
	"github.com/vig-edge/vig/platform/sysinfo"
)

// localPair wires a Sender and a Receiver to one ring of a fresh region, with
// no socket: enough to test the ring's logic in one goroutine.
func localPair(t testing.TB, rc RingConfig) (*Sender, *Receiver, *atomic.Bool) {
	t.Helper()
	requireRing(t)
	r, err := CreateRegion(Config{Requests: rc, Responses: RingConfig{2, 1, 4096}}, BackendAuto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	closed := new(atomic.Bool)
	ready, err := newLocalBell("ready")
	if err != nil {
		t.Fatal(err)
	}
	space, err := newLocalBell("space")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ready.close(); space.close() })
	return newSender(r, RequestRing, closed, ready, space), newReceiver(r, RequestRing, closed, ready, space), closed
}

// TestMappedOffsets checks that the pointers the ring uses are where the ABI
// says and aligned in the actual mapping, on this GOARCH.
func TestMappedOffsets(t *testing.T) {
	s, _, _ := localPair(t, RingConfig{Descriptors: 8, Slots: 3, SlotSize: 4096})
	base := uintptr(unsafe.Pointer(&s.region.mem[0]))
	ro := uintptr(s.lay.RingOff)
	for _, c := range []struct {
		name string
		p    unsafe.Pointer
		off  uintptr
	}{
		{"head", unsafe.Pointer(s.ring.head), ro + 0},
		{"tail", unsafe.Pointer(s.ring.tail), ro + 128},
		{"ready waiters", unsafe.Pointer(s.readyWaiters), ro + 260},
		{"space waiters", unsafe.Pointer(s.spaceWaiters), ro + 388},
		{"slot states", unsafe.Pointer(&s.states[0]), ro + 512},
		{"descriptors", unsafe.Pointer(&s.desc[0]), ro + 512 + 128},
	} {
		if got := uintptr(c.p) - base; got != c.off {
			t.Errorf("%s at %d, want %d", c.name, got, c.off)
		}
	}
	if base%PageSize != 0 || (uintptr(unsafe.Pointer(s.ring.head))-base)%CacheLine != 0 {
		t.Errorf("mapping or counters misaligned: base %#x", base)
	}
}

// TestRingModel runs random operation sequences against a simple model of
// the ring: what was posted comes out in order, slots are never loaned twice,
// fullness and emptiness are reported exactly.
func TestRingModel(t *testing.T) {
	const desc, slots = 4, 3
	s, r, _ := localPair(t, RingConfig{Descriptors: desc, Slots: slots, SlotSize: 4096})
	s.SetSpin(SpinNever)
	rng := rand.New(rand.NewPCG(3, 4))
	var (
		queue    []uint64 // tags posted, not received
		loaned   = map[uint32]bool{}
		held     = map[uint32]bool{}
		slotOf   = map[uint64]uint32{}
		nextTag  uint64
		received int
	)
	for step := range 20000 {
		switch rng.IntN(4) {
		case 0: // loan
			slot, buf, err := s.TryLoan()
			free := slots - len(loaned) - len(held) - countQueued(queue, slotOf)
			if free == 0 {
				if !errors.Is(err, ErrFull) {
					t.Fatalf("step %d: loan with no free slot: %v", step, err)
				}
				continue
			}
			if err != nil || loaned[slot] || held[slot] || len(buf) != 4096 {
				t.Fatalf("step %d: loan gave slot %d (%v), loaned %v held %v", step, slot, err, loaned, held)
			}
			loaned[slot] = true
		case 1: // post, with a loaned slot when there is one
			nextTag++
			d := Descriptor{Tag: nextTag, Slot: NoSlot}
			for sl := range loaned {
				d.Slot, d.PayloadLen = sl, 10
				break
			}
			err := s.TryPost(&d)
			if len(queue) == desc {
				if !errors.Is(err, ErrFull) {
					t.Fatalf("step %d: post to a full ring: %v", step, err)
				}
				nextTag--
				continue
			}
			if err != nil {
				t.Fatalf("step %d: post: %v", step, err)
			}
			queue = append(queue, nextTag)
			if d.Slot != NoSlot {
				delete(loaned, d.Slot)
				slotOf[nextTag] = d.Slot
			}
		case 2: // receive
			var d Descriptor
			ok, err := r.TryNext(&d)
			if err != nil || ok != (len(queue) > 0) {
				t.Fatalf("step %d: TryNext = %v, %v with %d queued", step, ok, err, len(queue))
			}
			if !ok {
				continue
			}
			if d.Tag != queue[0] {
				t.Fatalf("step %d: received tag %d, want %d", step, d.Tag, queue[0])
			}
			if sl, has := slotOf[d.Tag]; has {
				if d.Slot != sl {
					t.Fatalf("step %d: tag %d slot %d, want %d", step, d.Tag, d.Slot, sl)
				}
				held[sl] = true
				delete(slotOf, d.Tag)
			}
			queue = queue[1:]
			received++
		case 3: // release a held slot (or a bogus one: must be a no-op)
			if rng.IntN(4) == 0 {
				r.Release(uint32(rng.IntN(slots + 3)))
				for sl := range held { // a bogus release may hit a held slot
					if !r.held.has(sl) {
						delete(held, sl)
					}
				}
				continue
			}
			for sl := range held {
				r.Release(sl)
				delete(held, sl)
				break
			}
		}
		if r.Held() != len(held) {
			t.Fatalf("step %d: receiver holds %d, model %d", step, r.Held(), len(held))
		}
	}
	if received < 1000 {
		t.Fatalf("only %d messages went through", received)
	}
}

func countQueued(queue []uint64, slotOf map[uint64]uint32) int {
	n := 0
	for _, tag := range queue {
		if _, ok := slotOf[tag]; ok {
			n++
		}
	}
	return n
}

// TestReceiverRejectsCorruptHead covers the producer counter checks.
func TestReceiverRejectsCorruptHead(t *testing.T) {
	for _, head := range []uint64{5, 1 << 63, ^uint64(0)} {
		s, r, _ := localPair(t, RingConfig{Descriptors: 4, Slots: 1, SlotSize: 4096})
		atomic.StoreUint64(s.ring.head, head)
		var d Descriptor
		if _, err := r.TryNext(&d); !errors.Is(err, ErrCorrupt) {
			t.Errorf("head %d: %v, want ErrCorrupt", head, err)
		}
	}
	// A head exactly one ring ahead is legal (a full ring).
	s, r, _ := localPair(t, RingConfig{Descriptors: 4, Slots: 1, SlotSize: 4096})
	for range 4 {
		if err := s.TryPost(&Descriptor{Slot: NoSlot}); err != nil {
			t.Fatal(err)
		}
	}
	var d Descriptor
	if ok, err := r.TryNext(&d); !ok || err != nil {
		t.Errorf("full ring: %v %v", ok, err)
	}
}

func TestSenderRejectsCorruptTail(t *testing.T) {
	for _, tail := range []uint64{1, 1 << 40, ^uint64(0)} {
		s, _, _ := localPair(t, RingConfig{Descriptors: 4, Slots: 1, SlotSize: 4096})
		atomic.StoreUint64(s.ring.tail, tail)
		if err := s.TryPost(&Descriptor{Slot: NoSlot}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("tail %d: %v, want ErrCorrupt", tail, err)
		}
	}
}

// TestScribbledSlotStates: a peer marking a loaned slot free cannot make the
// sender loan it twice, and posting an unloaned slot is refused.
func TestScribbledSlotStates(t *testing.T) {
	s, _, _ := localPair(t, RingConfig{Descriptors: 4, Slots: 2, SlotSize: 4096})
	a, _, err := s.TryLoan()
	if err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint32(&s.states[a], slotFree)
	b, _, err := s.TryLoan()
	if err != nil || b == a {
		t.Fatalf("second loan %d (%v), first %d", b, err, a)
	}
	atomic.StoreUint32(&s.states[a], slotFree)
	if _, _, err := s.TryLoan(); !errors.Is(err, ErrFull) {
		t.Fatalf("third loan: %v, want ErrFull", err)
	}
	s.Unloan(b)
	if err := s.TryPost(&Descriptor{Slot: b, PayloadLen: 1}); !errors.Is(err, ErrBadDescriptor) {
		t.Errorf("posting an unloaned slot: %v", err)
	}
}

// TestDuplicateSlotRejected: a second message naming a held slot fails alone.
func TestDuplicateSlotRejected(t *testing.T) {
	s, r, _ := localPair(t, RingConfig{Descriptors: 4, Slots: 2, SlotSize: 4096})
	slot, _, _ := s.TryLoan()
	if err := s.TryPost(&Descriptor{Tag: 1, Slot: slot, PayloadLen: 8}); err != nil {
		t.Fatal(err)
	}
	// Forge a second descriptor with the same slot.
	(&Descriptor{Tag: 2, Slot: slot, PayloadLen: 8}).encode(s.descAt(s.head))
	s.head++
	atomic.StoreUint64(s.ring.head, s.head)
	var d Descriptor
	if ok, err := r.TryNext(&d); !ok || err != nil || d.Slot != slot {
		t.Fatalf("first: %v %v %+v", ok, err, d)
	}
	if ok, err := r.TryNext(&d); !ok || !errors.Is(err, ErrBadDescriptor) || d.Tag != 2 || d.Slot != NoSlot {
		t.Fatalf("duplicate: %v %v %+v", ok, err, d)
	}
	if !r.held.has(slot) || atomic.LoadUint32(&s.states[slot]) != slotInUse {
		t.Error("the rejected duplicate freed the slot the first message holds")
	}
}

func TestClosedRing(t *testing.T) {
	s, r, closed := localPair(t, RingConfig{Descriptors: 4, Slots: 1, SlotSize: 4096})
	closed.Store(true)
	var d Descriptor
	if _, err := r.TryNext(&d); !errors.Is(err, ErrClosed) {
		t.Error(err)
	}
	if err := r.Next(&d); !errors.Is(err, ErrClosed) {
		t.Error(err)
	}
	if _, _, err := s.Loan(); !errors.Is(err, ErrClosed) {
		t.Error(err)
	}
	if err := s.Post(&Descriptor{Slot: NoSlot}); !errors.Is(err, ErrClosed) {
		t.Error(err)
	}
}

func TestParseBackend(t *testing.T) {
	for in, want := range map[string]Backend{"": BackendAuto, "auto": BackendAuto, "memfd": BackendMemfd, "shm": BackendShmFile} {
		if got, err := ParseBackend(in); err != nil || got != want {
			t.Errorf("ParseBackend(%q) = %v, %v", in, got, err)
		}
		if in != "" && want.String() != in {
			t.Errorf("%v.String() = %q", want, want.String())
		}
	}
	if _, err := ParseBackend("tmpfs"); err == nil {
		t.Error("unknown backend accepted")
	}
}

// TestProbeErrorsWrapUnsupported: with /dev/shm gone and memfd working the
// probe picks memfd; creating a /dev/shm region then fails with
// errors.ErrUnsupported and the kernel release in the message.
func TestProbeErrorsWrapUnsupported(t *testing.T) {
	old := shmprobe.DevShm
	shmprobe.DevShm = t.TempDir() + "/absent"
	defer func() { shmprobe.DevShm = old }()
	_, err := CreateRegion(testConfig, BackendShmFile)
	if !errors.Is(err, errors.ErrUnsupported) || !containsStr(err.Error(), sysinfo.Release()) {
		t.Fatalf("CreateRegion without %s: %v", shmprobe.DevShm, err)
	}
	if _, merr := probeMemfd(); merr == nil {
		if b, err := Probe(); err != nil || b != BackendMemfd {
			t.Errorf("Probe = %v, %v", b, err)
		}
	}
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// FuzzScribbledRing lets the fuzzer write anything into a ring's shared
// control block and descriptors, as a hostile peer could, then drives both
// ends. Nothing may panic, and every payload view handed out must lie inside
// its slot.
func FuzzScribbledRing(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	f.Add(make([]byte, 64), uint16(3))
	d := sampleDescriptor()
	d.Slot, d.PayloadOff, d.PayloadLen = 1, 10, 100
	d.NumTensors = 0
	good := make([]byte, DescriptorSize)
	d.Encode(good)
	seed := make([]byte, 1024+DescriptorSize)
	seed[0] = 1 // head = 1
	copy(seed[1024:], good)
	f.Add(seed, uint16(0xffff))
	const rc = 512 + 128 // control block size for 2 slots
	f.Fuzz(func(t *testing.T, scribble []byte, ops uint16) {
		defer fuzztest.Bound(t)()
		s, r, _ := localPair(t, RingConfig{Descriptors: 4, Slots: 2, SlotSize: 4096})
		ctrl := s.region.mem[s.lay.RingOff : s.lay.DescOff+uint64(s.lay.Descriptors)*DescriptorSize]
		// Spread the scribble: the first 1024 bytes over the control block
		// (counters, futex words, slot states), the rest over descriptors.
		head := scribble[:min(len(scribble), 1024)]
		for i, c := range head {
			ctrl[(i*rc/1024)%rc] = c
		}
		if len(scribble) > 1024 {
			copy(ctrl[rc:], scribble[1024:])
		}
		var got Descriptor
		for i := range 8 {
			ok, err := r.TryNext(&got)
			if err == nil && ok {
				p := r.Payload(&got)
				if got.Slot != NoSlot {
					lo := uint64(got.Slot) * r.lay.SlotSize
					start := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p))) - uintptr(unsafe.Pointer(&r.arena[0])))
					if len(p) > 0 && (start < lo || start+uint64(len(p)) > lo+r.lay.SlotSize) {
						t.Fatalf("payload view [%d,+%d) outside slot %d", start, len(p), got.Slot)
					}
				}
			}
			if ops&(1<<i) != 0 {
				r.Release(uint32(i % 3))
			}
		}
		// The producer end must also survive the scribbled state.
		if slot, _, err := s.TryLoan(); err == nil {
			s.TryPost(&Descriptor{Slot: slot, PayloadLen: 1})
		}
		s.TryPost(&Descriptor{Slot: NoSlot})
	})
}

// AwaitFree returns at once when a slot is free, waits while the consumer holds
// every slot and returns when one comes back, loaning none, and ends with the ring.
func TestAwaitFree(t *testing.T) {
	s, r, closed := localPair(t, RingConfig{Descriptors: 4, Slots: 1, SlotSize: 4096})
	if err := s.AwaitFree(); err != nil {
		t.Fatalf("a free slot: %v", err)
	}
	slot, _, err := s.TryLoan()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TryPost(&Descriptor{Tag: 1, Slot: slot, PayloadLen: 1}); err != nil {
		t.Fatal(err)
	}
	var d Descriptor
	if ok, err := r.TryNext(&d); !ok || err != nil {
		t.Fatalf("receive: %v %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.AwaitFree() }()
	select {
	case err := <-done:
		t.Fatalf("AwaitFree returned (%v) while the consumer holds the only slot", err)
	case <-time.After(20 * time.Millisecond):
	}
	r.Release(d.Slot)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after the release: %v", err)
		}
	case <-time.After(5 * time.Second): // a hang guard
		t.Fatal("AwaitFree did not return once the slot came back")
	}
	if _, _, err := s.TryLoan(); err != nil {
		t.Fatalf("AwaitFree took the slot: %v", err)
	}
	closed.Store(true)
	if err := s.AwaitFree(); !errors.Is(err, ErrClosed) {
		t.Errorf("closed ring: %v, want ErrClosed", err)
	}
}
