package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Extra regions (see the package documentation): a client hands the peer
// further sealed memfds on the session socket, and descriptors then point into
// them (Descriptor.Region) instead of into a slot of the ring's arena. vig uses
// it in front of a ring runtime: the frame a sensor wrote into its own sealed
// memfd goes to the runtime by reference, not copied into vig's region.

// Region message: 64 bytes on the session socket, client to server.
const (
	regionMsgMagic = 0x4e47455258474956 // "VIGXREGN" little-endian
	regionMsgSize  = 64
	regionOpAdd    = 1 // one fd in SCM_RIGHTS
	regionOpDrop   = 2
)

// MaxRegionGen bounds a registration's generation (24 bits: it shares the
// descriptor's payload slot field with the id).
const MaxRegionGen = 1<<24 - 1

func encodeRegionMsg(op, id, gen uint32, size uint64) []byte {
	b := make([]byte, regionMsgSize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], regionMsgMagic)
	le.PutUint32(b[8:], op)
	le.PutUint32(b[12:], id)
	le.PutUint64(b[16:], size)
	le.PutUint32(b[24:], gen)
	return b
}

// decodeRegionMsg validates an untrusted region message.
func decodeRegionMsg(b []byte) (op, id, gen uint32, size uint64, err error) {
	le := binary.LittleEndian
	if len(b) != regionMsgSize || le.Uint64(b) != regionMsgMagic {
		return 0, 0, 0, 0, fmt.Errorf("a %d-byte message on the session socket is not a region message", len(b))
	}
	op, id, size, gen = le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint64(b[16:]), le.Uint32(b[24:])
	for _, c := range b[28:] {
		if c != 0 {
			return 0, 0, 0, 0, errors.New("region message: reserved bytes not zero")
		}
	}
	switch {
	case op != regionOpAdd && op != regionOpDrop:
		return 0, 0, 0, 0, fmt.Errorf("region message: op %d (1 add, 2 drop)", op)
	case id == 0 || id > MaxExtraRegions:
		return 0, 0, 0, 0, fmt.Errorf("region message: id %d outside 1..%d", id, MaxExtraRegions)
	case gen > MaxRegionGen:
		return 0, 0, 0, 0, fmt.Errorf("region message: generation %d above %d", gen, MaxRegionGen)
	case op == regionOpAdd && (size == 0 || size > maxExtraSize):
		return 0, 0, 0, 0, fmt.Errorf("region message: size %d outside 1..%d", size, uint64(maxExtraSize))
	case op == regionOpDrop && size != 0:
		return 0, 0, 0, 0, errors.New("region message: drop with a size")
	}
	return op, id, gen, size, nil
}

// maxExtraSize bounds one extra region's mapping (a whole client region at
// most: MaxSlots slots of MaxSlotSize would not fit an address space).
const maxExtraSize = 1 << 36

// extraRegion is one extra region mapped read-only by the server side.
type extraRegion struct {
	mem []byte
	gen uint32 // the registration's generation (the add's)
	err error  // refused: why (mem is nil)
	// refs: 1 while registered, plus 1 per request holding a view; the last
	// release unmaps it.
	refs atomic.Int64
}

func (x *extraRegion) release() {
	if x.refs.Add(-1) == 0 && x.mem != nil {
		unmapExtra(x.mem)
	}
}

// extraRegions is a server session's table, filled by the socket watcher.
type extraRegions struct {
	mu      sync.Mutex
	m       map[uint32]*extraRegion
	changed chan struct{} // closed and replaced on every change
	closed  bool
	waits   atomic.Uint64 // descriptors that waited for their registration
}

func (t *extraRegions) init() { t.m, t.changed = map[uint32]*extraRegion{}, make(chan struct{}) }

// handle applies one message from the client; an error is a protocol
// violation that ends the session. A region that cannot be used is kept as
// refused, so that descriptors naming it are answered with the reason.
func (t *extraRegions) handle(b []byte, fds []int) error {
	op, id, gen, size, err := decodeRegionMsg(b)
	if err == nil && (op == regionOpAdd) != (len(fds) == 1) {
		err = fmt.Errorf("region message op %d with %d file descriptors", op, len(fds))
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.m[id]
	switch {
	case t.closed:
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil
	case op == regionOpDrop:
		if old == nil {
			return fmt.Errorf("region message: drop of extra region %d, which is not registered", id)
		}
		if old.gen != gen {
			return fmt.Errorf("region message: drop of extra region %d generation %d, registered as generation %d", id, gen, old.gen)
		}
		delete(t.m, id)
		old.release()
	case old != nil:
		unix.Close(fds[0])
		return fmt.Errorf("region message: extra region %d is registered already (drop it first)", id)
	default:
		mem, err := mapExtra(fds[0], size)
		unix.Close(fds[0]) // the mapping stays valid without it
		x := &extraRegion{mem: mem, gen: gen, err: err}
		x.refs.Store(1)
		t.m[id] = x
	}
	close(t.changed)
	t.changed = make(chan struct{})
	return nil
}

// get returns registration gen of extra region id with a reference, waiting
// for the watcher to have read it: a client sends it before it posts a
// descriptor naming it, so it is already in the socket, perhaps behind the
// drop of the id's previous registration (the socket and the ring are two
// channels: the generation is how the server tells the two apart). A
// generation older than the registered one is refused: the client dropped a
// region before every descriptor naming it was answered. done ends the wait.
func (t *extraRegions) get(id, gen uint32, done <-chan struct{}) (*extraRegion, error) {
	for {
		t.mu.Lock()
		x, ch := t.m[id], t.changed
		var stale uint32
		if x != nil && x.gen != gen {
			if (x.gen-gen)&MaxRegionGen < 1<<23 { // generations count up, modulo 2^24
				stale = x.gen
			}
			x = nil // else a later registration: its drop and add are on their way
		}
		if x != nil && x.err == nil {
			x.refs.Add(1)
		}
		closed := t.closed
		t.mu.Unlock()
		switch {
		case stale != 0:
			return nil, badDesc("extra region %d generation %d was dropped (generation %d is registered): drop a region only once every request naming it is answered", id, gen, stale)
		case x != nil && x.err != nil:
			return nil, badDesc("extra region %d was refused: %v", id, x.err)
		case x != nil:
			return x, nil
		case closed:
			return nil, ErrClosed
		}
		t.waits.Add(1)
		select {
		case <-ch:
		case <-done:
			return nil, ErrClosed
		}
	}
}

// close drops every registration (views still held keep their mapping).
func (t *extraRegions) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	for id, x := range t.m {
		delete(t.m, id)
		x.release()
	}
	close(t.changed)
}

// AddRegion hands the peer fd, a sealed memfd (F_SEAL_SHRINK|F_SEAL_GROW|
// F_SEAL_SEAL), as extra region id (1..MaxExtraRegions) of size bytes from
// offset 0, and returns the registration's generation: descriptors with
// Region id and RegionGen gen then point into it. The peer maps its own copy
// of the descriptor; fd stays the caller's. Send it before posting a
// descriptor that names id; the peer answers nothing (a region it cannot use
// fails the descriptors that name it, with the reason). Not concurrently with
// AddRegion or DropRegion of the same id.
func (s *Session) AddRegion(id uint32, fd int, size uint64) (gen uint32, err error) {
	if id == 0 || id > MaxExtraRegions {
		return 0, fmt.Errorf("shmring: extra region id %d outside 1..%d", id, MaxExtraRegions)
	}
	gen = s.xgen.Add(1) & MaxRegionGen
	b := encodeRegionMsg(regionOpAdd, id, gen, size)
	if _, _, _, _, err := decodeRegionMsg(b); err != nil {
		return 0, err
	}
	if _, _, err := s.ep.conn.WriteMsgUnix(b, unix.UnixRights(fd), nil); err != nil {
		return 0, wrapOp("extra region to", "the peer", err)
	}
	s.xgens[id].Store(gen)
	return gen, nil
}

// DropRegion ends extra region id's registration once no descriptor naming it
// is unanswered: the peer unmaps it when its last view is released.
func (s *Session) DropRegion(id uint32) error {
	if id == 0 || id > MaxExtraRegions {
		return fmt.Errorf("shmring: extra region id %d outside 1..%d", id, MaxExtraRegions)
	}
	b := encodeRegionMsg(regionOpDrop, id, s.xgens[id].Load(), 0)
	if _, err := s.ep.conn.Write(b); err != nil {
		return wrapOp("extra region drop to", "the peer", err)
	}
	return nil
}
