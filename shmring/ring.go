package shmring

import (
	"math/bits"
	"runtime"
	"sync/atomic"
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

// Spin bounds for the adaptive wait: a waiter spins up to spinMax polls,
// doubling its budget when spinning found work and halving it when it had to
// sleep, so a steady stream never sleeps and a sparse one wastes little CPU.
const (
	spinMin     = 64
	spinMax     = 1 << 14
	spinDefault = 1 << 10
	// gosched every this many polls so a spinner never starves the peer's
	// goroutine when they share a P.
	spinYieldEvery = 256
)

// Spin controls how a waiter spins before it sleeps on the futex.
type Spin int

const (
	// SpinAdaptive adapts the budget between 64 and 16384 polls.
	SpinAdaptive Spin = 0
	// SpinNever sleeps on the futex at once (lowest CPU, one wake-up per message
	// when the peer is idle).
	SpinNever Spin = -1
	// SpinForever never sleeps (lowest latency, burns a CPU while idle; for
	// benchmarks and dedicated cores).
	SpinForever Spin = -2
)

type spinner struct {
	mode   Spin
	budget int
}

func (s *spinner) limit() int {
	switch {
	case s.mode == SpinNever:
		return 0
	case s.mode == SpinForever:
		return -1
	case s.mode > 0:
		return int(s.mode)
	}
	if s.budget == 0 {
		s.budget = spinDefault
	}
	return s.budget
}

func (s *spinner) found() {
	if s.mode == SpinAdaptive {
		s.budget = min(s.budget*2, spinMax)
	}
}

func (s *spinner) slept() {
	if s.mode == SpinAdaptive {
		s.budget = max(s.budget/2, spinMin)
	}
}

// await waits until cond returns true (or an error), spinning then sleeping on
// seq. cond must also check r.closed.
func await(sp *spinner, seq, waiters *uint32, cond func() (bool, error)) error {
	lim := sp.limit()
	for i := 0; lim < 0 || i < lim; i++ {
		if ok, err := cond(); ok || err != nil {
			if i > 0 {
				sp.found()
			}
			return err
		}
		if i%spinYieldEvery == spinYieldEvery-1 {
			runtime.Gosched()
		}
	}
	sp.slept()
	atomic.AddUint32(waiters, 1)
	defer atomic.AddUint32(waiters, ^uint32(0))
	for {
		v := atomic.LoadUint32(seq)
		if ok, err := cond(); ok || err != nil {
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
