// Package ringback is the gateway's backend for a runtime reachable only through a
// shared-memory ring: an on-device runtime without gRPC. Here vig is the ring's
// client: it creates the region, hands it to the runtime over the ring's Unix socket
// (package shmring), and posts each call's tensors on the request ring; the runtime
// reads them in place and posts the result on the response ring.
//
// Backend implements gateway.Backend, so the gateway and its scheduler work
// unchanged in front of it:
//
//	b, err := ringback.New("@npu-runtime", ringback.Options{})
//	gw, err := gateway.New(gateway.Options{..., Backend: b}) // the gateway calls b.Open
//
// # Mapping a call onto a ring descriptor
//
// Everything comes from the call's parsed header (gateway.Call.Header: names,
// datatypes, shapes, and where each raw_input_contents entry lies in the message);
// the message itself is not scanned again. The raw_input_contents are copied back to
// back into one loaned payload slot — the one copy on this path — and described by
// one tensor record each (name, datatype, shape). The descriptor's model is
// model_name. Its stream and frame come from the request id when it has the form
// "stream#frame" (the convention of vig's ring frontend, benchmark driver and mock
// backend); otherwise the stream is vig's (vig_stream, else the model) and the frame
// a counter of such requests kept by the Backend. Capture time is vig_capture_ns, or
// 0 when the request has none. The ring carries no model version or parameters:
// Triton's priority and timeout act in vig's scheduler, not in the runtime.
//
// What the ring cannot carry is refused before anything is posted: tensors given
// as `contents` or in a shared-memory region (UNIMPLEMENTED: send
// raw_input_contents), more than shmring.MaxTensors inputs, names or shapes beyond
// the descriptor's fields (INVALID_ARGUMENT), and a request larger than a request
// slot (RESOURCE_EXHAUSTED, naming the slot size and Options.ConfigKey).
//
// # The answer
//
// A response descriptor with status OK becomes a ModelInferResponse with the
// request's model_name, model_version and id and one output per tensor record of
// the response (name, datatype, shape, and its bytes of the payload in
// raw_output_contents); a payload without tensor records is one output OUTPUT0,
// UINT8, shape [length]. When the request names outputs, only those are returned,
// in the order of the response, and naming one the runtime did not produce is
// INVALID_ARGUMENT. Any other status is the gRPC status of the same number with
// the descriptor's message.
//
// # Sessions
//
// One ring session carries all calls. Start posts a call on the goroutine that
// started it when the session has room (no hand-off); otherwise the call waits in
// a FIFO that one poster goroutine drains as room frees. Room is what the session
// can answer without dropping anything: the smaller of the request ring's slots and
// descriptors and the response ring's slots and descriptors. A single reader
// goroutine takes the results, which may come in any order, and finishes each call
// (gateway.Call.Finish) on that goroutine. Abort takes a call that still waits out
// of the FIFO (CANCELLED); a posted call runs to its result, unless vig gave up on
// it (gateway.Call.Expired: the runtime did not answer by its deadline): then it
// is finished at once and its tag kept as a tombstone, which holds its unit of
// room until the runtime answers (the answer is then dropped), since the runtime
// still owns its request slot and will post an answer.
//
// The Backend connects in the background once the gateway Opens it, and reconnects
// with exponential backoff (no busy loop) when the session ends or cannot be
// established. Meanwhile every call fails at once with UNAVAILABLE; calls in flight
// when the session ends fail UNAVAILABLE too. The Open callback is told every
// transition: it is the one place the backend's state is reported.
package ringback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
)

// Options configures a Backend.
type Options struct {
	// Config sizes the ring region vig creates for each session; the zero value is
	// shmring.DefaultConfig. Request slots must hold the largest request's tensors
	// together; response slots the largest answer.
	Config shmring.Config
	// Region picks memfd (default where available) or a /dev/shm file.
	Region shmring.Backend
	// Spin is how the result reader spins before sleeping on its doorbell.
	Spin shmring.Spin
	// Timeout bounds each handshake (2 s by default).
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between connection attempts
	// (100 ms and 5 s by default); it doubles after each failure.
	MinBackoff, MaxBackoff time.Duration
	// ConfigKey names the setting that sizes the ring in the user's configuration,
	// for error messages (e.g. "backend.ring.slot_kib"); empty names Options.Config.
	ConfigKey string
	Logger    *slog.Logger
	// NoSharedFrames copies every frame into vig's region, also those a
	// frontend offers by reference (gateway.Call.Shared), e.g. for a runtime
	// without the extra-region extension.
	NoSharedFrames bool
}

// Backend sends inference calls over a ring session to a runtime. Its methods are
// safe for concurrent use.
type Backend struct {
	addr string
	opts Options
	log  *slog.Logger

	cur     atomic.Pointer[session]
	frames  atomic.Uint64 // frame numbers for requests whose id names none
	stray   atomic.Uint64 // answers to tags vig did not post
	copied  atomic.Uint64 // input bytes copied into request slots
	opened  sync.Once
	closing chan struct{}
	stopped chan struct{}
	closeMu sync.Once
	onState func(up bool)

	reported int8 // last state given to onState: 0 none yet, 1 up, -1 down (run's)

	mu      sync.Mutex
	lastErr error         // why no session is up
	upCh    chan struct{} // closed while a session is up; replaced when it ends
}

// New checks the options and returns a Backend that connects once Opened (the
// gateway opens its backend when it is built). It fails only for options that
// cannot work and on machines without shared memory for rings.
func New(addr string, opts Options) (*Backend, error) {
	if addr == "" {
		return nil, errors.New("ringback: no address")
	}
	if _, err := shmring.Probe(); err != nil {
		return nil, fmt.Errorf("ringback: no shared memory for a ring on this machine: %w", err)
	}
	if opts.Config == (shmring.Config{}) {
		opts.Config = shmring.DefaultConfig
	}
	if _, err := shmring.ComputeLayout(opts.Config); err != nil {
		return nil, fmt.Errorf("ringback: ring sizes: %w", err)
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(5*time.Second, opts.MinBackoff)
	}
	if opts.ConfigKey == "" {
		opts.ConfigKey = "Options.Config.Requests.SlotSize"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Backend{addr: addr, opts: opts, log: opts.Logger.With("backend", "ring:"+addr),
		closing: make(chan struct{}), stopped: make(chan struct{}), upCh: make(chan struct{}),
		lastErr: errors.New("not connected yet")}, nil
}

// Open implements gateway.Backend: it starts connecting (once) and reports every
// change of the session's state to state (from one goroutine, in order).
func (b *Backend) Open(state func(up bool)) {
	b.opened.Do(func() {
		b.onState = state
		go b.run()
	})
}

// Addr is the runtime's ring address.
func (b *Backend) Addr() string { return b.addr }

// Up reports whether a session is established.
func (b *Backend) Up() bool { return b.cur.Load() != nil }

// WaitUp waits until a session is established or ctx ends.
func (b *Backend) WaitUp(ctx context.Context) error {
	for {
		b.mu.Lock()
		ch := b.upCh
		b.mu.Unlock()
		if b.Up() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.stopped:
			return errors.New("ringback: closed")
		}
	}
}

// Close implements gateway.Backend: it ends the session and stops reconnecting;
// calls in flight fail UNAVAILABLE.
func (b *Backend) Close() error {
	b.closeMu.Do(func() { close(b.closing) })
	if s := b.cur.Load(); s != nil {
		s.s.Close()
	}
	b.opened.Do(func() { close(b.stopped) }) // never opened: nothing runs
	<-b.stopped
	return nil
}

// run connects, reads results until the session ends, and reconnects. It is the
// session's only reader.
func (b *Backend) run() {
	defer close(b.stopped)
	backoff := b.opts.MinBackoff
	failures := 0
	var lastLog time.Time
	for {
		ss, err := shmring.Dial(b.addr, shmring.DialOptions{Config: b.opts.Config, Backend: b.opts.Region,
			Spin: b.opts.Spin, Timeout: b.opts.Timeout, Logger: b.opts.Logger})
		if err == nil {
			s := newSession(b, ss)
			go s.poster()
			b.mu.Lock()
			b.cur.Store(s)
			close(b.upCh)
			b.mu.Unlock()
			// Close closes the channel, then looks at cur; we store cur, then
			// look at the channel: one of the two sees the other.
			select {
			case <-b.closing:
				ss.Close()
				s.read() // returns at once, failing any call that found the session meanwhile
				b.cur.Store(nil)
				return
			default:
			}
			b.log.Info("ring backend connected", "pid", ss.Peer().PID, "uid", ss.Peer().UID,
				"in_flight", s.room, "request_slot_bytes", s.slotSize)
			b.state(true)
			failures = 0
			start := time.Now()
			err = s.read()
			b.mu.Lock()
			b.cur.Store(nil)
			b.upCh = make(chan struct{})
			b.lastErr = err
			b.mu.Unlock()
			b.state(false)
			select {
			case <-b.closing:
				return
			default:
			}
			b.log.Warn("ring backend session ended; reconnecting", "err", err)
			if time.Since(start) > b.opts.MaxBackoff {
				backoff = b.opts.MinBackoff // it was up a while: try again soon
			}
		} else {
			b.mu.Lock()
			b.lastErr = err
			b.mu.Unlock()
			failures++
			// One line on the first failure, then one per half minute with the
			// number of attempts: a runtime that is down for long does not flood
			// the log.
			if failures == 1 || time.Since(lastLog) > 30*time.Second {
				b.log.Warn("ring backend unreachable; retrying with backoff", "err", err, "attempts", failures, "next_ms", backoff.Milliseconds())
				lastLog = time.Now()
			}
			b.state(false)
		}
		// Jitter keeps several vigs from retrying in lockstep.
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-b.closing:
			t.Stop()
			return
		}
		backoff = min(2*backoff, b.opts.MaxBackoff)
	}
}

// state reports a transition to the Open callback; only run calls it.
func (b *Backend) state(up bool) {
	v := int8(-1)
	if up {
		v = 1
	}
	if v == b.reported {
		return
	}
	b.reported = v
	if b.onState != nil {
		b.onState(up)
	}
}

func (b *Backend) downError() error {
	b.mu.Lock()
	err := b.lastErr
	b.mu.Unlock()
	return status.Errorf(codes.Unavailable, "backend ring %s is down (%v); vig reconnects with backoff", b.addr, err)
}

// finisher is how a call is answered: *gateway.Call in production.
type finisher interface {
	Finish(resp mem.BufferSlice, err error)
}

// CopiedBytes is how many input bytes vig has copied into its request slots:
// frames offered by reference (a sealed memfd, gateway.Call.Shared) are not.
func (b *Backend) CopiedBytes() uint64 { return b.copied.Load() }

// job is one call on its way through the ring.
type job struct {
	f   finisher
	h   *wire.InferHeader
	msg mem.BufferSlice
	// shared: the frame lies in a client's sealed memfd (gateway.Call.Shared);
	// call builds msg should the ring take a copy after all.
	shared *gateway.SharedFrame
	call   *gateway.Call
	byRef  bool // posted naming shared's extra region (holds its count)
}

// Start implements gateway.Backend. The call is checked against what a ring can
// carry, then posted at once when the session has room, else queued for the
// poster; it is finished exactly once, possibly before Start returns.
func (b *Backend) Start(c *gateway.Call) {
	if c.Shared != nil && !b.opts.NoSharedFrames && len(c.Shared.Inputs) == len(c.Header.Inputs) {
		b.start(job{f: c, h: &c.Header, shared: c.Shared, call: c})
		return
	}
	msg, err := c.Message()
	if err != nil {
		c.Finish(nil, err)
		return
	}
	b.start(job{f: c, h: &c.Header, msg: msg})
}

// Abort implements gateway.Backend: a call still waiting for room is finished
// CANCELLED; a posted call runs to its result unless it expired (then it is
// finished now and its room stays held until the runtime answers).
func (b *Backend) Abort(c *gateway.Call) {
	if s := b.cur.Load(); s != nil {
		s.abort(c)
	}
}

func (b *Backend) start(j job) {
	s := b.cur.Load()
	if s == nil {
		j.f.Finish(nil, b.downError())
		return
	}
	if err := s.check(j.h, j.shared != nil); err != nil {
		j.f.Finish(nil, err)
		return
	}
	s.start(j)
}

// session is one established ring session.
type session struct {
	b        *Backend
	s        *shmring.Session
	slotSize int
	room     int           // calls the session can have in flight
	kick     chan struct{} // wakes the poster (capacity 1)
	dead     chan struct{} // closed when the session has ended

	sendMu  sync.Mutex // the request ring's producer end, and what follows
	nextTag uint64
	d       shmring.Descriptor
	names   map[string]string // interned tensor names and datatypes

	mu       sync.Mutex
	inflight int            // calls posted and not yet answered
	waitq    []job          // calls waiting for room, in order
	pending  map[uint64]job // posted calls by tag
	ended    bool
	endErr   error

	// Extra regions (the clients' sealed memfds the runtime maps): guarded by
	// mu; added and dropped on the socket under sendMu, so that an add goes
	// out before the first descriptor naming it and a drop before its id is
	// reused.
	regions map[gateway.SharedRegion]*sharedRegion
	freeIDs []uint32

	// The reader's scratch (only read and its callees use these).
	rd   shmring.Descriptor
	outs []output
}

func newSession(b *Backend, ss *shmring.Session) *session {
	l := ss.Region().Layout()
	req, resp := l.Rings[shmring.RequestRing], l.Rings[shmring.ResponseRing]
	// The runtime answers without waiting (a full response ring drops the
	// answer), so no more may be in flight than it can surely answer.
	n := min(req.Slots, req.Descriptors, resp.Slots, resp.Descriptors)
	s := &session{b: b, s: ss, slotSize: int(req.SlotSize), room: int(n), kick: make(chan struct{}, 1),
		dead: make(chan struct{}), names: map[string]string{}, pending: map[uint64]job{},
		regions: map[gateway.SharedRegion]*sharedRegion{}}
	for id := uint32(1); id <= shmring.MaxExtraRegions; id++ {
		s.freeIDs = append(s.freeIDs, id)
	}
	return s
}

// sharedRegion is a client's memfd registered with the runtime.
type sharedRegion struct {
	id, gen  uint32 // its extra region id and the registration's generation
	inflight int    // posted calls naming it, not yet answered
	ended    bool   // the client's session ended: drop it once inflight is 0
}

// regionFor returns the extra region id and generation of r, adding it on the
// socket the first time (called with sendMu held); false: take the copy path
// (every id in use, or the runtime's socket refused the add).
func (s *session) regionFor(r gateway.SharedRegion) (id, gen uint32, ok bool) {
	s.mu.Lock()
	x := s.regions[r]
	if x == nil {
		if len(s.freeIDs) == 0 {
			s.mu.Unlock()
			return 0, 0, false
		}
		// The least recently dropped id. The runtime reads region messages on
		// its socket and descriptors on the ring, two channels: a descriptor
		// naming an id added again right after its drop may be read before
		// the drop. Its generation makes the runtime wait for the new
		// registration; the order keeps that wait rare.
		x = &sharedRegion{id: s.freeIDs[0]}
		s.freeIDs = s.freeIDs[1:]
		var err error
		if x.gen, err = s.s.AddRegion(x.id, r.Fd(), r.Size()); err != nil {
			s.freeIDs = append([]uint32{x.id}, s.freeIDs...)
			s.mu.Unlock()
			s.b.log.Warn("ring backend: handing a client's memfd to the runtime; copying its frames", "err", err)
			return 0, 0, false
		}
		s.regions[r] = x
		go s.watchRegion(r)
	}
	x.inflight++
	s.mu.Unlock()
	return x.id, x.gen, true
}

// watchRegion marks r ended when its client leaves.
func (s *session) watchRegion(r gateway.SharedRegion) {
	select {
	case <-r.Done():
	case <-s.dead:
		return
	}
	s.mu.Lock()
	var id uint32
	drop := false
	if x := s.regions[r]; x != nil {
		x.ended = true
		id, drop = s.takeIfIdle(r, x)
	}
	s.mu.Unlock()
	if drop {
		s.sendMu.Lock()
		s.dropRegion(id)
		s.sendMu.Unlock()
	}
}

// regionDone ends one posted call's use of r. It takes sendMu only to drop
// the region (its client has left): an answer is not held up by a poster.
func (s *session) regionDone(r gateway.SharedRegion) {
	s.mu.Lock()
	id, drop := s.unuse(r)
	s.mu.Unlock()
	if drop {
		s.sendMu.Lock()
		s.dropRegion(id)
		s.sendMu.Unlock()
	}
}

// unuse ends one call's use of r (mu held) and reports the id to drop when
// that was the last use of an ended region, which it takes out of the table.
func (s *session) unuse(r gateway.SharedRegion) (uint32, bool) {
	x := s.regions[r]
	if x == nil {
		return 0, false
	}
	x.inflight--
	return s.takeIfIdle(r, x)
}

func (s *session) takeIfIdle(r gateway.SharedRegion, x *sharedRegion) (uint32, bool) {
	if !x.ended || x.inflight > 0 {
		return 0, false
	}
	delete(s.regions, r)
	return x.id, true
}

// dropRegion tells the runtime to drop id (sendMu held, mu not); the id is
// reused only once the drop is on the socket, ahead of any add naming it, and
// after every other free id (regionFor).
func (s *session) dropRegion(id uint32) {
	if err := s.s.DropRegion(id); err != nil {
		return // the session is ending: the runtime forgets it with the session
	}
	s.mu.Lock()
	s.freeIDs = append(s.freeIDs, id)
	s.mu.Unlock()
}

// start posts j now if there is room and nobody waits before it, else queues it.
func (s *session) start(j job) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		j.f.Finish(nil, s.b.downError())
		return
	}
	if len(s.waitq) > 0 || s.inflight == s.room {
		if expired(j) { // Abort may have looked before it was queued
			s.mu.Unlock()
			j.f.Finish(nil, errGaveUp)
			return
		}
		s.waitq = append(s.waitq, j)
		s.mu.Unlock()
		s.wake()
		return
	}
	s.inflight++
	s.mu.Unlock()
	s.post(j, false)
}

func (s *session) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// poster posts queued calls as room frees, waiting for a payload slot when the
// runtime has not returned one yet (outside sendMu: Start goes on meanwhile,
// queueing a call that finds no slot behind it). It ends with the session.
func (s *session) poster() {
	for {
		select {
		case <-s.kick:
		case <-s.dead:
			return
		}
		for {
			s.mu.Lock()
			if s.ended || len(s.waitq) == 0 || s.inflight == s.room {
				s.mu.Unlock()
				break
			}
			j := s.waitq[0]
			s.waitq[0] = job{}
			s.waitq = s.waitq[1:]
			s.inflight++
			s.mu.Unlock()
			s.post(j, true)
		}
	}
}

// abort finishes a call that still waits for room, or one that expired.
//
// The call is finished on a goroutine of its own, not the caller's: the
// canceller may hold a lock that its Replier takes (a rare path: the call never
// reached the ring, or the runtime is wedged).
func (s *session) abort(c *gateway.Call) {
	s.mu.Lock()
	for i, j := range s.waitq {
		if j.f == finisher(c) {
			s.waitq = append(s.waitq[:i], s.waitq[i+1:]...)
			s.mu.Unlock()
			err := status.Error(codes.Canceled, "the client left before the call was sent to the ring backend")
			if c.Expired() {
				err = errGaveUp
			}
			go c.Finish(nil, err)
			return
		}
	}
	if c.Expired() {
		for tag, j := range s.pending {
			if j.f == finisher(c) {
				s.pending[tag] = job{shared: j.shared, byRef: j.byRef} // a tombstone: the room (and the client's memfd) stays held until the runtime answers
				s.mu.Unlock()
				go c.Finish(nil, errGaveUp)
				return
			}
		}
	}
	s.mu.Unlock()
}

// errGaveUp finishes a call vig gave up on (the gateway answers its client
// DEADLINE_EXCEEDED).
var errGaveUp = status.Error(codes.Canceled, "vig gave up on the call: the ring runtime did not answer in time")

// expired reports whether vig gave up on j's call; Abort may have looked for it
// while it was between the queue and the pending table, so whoever puts it in
// either checks this under s.mu.
func expired(j job) bool {
	e, ok := j.f.(interface{ Expired() bool })
	return ok && e.Expired()
}

// giveBack returns a unit of room and wakes the poster if someone waits for it.
func (s *session) giveBack() {
	s.mu.Lock()
	s.inflight--
	waiting := len(s.waitq) > 0
	s.mu.Unlock()
	if waiting {
		s.wake()
	}
}

// check refuses what a ring descriptor cannot carry, from the header alone.
func (s *session) check(h *wire.InferHeader, shared bool) error {
	switch {
	case len(h.Model) > shmring.MaxModelLen:
		return status.Errorf(codes.InvalidArgument, "model name of %d bytes: a ring carries at most %d", len(h.Model), shmring.MaxModelLen)
	case len(h.Inputs) > shmring.MaxTensors:
		return status.Errorf(codes.InvalidArgument, "%d input tensors: a ring descriptor carries at most %d", len(h.Inputs), shmring.MaxTensors)
	}
	for i := range h.Inputs {
		t := &h.Inputs[i]
		switch {
		case t.HasContents:
			return status.Errorf(codes.Unimplemented, "input '%s': `contents` cannot go over a ring; send raw_input_contents", t.Name)
		case hasShm(t):
			return status.Errorf(codes.Unimplemented, "input '%s': shared-memory regions cannot go over a ring; send raw_input_contents", t.Name)
		case len(t.Name) > shmring.MaxTensorName:
			return status.Errorf(codes.InvalidArgument, "input '%s': name of %d bytes, a ring carries at most %d", t.Name, len(t.Name), shmring.MaxTensorName)
		case len(t.Datatype) > shmring.MaxDatatypeLen:
			return status.Errorf(codes.InvalidArgument, "input '%s': datatype '%s' longer than a ring's %d bytes", t.Name, t.Datatype, shmring.MaxDatatypeLen)
		case len(t.Shape) > shmring.MaxRank:
			return status.Errorf(codes.InvalidArgument, "input '%s': rank %d above the %d a ring descriptor carries", t.Name, len(t.Shape), shmring.MaxRank)
		}
		for _, d := range t.Shape {
			if d < 0 {
				return status.Errorf(codes.InvalidArgument, "input '%s': negative dimension %d in the shape", t.Name, d)
			}
		}
	}
	for i := range h.Outputs {
		if hasShm(&h.Outputs[i]) {
			return status.Errorf(codes.Unimplemented, "output '%s': shared-memory regions cannot go over a ring", h.Outputs[i].Name)
		}
	}
	if h.RawInputs != len(h.Inputs) || len(h.Raw) != h.RawInputs {
		if h.RawInputs == 0 && len(h.Inputs) > 0 {
			return status.Errorf(codes.Unimplemented,
				"backend ring %s: tensors must be sent in raw_input_contents (the ring carries raw bytes only)", s.b.addr)
		}
		return status.Errorf(codes.InvalidArgument,
			"raw_input_contents field must be used for all inputs, or none: %d inputs, %d raw_input_contents", len(h.Inputs), h.RawInputs)
	}
	if h.RawBytes > s.slotSize && !shared {
		return status.Errorf(codes.ResourceExhausted,
			"request tensors of %d bytes exceed the %d-byte request slots of backend ring %s; raise %s",
			h.RawBytes, s.slotSize, s.b.addr, s.b.opts.ConfigKey)
	}
	if stream, _, ok := parseFrameID(h.ID); ok && len(stream) > shmring.MaxStreamLen || !ok && len(h.Stream) > shmring.MaxStreamLen {
		return status.Errorf(codes.InvalidArgument, "stream of the request longer than a ring's %d bytes", shmring.MaxStreamLen)
	}
	return nil
}

func hasShm(t *wire.Tensor) bool {
	for _, p := range t.Params {
		if string(p.Key) == wire.ParamShmRegion {
			return true
		}
	}
	return false
}

// post copies the call's tensors into a payload slot and posts the descriptor; it
// holds one unit of room, which it gives back when it fails. wait says whether it
// may sleep for a payload slot (the poster); otherwise a call that finds none goes
// to the front of the queue.
func (s *session) post(j job, wait bool) {
	h := j.h
	total := h.RawBytes
	slot, buf := uint32(shmring.NoSlot), []byte(nil)
	var region, gen uint32
	if j.shared != nil {
		s.sendMu.Lock()
		id, g, ok := s.regionFor(j.shared.Region)
		if ok {
			region, gen, j.byRef = id, g, true
			// sendMu stays held: the descriptor goes out below, after the add.
		} else {
			s.sendMu.Unlock()
			msg, err := j.call.Message()
			if err != nil {
				s.giveBack()
				j.f.Finish(nil, err)
				return
			}
			j.msg, j.shared = msg, nil
		}
	}
	if total > 0 && !j.byRef {
		var err error
		for {
			s.sendMu.Lock()
			err = s.s.Guard(func() (err error) { slot, buf, err = s.s.Requests.TryLoan(); return err })
			s.sendMu.Unlock()
			if !wait || !errors.Is(err, shmring.ErrFull) {
				break
			}
			// The poster waits for the runtime to return a slot without
			// sendMu, so that the calls that need none (by reference) or
			// find room meanwhile are not held behind it.
			if err = s.s.Guard(s.s.Requests.AwaitFree); err != nil {
				break
			}
		}
		switch {
		case errors.Is(err, shmring.ErrFull) && !wait:
			// The room is there but the runtime has not returned the slot of
			// an answered call yet: the poster waits for it.
			s.mu.Lock()
			s.inflight--
			if expired(j) {
				s.mu.Unlock()
				s.wake() // the room it held may let a waiting call go
				j.f.Finish(nil, errGaveUp)
				return
			}
			s.waitq = append(s.waitq, job{})
			copy(s.waitq[1:], s.waitq)
			s.waitq[0] = j
			s.mu.Unlock()
			s.wake()
			return
		case err != nil:
			s.giveBack()
			j.f.Finish(nil, status.Errorf(codes.Unavailable, "backend ring %s: %v", s.b.addr, err))
			return
		}
		// The one copy: the runtime reads the slot in place.
		err = s.s.Guard(func() error {
			off := 0
			for _, r := range h.Raw {
				off += r.CopyTo(buf[off:], j.msg)
			}
			s.b.copied.Add(uint64(off))
			return nil
		})
		if err != nil {
			s.unloan(slot)
			s.giveBack()
			j.f.Finish(nil, status.Errorf(codes.Unavailable, "backend ring %s: %v", s.b.addr, err))
			return
		}
	}
	stream, frame, ok := parseFrameID(h.ID)
	if !ok {
		stream, frame = h.Stream, s.b.frames.Add(1)-1
	}
	if !j.byRef {
		s.sendMu.Lock()
	}
	s.nextTag++
	tag := s.nextTag
	d := &s.d
	*d = shmring.Descriptor{Tag: tag, Frame: frame, Slot: slot, Stream: s.intern(stream), Model: s.intern(h.Model),
		NumTensors: len(h.Inputs)}
	if slot != shmring.NoSlot {
		d.PayloadLen = uint64(total)
	}
	if j.byRef {
		d.Region, d.RegionGen, d.PayloadOff, d.PayloadLen = region, gen, j.shared.Off, j.shared.Len
	}
	if h.HasCapture {
		d.CaptureNs = h.Capture
	}
	off := uint64(0)
	for i := range h.Inputs {
		in, t := &h.Inputs[i], &d.Tensors[i]
		t.Name, t.Datatype = s.intern(in.Name), s.intern(in.Datatype)
		t.Rank = copy(t.Dims[:], in.Shape)
		t.Offset, t.Length = off, uint64(h.Raw[i].Len)
		off += t.Length
		if j.byRef {
			t.Offset, t.Length = uint64(j.shared.Inputs[i].Off), uint64(j.shared.Inputs[i].Len)
		}
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		s.unloanLocked(slot)
		s.sendMu.Unlock()
		j.f.Finish(nil, s.b.downError())
		return
	}
	if expired(j) { // not posted: its slot and room come back at once
		var id uint32
		drop := false
		if j.byRef {
			id, drop = s.unuse(j.shared.Region)
		}
		s.mu.Unlock()
		s.unloanLocked(slot)
		if drop {
			s.dropRegion(id)
		}
		s.sendMu.Unlock()
		s.giveBack()
		j.f.Finish(nil, errGaveUp)
		return
	}
	s.pending[tag] = j
	s.mu.Unlock()
	err := s.s.Guard(func() error { return s.s.Requests.TryPost(d) })
	if err != nil {
		s.unloanLocked(slot)
	}
	s.sendMu.Unlock()
	if err == nil {
		return
	}
	s.mu.Lock()
	p, mine := s.pending[tag]
	delete(s.pending, tag)
	s.mu.Unlock()
	if !mine {
		return // the session ended meanwhile and failed the call
	}
	if p.byRef {
		s.regionDone(p.shared.Region)
	}
	s.giveBack()
	if p.f == nil {
		return // vig gave up on it meanwhile, and abort finished it
	}
	if errors.Is(err, shmring.ErrFull) {
		// The room keeps the posted requests below the ring's size: only a
		// runtime that stopped reading its ring gets here.
		err = fmt.Errorf("request ring full (the runtime is not reading it)")
	}
	j.f.Finish(nil, status.Errorf(codes.Unavailable, "backend ring %s: %v", s.b.addr, err))
}

func (s *session) unloan(slot uint32) {
	s.sendMu.Lock()
	s.unloanLocked(slot)
	s.sendMu.Unlock()
}

func (s *session) unloanLocked(slot uint32) {
	if slot != shmring.NoSlot {
		s.s.Guard(func() error { s.s.Requests.Unloan(slot); return nil })
	}
}

// intern returns b as a string, allocating only the first time a name is seen;
// the table is bounded so that clients cannot grow it. Called with sendMu held.
func (s *session) intern(b []byte) string {
	if v, ok := s.names[string(b)]; ok {
		return v
	}
	v := string(b)
	if len(s.names) < 1024 {
		s.names[v] = v
	}
	return v
}

// read takes results off the response ring until the session ends, and then
// fails every call still waiting or in flight.
func (s *session) read() error {
	d := &s.rd
	var err error
	for {
		err = s.s.Guard(func() error { return s.s.Responses.Next(d) })
		if errors.Is(err, shmring.ErrBadDescriptor) {
			// The ring goes on; the malformed answer fails its call (the
			// descriptor's tag is still read).
			s.deliver(d, status.Errorf(codes.Internal, "backend ring %s: malformed answer: %v", s.b.addr, err))
			continue
		}
		if err != nil {
			break
		}
		s.deliver(d, nil)
	}
	s.s.Close()
	s.mu.Lock()
	s.ended, s.endErr = true, err
	close(s.dead)
	failed := make([]job, 0, len(s.pending)+len(s.waitq))
	for tag, j := range s.pending {
		delete(s.pending, tag)
		if j.f != nil { // not a tombstone (abort)
			failed = append(failed, j)
		}
	}
	failed = append(failed, s.waitq...)
	s.waitq = nil
	s.mu.Unlock()
	for _, j := range failed {
		j.f.Finish(nil, status.Errorf(codes.Unavailable, "backend ring %s: session ended with the request in flight: %v", s.b.addr, err))
	}
	return err
}

// deliver finishes the call waiting for d's tag, on the reader's goroutine.
func (s *session) deliver(d *shmring.Descriptor, err error) {
	s.mu.Lock()
	j, ok := s.pending[d.Tag]
	delete(s.pending, d.Tag)
	s.mu.Unlock()
	if ok && j.byRef {
		s.regionDone(j.shared.Region) // the runtime has finished with the client's bytes
	}
	if ok && j.f == nil { // the late answer of a call vig gave up on: its room comes back
		s.release(d)
		s.giveBack()
		return
	}
	if !ok {
		s.release(d)
		if n := s.b.stray.Add(1); n <= 10 || n%1000 == 0 {
			s.b.log.Warn("ring backend answered a tag vig did not post; dropped", "tag", d.Tag, "count", n)
		}
		return
	}
	out, err := s.finish(j.h, d, err)
	s.release(d)
	s.giveBack()
	j.f.Finish(out, err)
}

// release returns a response's payload slot to the runtime.
func (s *session) release(d *shmring.Descriptor) {
	if d.Slot != shmring.NoSlot {
		s.s.Guard(func() error { s.s.Responses.Release(d.Slot); return nil })
	}
}

// finish turns a delivered result into the answer.
func (s *session) finish(h *wire.InferHeader, d *shmring.Descriptor, err error) (out mem.BufferSlice, _ error) {
	if err != nil {
		return nil, err
	}
	if d.Status != shmring.StatusOK {
		msg := d.Message
		if msg == "" {
			msg = "backend ring " + s.b.addr + " answered " + d.Status.String()
		}
		if d.Status == shmring.Status(codes.InvalidArgument) && strings.Contains(msg, "reserved flags") {
			msg += " (a ring runtime without shmring's extra regions refuses frames passed by reference: set backend.ring.share_frames: false)"
		}
		return nil, status.Error(codes.Code(d.Status), msg)
	}
	var rerr error
	gerr := s.s.Guard(func() error {
		out, rerr = s.encode(h, d)
		return nil
	})
	if gerr != nil {
		return nil, status.Errorf(codes.Unavailable, "backend ring %s: reading the answer: %v", s.b.addr, gerr)
	}
	return out, rerr
}

// encode builds the ModelInferResponse from the result in d; it runs under the
// session's guard since it reads the response slot.
func (s *session) encode(h *wire.InferHeader, d *shmring.Descriptor) (mem.BufferSlice, error) {
	payload := s.s.Responses.Payload(d)
	outs := s.outs[:0]
	if d.NumTensors == 0 && len(payload) > 0 {
		outs = append(outs, output{name: "OUTPUT0", datatype: "UINT8", shape: []int64{int64(len(payload))}, data: payload})
	}
	for i := range d.Tensors[:d.NumTensors] {
		t := &d.Tensors[i]
		if t.Offset > uint64(len(payload)) || t.Length > uint64(len(payload))-t.Offset {
			return nil, status.Errorf(codes.Internal, "backend ring %s: output '%s' of %d bytes at %d lies outside the %d-byte answer",
				s.b.addr, t.Name, t.Length, t.Offset, len(payload))
		}
		if !requested(h, t.Name) {
			continue
		}
		outs = append(outs, output{name: t.Name, datatype: t.Datatype, shape: t.Shape(), data: payload[t.Offset : t.Offset+t.Length]})
	}
	s.outs = outs
	defer clear(s.outs)
	for i := range h.Outputs {
		if !produced(outs, h.Outputs[i].Name) {
			return nil, status.Errorf(codes.InvalidArgument, "unexpected inference output '%s' for model '%s'", h.Outputs[i].Name, h.Model)
		}
	}
	pool := mem.DefaultBufferPool()
	n := responseSize(h.Model, h.Version, h.ID, outs)
	buf := pool.Get(n)
	*buf = appendResponse((*buf)[:0], h.Model, h.Version, h.ID, outs)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func requested(h *wire.InferHeader, name string) bool {
	if len(h.Outputs) == 0 {
		return true
	}
	for i := range h.Outputs {
		if string(h.Outputs[i].Name) == name {
			return true
		}
	}
	return false
}

func produced(outs []output, name []byte) bool {
	for i := range outs {
		if outs[i].name == string(name) {
			return true
		}
	}
	return false
}

// parseFrameID splits an id of the form "stream#frame" (frame a decimal uint64).
func parseFrameID(id []byte) (stream []byte, frame uint64, ok bool) {
	i := len(id) - 1
	for i >= 0 && id[i] != '#' {
		i--
	}
	if i <= 0 || i == len(id)-1 {
		return nil, 0, false
	}
	var n uint64
	for _, c := range id[i+1:] {
		if c < '0' || c > '9' || n > (1<<64-1-uint64(c-'0'))/10 {
			return nil, 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return id[:i], n, true
}
