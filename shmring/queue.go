package shmring

import (
	"fmt"
	"sync/atomic"
)

// Sender is the producer end of one ring. Its methods are not safe for
// concurrent use; the owner serializes them.
//
// The Sender keeps the authoritative head privately and only ever stores it to
// shared memory: a peer scribbling the shared head cannot make it overwrite a
// descriptor the consumer has not read.
type Sender struct {
	ring
	head   uint64
	next   uint32 // where the next free-slot scan starts
	loaned bitset // slots loaned out locally and not yet posted
	sp     spinner
	// The conditions Loan and Post wait for, made once: a wait hands its
	// condition to the doorbell, so a closure made per call would escape
	// and allocate.
	loanFn, spaceFn func() (bool, error)
	loanSlot        uint32
	loanBuf         []byte
	// freeSp and freeFn are AwaitFree's, apart from the others: it runs
	// without the caller's lock.
	freeSp spinner
	freeFn func() (bool, error)
}

func newSender(r *Region, idx int, closed *atomic.Bool, ready, space *bell) *Sender {
	s := &Sender{ring: newRing(r, idx, closed, ready, space)}
	s.spaceFn = s.space
	s.freeFn = s.anyFree
	s.loanFn = func() (bool, error) {
		var e error
		s.loanSlot, s.loanBuf, e = s.TryLoan()
		if e == ErrFull {
			return false, nil
		}
		return true, e
	}
	return s
}

// SetSpin sets how the Sender spins before sleeping when the ring is full.
func (s *Sender) SetSpin(m Spin) { s.sp = spinner{mode: m} }

// SlotSize is the capacity of one payload slot.
func (s *Sender) SlotSize() int { return int(s.lay.SlotSize) }

// TryLoan loans a free payload slot without waiting: the slot's bytes are the
// caller's to fill until it is posted or given back with Unloan.
func (s *Sender) TryLoan() (uint32, []byte, error) {
	if s.closed.Load() {
		return NoSlot, nil, ErrClosed
	}
	n := s.lay.Slots
	for k := range n {
		i := s.next + k
		if i >= n {
			i -= n
		}
		// A slot is free only if the consumer returned it (shared state) and we
		// do not hold it (private state): a peer that marks a loaned slot free
		// cannot make us loan it twice.
		if s.loaned.has(i) || atomic.LoadUint32(&s.states[i]) != slotFree {
			continue
		}
		atomic.StoreUint32(&s.states[i], slotInUse)
		s.loaned.set(i)
		s.next = i + 1
		if s.next == n {
			s.next = 0
		}
		return i, s.slot(i), nil
	}
	return NoSlot, nil, ErrFull
}

// Loan waits for a free payload slot.
func (s *Sender) Loan() (slot uint32, buf []byte, err error) {
	err = await(&s.sp, s.spaceBell, s.spaceWaiters, s.loanFn)
	slot, buf = s.loanSlot, s.loanBuf
	s.loanBuf = nil
	return slot, buf, err
}

// AwaitFree waits until a payload slot is free, loaning none: a caller that
// serializes the Sender under a lock of its own can wait here without it, and
// then TryLoan under it. It may run beside the other methods, but like Loan and
// Post it waits on the ring's space doorbell, which only one goroutine may
// wait on at a time.
func (s *Sender) AwaitFree() error {
	return await(&s.freeSp, s.spaceBell, s.spaceWaiters, s.freeFn)
}

// anyFree reports whether TryLoan would find a slot now. It reads only what
// is atomic, so it may run beside TryLoan.
func (s *Sender) anyFree() (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	for i := range s.lay.Slots {
		if !s.loaned.has(i) && atomic.LoadUint32(&s.states[i]) == slotFree {
			return true, nil
		}
	}
	return false, nil
}

// Unloan gives back a loaned slot that will not be posted.
func (s *Sender) Unloan(slot uint32) {
	if slot < s.lay.Slots && s.loaned.clear(slot) {
		atomic.StoreUint32(&s.states[slot], slotFree)
	}
}

// space reports whether a descriptor can be posted, and ErrCorrupt when the
// consumer's counter is impossible.
func (s *Sender) space() (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	t := atomic.LoadUint64(s.tail)
	if t > s.head || s.head-t > uint64(s.lay.Descriptors) {
		return false, fmt.Errorf("%w: consumer counter %d with producer at %d (ring of %d)", ErrCorrupt, t, s.head, s.lay.Descriptors)
	}
	return s.head-t < uint64(s.lay.Descriptors), nil
}

// TryPost posts d without waiting. A payload slot named by d must have been
// loaned from this Sender; its ownership passes to the consumer.
func (s *Sender) TryPost(d *Descriptor) error {
	if err := s.check(d); err != nil {
		return err
	}
	ok, err := s.space()
	if err != nil {
		return err
	}
	if !ok {
		return ErrFull
	}
	s.post(d)
	return nil
}

// Post waits for room in the ring and posts d.
func (s *Sender) Post(d *Descriptor) error {
	if err := s.check(d); err != nil {
		return err
	}
	if err := await(&s.sp, s.spaceBell, s.spaceWaiters, s.spaceFn); err != nil {
		return err
	}
	s.post(d)
	return nil
}

func (s *Sender) check(d *Descriptor) error {
	if err := d.CheckEncodable(); err != nil {
		return err
	}
	if err := d.CheckPayload(s.lay); err != nil {
		return err
	}
	if d.Slot != NoSlot && !s.loaned.has(d.Slot) {
		return fmt.Errorf("%w: payload slot %d is not loaned", ErrBadDescriptor, d.Slot)
	}
	return nil
}

func (s *Sender) post(d *Descriptor) {
	d.encode(s.descAt(s.head))
	if d.Slot != NoSlot {
		s.loaned.clear(d.Slot)
	}
	s.head++
	atomic.StoreUint64(s.ring.head, s.head) // publishes the descriptor
	wake(s.readyBell, s.readyWaiters)
}

// Receiver is the consumer end of one ring. Next must not be called
// concurrently with itself; Release may be called from any goroutine.
//
// The Receiver keeps the authoritative tail privately; the shared head is
// loaded once per message and checked against it.
type Receiver struct {
	ring
	tail uint64
	held bitset // payload slots received and not yet released
	sp   spinner
	in   interner
	buf  [DescriptorSize]byte
	// nextFn is Next's condition, made once (see Sender.loanFn); nextD is
	// the descriptor it receives into, set for the wait.
	nextFn func() (bool, error)
	nextD  *Descriptor
}

func newReceiver(r *Region, idx int, closed *atomic.Bool, ready, space *bell) *Receiver {
	rc := &Receiver{ring: newRing(r, idx, closed, ready, space), in: make(interner)}
	rc.nextFn = func() (bool, error) { return rc.TryNext(rc.nextD) }
	return rc
}

// SetSpin sets how the Receiver spins before sleeping on an empty ring.
func (r *Receiver) SetSpin(m Spin) { r.sp = spinner{mode: m} }

// TryNext receives one descriptor into d without waiting. It reports false
// when the ring is empty. An error wrapping ErrBadDescriptor means this one
// message was malformed: d.Tag is still set so it can be answered, and the ring
// goes on. ErrCorrupt and ErrClosed end the session.
func (r *Receiver) TryNext(d *Descriptor) (bool, error) {
	if r.closed.Load() {
		return false, ErrClosed
	}
	h := atomic.LoadUint64(r.head) // acquire: the descriptor below is complete
	if h == r.tail {
		return false, nil
	}
	if h-r.tail > uint64(r.lay.Descriptors) { // also catches h < tail
		return false, fmt.Errorf("%w: producer counter %d with consumer at %d (ring of %d)", ErrCorrupt, h, r.tail, r.lay.Descriptors)
	}
	// Copy out before decoding: the peer may rewrite the shared bytes at any
	// time, and the checks must hold for the values used.
	copy(r.buf[:], r.descAt(r.tail))
	r.tail++
	atomic.StoreUint64(r.ring.tail, r.tail)
	wake(r.spaceBell, r.spaceWaiters)
	err := d.decode(r.buf[:], r.in)
	if err == nil {
		err = d.CheckPayload(r.lay)
	}
	if err == nil && d.Slot != NoSlot && r.held.set(d.Slot) {
		// Two live messages naming one slot: fail the second, keep the first.
		err = fmt.Errorf("%w: payload slot %d is already held", ErrBadDescriptor, d.Slot)
		d.Slot, d.PayloadOff, d.PayloadLen, d.NumTensors = NoSlot, 0, 0, 0
	}
	if err != nil && d.Slot != NoSlot {
		if d.Slot < r.lay.Slots && !r.held.has(d.Slot) {
			r.returnSlot(d.Slot) // give the slot of a rejected message back
		}
		d.Slot, d.PayloadOff, d.PayloadLen, d.NumTensors = NoSlot, 0, 0, 0
	}
	return true, err
}

// Next waits for a descriptor; see TryNext for the errors.
func (r *Receiver) Next(d *Descriptor) error {
	r.nextD = d
	err := await(&r.sp, r.readyBell, r.readyWaiters, r.nextFn)
	r.nextD = nil
	return err
}

// Payload is the in-place view of d's payload. It stays valid until d's slot
// is released.
func (r *Receiver) Payload(d *Descriptor) []byte {
	if d.Slot == NoSlot {
		return nil
	}
	s := r.slot(d.Slot)
	return s[d.PayloadOff : d.PayloadOff+d.PayloadLen : d.PayloadOff+d.PayloadLen]
}

// Release returns a received payload slot to the producer. Releasing a slot
// that is not held is a no-op, so a double release cannot free a slot the
// producer has loaned again.
func (r *Receiver) Release(slot uint32) {
	if slot < r.lay.Slots && r.held.clear(slot) {
		r.returnSlot(slot)
	}
}

func (r *Receiver) returnSlot(slot uint32) {
	atomic.StoreUint32(&r.states[slot], slotFree)
	wake(r.spaceBell, r.spaceWaiters)
}

// Held is the number of payload slots received and not released.
func (r *Receiver) Held() int { return r.held.count() }
