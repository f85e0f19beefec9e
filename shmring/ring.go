package shmring

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Futex syscalls made by this process, for the profiling mode and benchmarks:
// the machine-independent measure of what a message costs the kernel.
var futexWaits, futexWakes atomic.Uint64

// FutexCalls reports how many FUTEX_WAIT and FUTEX_WAKE syscalls this process
// has made on rings so far.
func FutexCalls() (waits, wakes uint64) { return futexWaits.Load(), futexWakes.Load() }

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
	readySeq     *uint32
	readyWaiters *uint32
	spaceSeq     *uint32
	spaceWaiters *uint32
	states       []uint32
	desc         []byte
	arena        []byte

	// closed is private: set by the session when either side goes away, so
	// sleepers re-check it after every wake-up.
	closed *atomic.Bool
}

func newRing(r *Region, idx int, closed *atomic.Bool) ring {
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
		readySeq:     u32(base + offReadySeq),
		readyWaiters: u32(base + offReadyWaiters),
		spaceSeq:     u32(base + offSpaceSeq),
		spaceWaiters: u32(base + offSpaceWaiters),
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

// wake bumps seq and wakes its sleepers, skipping the syscall when the peer
// has announced no sleeper. Sequential consistency of the Go atomics makes
// this safe: the sleeper increments waiters before re-checking the counter,
// the waker publishes the counter before loading waiters, so at least one of
// them sees the other.
func wake(seq, waiters *uint32) {
	if atomic.LoadUint32(waiters) == 0 {
		return
	}
	atomic.AddUint32(seq, 1)
	futexWake(seq, 1<<30)
}

// forceWake wakes all sleepers whatever the waiters word says (the peer may
// have zeroed it): used when a session closes.
func forceWake(seq *uint32) {
	atomic.AddUint32(seq, 1)
	futexWake(seq, 1<<30)
}

// The adaptive wait spins for a time window, then sleeps on the futex. The
// window follows the waits it observes: after a sleep that lasted T ≤
// spinWindowMax, the next window is 2T (a spin that long would have caught
// it, and spinning for about the cost of a sleep and wake-up is within 2× of
// the best choice made in hindsight); after a longer sleep it halves, down to
// spinWindowMin. So a busy ring converges to pure spinning (no syscalls), an
// idle or slow one to a short spin and a sleep, and nothing polls while idle.
// Time is read every pollsPerClock polls only (time.Now is a vDSO call, not a
// syscall, on linux/amd64 and linux/arm64).
const (
	spinWindowMin     = 2 * time.Microsecond
	spinWindowDefault = 16 * time.Microsecond
	spinWindowMax     = 64 * time.Microsecond
	pollsPerClock     = 32
	// Gosched every this many polls so a spinner never starves a goroutine
	// queued on its P (the peer, when both ends live in one process).
	spinYieldEvery = 256
)

// Spin controls how a waiter spins before it sleeps on the futex. A positive
// value spins that many polls.
type Spin int

const (
	// SpinAdaptive spins for a window of 2–64 µs that follows the observed
	// waits (see above).
	SpinAdaptive Spin = 0
	// SpinNever sleeps on the futex at once (lowest CPU; a futex wait and wake
	// per message whenever the consumer is idle).
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
// seq. cond must also check the session's closed flag.
func await(sp *spinner, seq, waiters *uint32, cond func() (bool, error)) error {
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
			if i%spinYieldEvery == 0 {
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
		v := atomic.LoadUint32(seq)
		if ok, err := cond(); ok || err != nil {
			if sp.mode == SpinAdaptive {
				sp.observe(time.Since(start))
			}
			return err
		}
		if err := futexWait(seq, v); err != nil {
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
