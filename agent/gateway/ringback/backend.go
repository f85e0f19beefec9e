// Package backend carries vig's inference requests to a backend reachable only
// through a shared-memory ring: an on-device runtime without gRPC. Here vig is the
// ring's client: it creates the region, hands it to the runtime over the ring's
// Unix socket (package shmring), and posts each request's tensors on the request
// ring; the runtime reads them in place and posts the result on the response ring.
//
// Backend implements gateway.InferBackend, so the gateway and its scheduler work
// unchanged in front of it:
//
//	b, err := backend.Dial("@npu-runtime", backend.Options{})
//	gw, err := gateway.New(gateway.Options{..., Infer: b})
//
// # Mapping a ModelInferRequest onto a ring descriptor
//
// The raw_input_contents are copied back to back into one loaned payload slot —
// the one copy on this path — and described by one tensor record each (name,
// datatype, shape from the request). The descriptor's model is model_name. Its
// stream and frame come from the request id when it has the form "stream#frame"
// (the convention of vig's benchmark driver and mock backend); otherwise the
// stream is vig's (vig_stream, else the model) and the frame a counter of such
// requests kept by the Backend. Capture time is vig_capture_ns, or 0 when the
// request has none. The ring carries no model version or parameters: Triton's
// priority and timeout act in vig's scheduler, not in the runtime.
//
// What the ring cannot carry is refused before anything is posted: tensors given
// as `contents` or in a shared-memory region (UNIMPLEMENTED: send
// raw_input_contents), more than shmring.MaxTensors inputs, names or shapes beyond
// the descriptor's fields (INVALID_ARGUMENT), and a request larger than a request
// slot (RESOURCE_EXHAUSTED, naming the slot size and Options.Config).
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
// One ring session carries all requests. Requests are posted by whichever
// goroutine serves them (serialized by a mutex around the ring's producer end);
// a single reader goroutine takes the results, which may come in any order, and
// hands each to the request waiting for its tag. The requests in flight are
// bounded by what the session can answer without dropping anything: the smaller
// of the request ring's slots and descriptors and the response ring's slots and
// descriptors. A request whose context ends stops waiting; its late result is
// released and dropped when it arrives.
//
// The Backend connects in the background and reconnects with exponential backoff
// (no busy loop) when the session ends or cannot be established. Meanwhile every
// request fails at once with UNAVAILABLE; requests in flight when the session
// ends fail UNAVAILABLE too. Options.OnState reports the transitions (for the
// scheduler's notion of backend availability and for health).
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

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
	// Spin is how the result reader spins before sleeping on the futex.
	Spin shmring.Spin
	// Timeout bounds each handshake (2 s by default).
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between connection attempts
	// (100 ms and 5 s by default); it doubles after each failure.
	MinBackoff, MaxBackoff time.Duration
	// OnState, if set, is called with true when a session is established and with
	// false when it ends or the first attempt fails: on each change, from one
	// goroutine, in order.
	OnState func(up bool)
	// ConfigKey names the setting that sizes the ring in the user's configuration,
	// for error messages (e.g. "backend.ring.slot_bytes"); empty names Options.Config.
	ConfigKey string
	Logger    *slog.Logger
}

// Backend sends inference requests over a ring session to a runtime. Its methods
// are safe for concurrent use.
type Backend struct {
	addr string
	opts Options
	log  *slog.Logger

	cur     atomic.Pointer[session]
	frames  atomic.Uint64 // frame numbers for requests whose id names none
	stray   atomic.Uint64 // answers to tags vig did not post
	calls   sync.Pool     // *call
	closing chan struct{}
	stopped chan struct{}
	closeMu sync.Once

	reported int8 // last state given to OnState: 0 none yet, 1 up, -1 down (run's)

	mu      sync.Mutex
	lastErr error         // why no session is up
	upCh    chan struct{} // closed while a session is up; replaced when it ends
}

// Dial starts connecting to the runtime listening on addr ("@name" for the
// abstract namespace, else a socket path) and returns at once; requests fail
// UNAVAILABLE until the session is up (see WaitUp). It fails only for options that
// cannot work and on machines without shared memory for rings.
func Dial(addr string, opts Options) (*Backend, error) {
	if addr == "" {
		return nil, errors.New("shmring/backend: no address")
	}
	if _, err := shmring.Probe(); err != nil {
		return nil, fmt.Errorf("shmring/backend: no shared memory for a ring on this machine: %w", err)
	}
	if opts.Config == (shmring.Config{}) {
		opts.Config = shmring.DefaultConfig
	}
	if _, err := shmring.ComputeLayout(opts.Config); err != nil {
		return nil, fmt.Errorf("shmring/backend: ring sizes: %w", err)
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
	b := &Backend{addr: addr, opts: opts, log: opts.Logger.With("backend", "ring:"+addr),
		closing: make(chan struct{}), stopped: make(chan struct{}), upCh: make(chan struct{}),
		lastErr: errors.New("not connected yet")}
	b.calls.New = func() any { return &call{done: make(chan error, 1)} }
	go b.run()
	return b, nil
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
			return errors.New("shmring/backend: closed")
		}
	}
}

// Close ends the session and stops reconnecting; requests in flight fail
// UNAVAILABLE.
func (b *Backend) Close() error {
	b.closeMu.Do(func() { close(b.closing) })
	if s := b.cur.Load(); s != nil {
		s.s.Close()
	}
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
			b.mu.Lock()
			b.cur.Store(s)
			close(b.upCh)
			b.mu.Unlock()
			// Close closes the channel, then looks at cur; we store cur, then
			// look at the channel: one of the two sees the other.
			select {
			case <-b.closing:
				ss.Close()
				s.read() // returns at once, failing any request that found the session meanwhile
				b.cur.Store(nil)
				return
			default:
			}
			b.log.Info("ring backend connected", "pid", ss.Peer().PID, "uid", ss.Peer().UID,
				"in_flight", cap(s.tokens), "request_slot_bytes", s.slotSize)
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

// state reports a transition to OnState; only run calls it.
func (b *Backend) state(up bool) {
	v := int8(-1)
	if up {
		v = 1
	}
	if v == b.reported {
		return
	}
	b.reported = v
	if b.opts.OnState != nil {
		b.opts.OnState(up)
	}
}

func (b *Backend) downError() error {
	b.mu.Lock()
	err := b.lastErr
	b.mu.Unlock()
	return status.Errorf(codes.Unavailable, "backend ring %s is down (%v); vig reconnects with backoff", b.addr, err)
}

// session is one established ring session.
type session struct {
	b        *Backend
	s        *shmring.Session
	slotSize int
	tokens   chan struct{} // one per request in flight
	dead     chan struct{} // closed when the session has ended

	sendMu  sync.Mutex // the request ring's producer end, and what follows
	nextTag uint64
	d       shmring.Descriptor
	names   map[string]string // interned tensor names and datatypes

	mu      sync.Mutex
	pending map[uint64]*call
	ended   bool
	endErr  error
}

func newSession(b *Backend, ss *shmring.Session) *session {
	l := ss.Region().Layout()
	req, resp := l.Rings[shmring.RequestRing], l.Rings[shmring.ResponseRing]
	// The runtime answers without waiting (a full response ring drops the
	// answer), so no more may be in flight than it can surely answer.
	n := min(req.Slots, req.Descriptors, resp.Slots, resp.Descriptors)
	return &session{b: b, s: ss, slotSize: int(req.SlotSize), tokens: make(chan struct{}, n),
		dead: make(chan struct{}), names: map[string]string{}, pending: map[uint64]*call{}}
}

// call is one request waiting for its result.
type call struct {
	done      chan error // the result is in d (nil) or failed
	d         shmring.Descriptor
	abandoned bool // the requester left; the reader disposes of the result (under session.mu)
	ended     bool // failed because the session ended: no slot or token to give back
	scratch   []byte
	layout    tensorLayout
	outs      []output
}

// read takes results off the response ring until the session ends, and then
// fails every request still waiting.
func (s *session) read() error {
	var d shmring.Descriptor
	var err error
	for {
		err = s.s.Guard(func() error { return s.s.Responses.Next(&d) })
		if errors.Is(err, shmring.ErrBadDescriptor) {
			// The ring goes on; the malformed answer fails its request (the
			// descriptor's tag is still read).
			s.deliver(&d, status.Errorf(codes.Internal, "backend ring %s: malformed answer: %v", s.b.addr, err))
			continue
		}
		if err != nil {
			break
		}
		s.deliver(&d, nil)
	}
	s.s.Close()
	s.mu.Lock()
	s.ended, s.endErr = true, err
	close(s.dead)
	for tag, c := range s.pending {
		delete(s.pending, tag)
		if !c.abandoned {
			c.ended = true
			c.done <- status.Errorf(codes.Unavailable, "backend ring %s: session ended with the request in flight: %v", s.b.addr, err)
		}
	}
	s.mu.Unlock()
	return err
}

// deliver hands a result to the request waiting for its tag.
func (s *session) deliver(d *shmring.Descriptor, err error) {
	s.mu.Lock()
	c := s.pending[d.Tag]
	delete(s.pending, d.Tag)
	switch {
	case c == nil:
		s.mu.Unlock()
		s.release(d)
		if n := s.b.stray.Add(1); n <= 10 || n%1000 == 0 {
			s.b.log.Warn("ring backend answered a tag vig did not post; dropped", "tag", d.Tag, "count", n)
		}
	case c.abandoned:
		s.mu.Unlock()
		s.release(d)
		<-s.tokens
		s.b.putCall(c)
	default:
		c.d = *d
		s.mu.Unlock()
		c.done <- err
	}
}

// release returns a response's payload slot to the runtime.
func (s *session) release(d *shmring.Descriptor) {
	if d.Slot != shmring.NoSlot {
		s.s.Guard(func() error { s.s.Responses.Release(d.Slot); return nil })
	}
}

func (b *Backend) putCall(c *call) {
	c.abandoned, c.ended = false, false
	c.d = shmring.Descriptor{}
	clear(c.outs)
	c.outs = c.outs[:0]
	b.calls.Put(c)
}

// Infer implements gateway.InferBackend.
func (b *Backend) Infer(ctx context.Context, h *wire.InferHeader, req mem.BufferSlice) (mem.BufferSlice, error) {
	s := b.cur.Load()
	if s == nil {
		return nil, b.downError()
	}
	c := b.calls.Get().(*call)
	out, keep, err := s.infer(ctx, c, h, req)
	if !keep {
		b.putCall(c)
	}
	return out, err
}

// infer runs one request on the session. keep reports that c now belongs to the
// reader (the request was abandoned with its result outstanding).
func (s *session) infer(ctx context.Context, c *call, h *wire.InferHeader, req mem.BufferSlice) (_ mem.BufferSlice, keep bool, _ error) {
	if err := checkHeader(h); err != nil {
		return nil, false, err
	}
	var err error
	if c.scratch, err = scanRequest(req, &c.layout, c.scratch); err != nil {
		return nil, false, status.Errorf(codes.InvalidArgument, "ModelInfer: %v", err)
	}
	l := &c.layout
	if l.inputs != len(h.Inputs) || (l.raws != 0 && l.raws != l.inputs) {
		return nil, false, status.Errorf(codes.InvalidArgument,
			"raw_input_contents field must be used for all inputs, or none: %d inputs, %d raw_input_contents", l.inputs, l.raws)
	}
	if l.raws == 0 && l.inputs > 0 {
		return nil, false, status.Errorf(codes.Unimplemented,
			"backend ring %s: tensors must be sent in raw_input_contents (the ring carries raw bytes only)", s.b.addr)
	}
	total := 0
	for _, r := range l.raw[:l.raws] {
		total += r.len
	}
	if total > s.slotSize {
		return nil, false, status.Errorf(codes.ResourceExhausted,
			"request tensors of %d bytes exceed the %d-byte request slots of backend ring %s; raise %s",
			total, s.slotSize, s.b.addr, s.b.opts.ConfigKey)
	}

	stream, frame, ok := parseFrameID(h.ID)
	if !ok {
		stream, frame = h.Stream, s.b.frames.Add(1)-1
	}
	if len(stream) > shmring.MaxStreamLen {
		return nil, false, status.Errorf(codes.InvalidArgument, "stream '%s' longer than a ring's %d bytes", stream, shmring.MaxStreamLen)
	}

	// A token bounds the requests in flight by what the session can answer.
	select {
	case s.tokens <- struct{}{}:
	case <-ctx.Done():
		return nil, false, status.FromContextError(ctx.Err()).Err()
	case <-s.dead:
		return nil, false, s.b.downError()
	}
	tag, err := s.post(ctx, c, h, req, total, stream, frame)
	if err != nil {
		<-s.tokens
		return nil, false, err
	}

	select {
	case err := <-c.done:
		out, err := s.finish(c, h, err)
		return out, false, err
	case <-ctx.Done():
	}
	s.mu.Lock()
	if _, ok := s.pending[tag]; ok {
		c.abandoned = true // the reader releases the late result and the token
		s.mu.Unlock()
		return nil, true, status.FromContextError(ctx.Err()).Err()
	}
	s.mu.Unlock()
	// The result was handed over (or the session ended) as the context ended.
	<-c.done
	if !c.ended {
		s.release(&c.d)
		<-s.tokens
	}
	return nil, false, status.FromContextError(ctx.Err()).Err()
}

// checkHeader refuses what a ring descriptor cannot carry.
func checkHeader(h *wire.InferHeader) error {
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
		}
	}
	for i := range h.Outputs {
		if hasShm(&h.Outputs[i]) {
			return status.Errorf(codes.Unimplemented, "output '%s': shared-memory regions cannot go over a ring", h.Outputs[i].Name)
		}
	}
	return nil
}

func hasShm(t *wire.Tensor) bool {
	for _, p := range t.Params {
		if string(p.Key) == "shared_memory_region" {
			return true
		}
	}
	return false
}

// post copies the request's tensors into a payload slot and posts the descriptor.
// On success the call is pending under the returned tag.
func (s *session) post(ctx context.Context, c *call, h *wire.InferHeader, req mem.BufferSlice, total int, stream []byte, frame uint64) (uint64, error) {
	slot, buf, err := s.loan(ctx, total)
	if err != nil {
		return 0, err
	}
	l := &c.layout
	if slot != shmring.NoSlot {
		// The one copy: the runtime reads the slot in place.
		err = s.s.Guard(func() error { copySpans(buf, req, l.raw[:l.raws]); return nil })
		if err != nil {
			s.unloan(slot)
			return 0, status.Errorf(codes.Unavailable, "backend ring %s: %v", s.b.addr, err)
		}
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.nextTag++
	tag := s.nextTag
	d := &s.d
	*d = shmring.Descriptor{Tag: tag, Frame: frame, Slot: slot, Stream: s.intern(stream), Model: s.intern(h.Model),
		NumTensors: l.inputs}
	if slot != shmring.NoSlot {
		d.PayloadLen = uint64(total)
	}
	if h.HasCapture {
		d.CaptureNs = h.Capture
	}
	off := uint64(0)
	for i := range l.inputs {
		t := &d.Tensors[i]
		t.Name, t.Datatype = s.intern(h.Inputs[i].Name), s.intern(h.Inputs[i].Datatype)
		t.Rank, t.Dims = l.rank[i], l.dims[i]
		t.Offset, t.Length = off, uint64(l.raw[i].len)
		off += t.Length
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		s.unloanLocked(slot)
		return 0, s.b.downError()
	}
	s.pending[tag] = c
	s.mu.Unlock()
	err = s.s.Guard(func() error { return s.s.Requests.TryPost(d) })
	if err != nil {
		s.mu.Lock()
		delete(s.pending, tag)
		s.mu.Unlock()
		s.unloanLocked(slot)
		if errors.Is(err, shmring.ErrFull) {
			// Tokens keep the posted requests below the ring's size: only a
			// runtime that stopped reading its ring gets here.
			return 0, status.Errorf(codes.Unavailable, "backend ring %s: request ring full (the runtime is not reading it)", s.b.addr)
		}
		return 0, status.Errorf(codes.Unavailable, "backend ring %s: %v", s.b.addr, err)
	}
	return tag, nil
}

// loan takes a payload slot for n bytes (none for an empty request). The token
// guarantees that a slot frees soon: the runtime returns it right after answering.
// Until then this waits politely, minding ctx and the session.
func (s *session) loan(ctx context.Context, n int) (uint32, []byte, error) {
	if n == 0 {
		return shmring.NoSlot, nil, nil
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for i := 0; ; i++ {
		var slot uint32
		var buf []byte
		s.sendMu.Lock()
		err := s.s.Guard(func() (err error) { slot, buf, err = s.s.Requests.TryLoan(); return err })
		s.sendMu.Unlock()
		switch {
		case err == nil:
			return slot, buf, nil
		case !errors.Is(err, shmring.ErrFull):
			return 0, nil, status.Errorf(codes.Unavailable, "backend ring %s: %v", s.b.addr, err)
		case i < 100:
			runtime.Gosched()
			continue
		}
		if t == nil {
			t = time.NewTimer(time.Millisecond)
		} else {
			t.Reset(time.Millisecond)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return 0, nil, status.FromContextError(ctx.Err()).Err()
		case <-s.dead:
			return 0, nil, s.b.downError()
		}
	}
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

// finish turns a delivered result into the answer and gives the slot and the
// token back.
func (s *session) finish(c *call, h *wire.InferHeader, err error) (out mem.BufferSlice, _ error) {
	if c.ended {
		return nil, err // no slot, and the tokens ended with the session
	}
	defer func() { <-s.tokens }()
	defer s.release(&c.d)
	if err != nil {
		return nil, err
	}
	d := &c.d
	if d.Status != shmring.StatusOK {
		msg := d.Message
		if msg == "" {
			msg = "backend ring " + s.b.addr + " answered " + d.Status.String()
		}
		return nil, status.Error(codes.Code(d.Status), msg)
	}
	var rerr error
	gerr := s.s.Guard(func() error {
		out, rerr = s.encode(c, h)
		return nil
	})
	if gerr != nil {
		return nil, status.Errorf(codes.Unavailable, "backend ring %s: reading the answer: %v", s.b.addr, gerr)
	}
	return out, rerr
}

// encode builds the ModelInferResponse from the result in c.d; it runs under the
// session's guard since it reads the response slot.
func (s *session) encode(c *call, h *wire.InferHeader) (mem.BufferSlice, error) {
	d := &c.d
	payload := s.s.Responses.Payload(d)
	outs := c.outs[:0]
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
	c.outs = outs
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
	n, err := strconv.ParseUint(string(id[i+1:]), 10, 64)
	if err != nil {
		return nil, 0, false
	}
	return id[:i], n, true
}
