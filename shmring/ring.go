package shmring

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Slot states (one uint32 per payload slot in the control block).
const (
	slotFree  = 0
	slotInUse = 1
)

// ring holds pointers into one ring of a mapped region. The pointers are
// derived from a validated Layout, so they are always inside the mapping;
// only the values behind them are untrusted.
type ring struct {
	region *Region
	lay    RingLayout
	mask   uint64

	head         *uint64
	tail         *uint64
	readyWaiters *uint32
	spaceWaiters *uint32
	// readyBell wakes the consumer (rung after a post), spaceBell the producer
	// (rung after a consume or a returned slot). nil where nobody on the other
	// side ever sleeps (vig never waits for room in the response ring).
	readyBell, spaceBell *bell
	states               []uint32
	desc                 []byte
	arena                []byte

	// closed is private: set by the session when either side goes away, so
	// sleepers re-check it after every wake-up.
	closed *atomic.Bool
}

func newRing(r *Region, idx int, closed *atomic.Bool, ready, space *bell) ring {
	l := r.layout.Rings[idx]
	m := r.mem
	u64 := func(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&m[off])) }
	u32 := func(off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }
	base := l.RingOff
	return ring{
		region:       r,
		lay:          l,
		mask:         uint64(l.Descriptors) - 1,
		head:         u64(base + offHead),
		tail:         u64(base + offTail),
		readyWaiters: u32(base + offReadyWaiters),
		spaceWaiters: u32(base + offSpaceWaiters),
		readyBell:    ready,
		spaceBell:    space,
		states:       unsafe.Slice(u32(base+offSlotStates), l.Slots),
		desc:         m[l.DescOff : l.DescOff+uint64(l.Descriptors)*DescriptorSize],
		arena:        m[l.ArenaOff : l.ArenaOff+uint64(l.Slots)*l.SlotSize],
		closed:       closed,
	}
}

func (r *ring) descAt(seq uint64) []byte {
	i := (seq & r.mask) * DescriptorSize
	return r.desc[i : i+DescriptorSize]
}

func (r *ring) slot(i uint32) []byte {
	off := uint64(i) * r.lay.SlotSize
	return r.arena[off : off+r.lay.SlotSize : off+r.lay.SlotSize]
}

// wake rings b, skipping the syscall when the peer has announced no sleeper.
// Sequential consistency of the Go atomics makes this safe: the sleeper
// increments waiters before re-checking the counter, the waker publishes the
// counter before loading waiters, so at least one of them sees the other; and
// the sleeper re-checks once more after the netpoller has forgotten earlier
// edges (bell.wait), so a ring that arrives before it parks is not lost.
func wake(b *bell, waiters *uint32) {
	if atomic.LoadUint32(waiters) == 0 {
		return
	}
	b.ring()
}

// The adaptive wait spins for a time window, then sleeps on the doorbell. The
// window follows the waits it observes: after a sleep that lasted T ≤
// spinWindowMax, the next window is 2T (a spin that long would have caught
// it, and spinning for about the cost of a sleep and wake-up is within 2× of
// the best choice made in hindsight); after a longer sleep it halves, down to
// spinWindowMin. So a busy ring converges to pure spinning (no syscalls), an
// idle or slow one to a short spin and a sleep in the netpoller, and nothing
// polls while idle.
// Time is read every pollsPerClock polls only (time.Now is a vDSO call, not a
// syscall, on linux/amd64 and linux/arm64).
const (
	spinWindowMin     = 2 * time.Microsecond
	spinWindowDefault = 16 * time.Microsecond
	spinWindowMax     = 64 * time.Microsecond
	pollsPerClock     = 32
	// Gosched every this many polls so a spinner that never sleeps
	// (SpinForever, or a count) never starves a goroutine queued on its P (the
	// peer, when both ends live in one process). The adaptive spin does not
	// yield: its window (≤ spinWindowMax) bounds the delay it can cause, and a
	// Gosched is not free — it wakes an idle thread to look for work (a futex
	// wake and two context switches), which measured as most of a ring
	// request's context switches before it was left out.
	spinYieldEvery = 256
)

// Spin controls how a waiter spins before it sleeps on its doorbell. A positive
// value spins that many polls.
type Spin int

const (
	// SpinAdaptive spins for a window of 2–64 µs that follows the observed
	// waits (see above).
	SpinAdaptive Spin = 0
	// SpinNever sleeps on the doorbell at once (lowest CPU; a doorbell ring
	// and a netpoller wake-up per message whenever the consumer is idle).
	SpinNever Spin = -1
	// SpinForever never sleeps (lowest latency, burns a CPU while idle; for
	// benchmarks and dedicated cores).
	SpinForever Spin = -2
)

type spinner struct {
	mode   Spin
	window time.Duration // SpinAdaptive only; 0 means not yet set
}

// observe adapts the window to a wait that ended after a sleep.
func (s *spinner) observe(waited time.Duration) {
	if s.mode != SpinAdaptive {
		return
	}
	if waited <= spinWindowMax {
		s.window = min(max(2*waited, spinWindowMin), spinWindowMax)
	} else {
		s.window = max(s.window/2, spinWindowMin)
	}
}

// await waits until cond returns true (or an error), spinning then sleeping on
// the doorbell b. cond must also check the session's closed flag: the session
// sets it before it closes the bells, so a wait cut short by the close finds it.
func await(sp *spinner, b *bell, waiters *uint32, cond func() (bool, error)) error {
	if ok, err := cond(); ok || err != nil {
		return err // the common case under load: no clock read, no spin
	}
	var start time.Time
	if sp.mode == SpinAdaptive {
		start = time.Now()
		if sp.window == 0 {
			sp.window = spinWindowDefault
		}
	}
	if sp.mode != SpinNever {
		for i := 1; sp.mode < 0 || sp.mode == SpinAdaptive || i < int(sp.mode); i++ {
			if ok, err := cond(); ok || err != nil {
				return err
			}
			if sp.mode != SpinAdaptive && i%spinYieldEvery == 0 {
				runtime.Gosched()
			}
			if sp.mode == SpinAdaptive && i%pollsPerClock == 0 && time.Since(start) > sp.window {
				break
			}
		}
	}
	atomic.AddUint32(waiters, 1)
	defer atomic.AddUint32(waiters, ^uint32(0))
	for {
		if ok, err := cond(); ok || err != nil {
			if sp.mode == SpinAdaptive {
				sp.observe(time.Since(start))
			}
			return err
		}
		done, err := b.wait(cond)
		if done {
			if sp.mode == SpinAdaptive {
				sp.observe(time.Since(start))
			}
			return err
		}
		if err != nil {
			if ok, cerr := cond(); ok || cerr != nil {
				return cerr
			}
			return err
		}
	}
}

// bitset tracks private per-slot ownership; updated atomically because the
// receiving and the releasing goroutine may differ.
type bitset [MaxSlots / 64]atomic.Uint64

func (b *bitset) set(i uint32) (was bool) {
	m := uint64(1) << (i % 64)
	return b[i/64].Or(m)&m != 0
}

func (b *bitset) clear(i uint32) (was bool) {
	m := uint64(1) << (i % 64)
	return b[i/64].And(^m)&m != 0
}

func (b *bitset) has(i uint32) bool { return b[i/64].Load()&(1<<(i%64)) != 0 }

func (b *bitset) count() int {
	n := 0
	for i := range b {
		n += bits.OnesCount64(b[i].Load())
	}
	return n
}
