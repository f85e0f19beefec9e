// Package ringfront is the ring frontend of vig serve: requests that co-located
// sensor processes post on their shared-memory rings (package shmring) become
// gateway Calls, go through the same freshness scheduler as gRPC requests and on to
// whatever backend the gateway has, and the results come back on the clients'
// response rings with every output tensor (name, datatype, shape and bytes).
//
// # One Call per descriptor
//
// The Call's header is filled from the descriptor itself (model, stream, capture
// time, id "stream#frame", the input tensors' names, datatypes and shapes, and the
// raw tensor spans of the message a gRPC backend would be sent): nothing is
// encoded to be parsed again. The ModelInferRequest is built only when a gRPC
// backend asks for it (Call.Build). A session's receive loop submits each request
// and goes back to its ring; the answer is written by whichever goroutine finishes
// the call, so no goroutine is started per request. The requests in flight are
// bounded by what the client can have outstanding (its request descriptors and
// slots). A client that leaves has its calls still waiting or running cancelled:
// they free their slots at once, and the session's requests and buffers are
// released once each has been answered.
//
// # Three data paths, one per session
//
//   - by_reference: the client's region is a /dev/shm file with a key (shmring
//     BackendShmKey) and the backend is Triton-protocol gRPC: vig registers the
//     request ring's payload arena with the backend as system shared memory once per
//     session (bound to the client's uid in vig's registry; unregistered when the
//     session ends) and forwards each frame as shared_memory_region/offset/byte_size
//     parameters. The backend reads the frame in place: neither vig nor a socket
//     copies it.
//   - copy, sealed memfd: the message to the backend is a small header vig encodes
//     plus views of the frame in the client's mapping, which gRPC writes straight to
//     the backend connection (one send, no copy in vig).
//   - copy, unsealed /dev/shm: the frame is copied once under the fault guard first,
//     because the client could truncate the file while gRPC reads it.
//
// A backend that cannot map the region (a memfd, Android's lack of /dev/shm, a
// ring runtime, a registration the backend refuses) keeps the copy path. vig logs
// the path of each session when it starts and counts open sessions in
// vig_ring_sessions{path}.
package ringfront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
)

// Session paths, the label of vig_ring_sessions.
const (
	PathByReference = "by_reference"
	PathCopy        = "copy"
)

// Options configures a Frontend.
type Options struct {
	Log *slog.Logger
	// Metrics receives vig_ring_sessions; nil keeps the gauge private.
	Metrics *metrics.Registry
	// NoByReference keeps every session on the copy path (for comparison runs).
	NoByReference bool
}

// Frontend serves ring clients.
type Frontend struct {
	ln       *shmring.Listener
	gw       *gateway.Gateway
	log      *slog.Logger
	opts     Options
	sessions *prometheus.GaugeVec
	seq      atomic.Uint64
	names    interner

	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[*shmring.Conn]*session
	closed bool
}

// New serves the clients of ln through gw.
func New(ln *shmring.Listener, gw *gateway.Gateway, opts Options) *Frontend {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vig_ring_sessions", Help: "Open ring client sessions, by data path (by_reference: the backend reads frames in place; copy: frames travel in the message).",
	}, []string{"path"})
	if opts.Metrics != nil {
		if err := opts.Metrics.Prometheus().Register(g); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				g = are.ExistingCollector.(*prometheus.GaugeVec)
			}
		}
	}
	g.WithLabelValues(PathByReference)
	g.WithLabelValues(PathCopy)
	return &Frontend{ln: ln, gw: gw, log: opts.Log, opts: opts, sessions: g, conns: map[*shmring.Conn]*session{}}
}

// Sessions reports the open sessions on each path.
func (f *Frontend) Sessions() (byReference, copied int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.conns {
		if s == nil {
			continue
		}
		if s.byRef {
			byReference++
		} else {
			copied++
		}
	}
	return
}

// Serve accepts clients until the listener is closed.
func (f *Frontend) Serve() error {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			f.mu.Lock()
			closed := f.closed
			f.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			c.Close()
			return nil
		}
		f.conns[c] = nil
		f.wg.Add(1)
		f.mu.Unlock()
		go f.serveConn(c)
	}
}

// Close stops accepting and ends the sessions; it returns once every request
// already received has been answered.
func (f *Frontend) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close() // Recv returns; requests in flight still answer (Respond fails harmlessly)
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *Frontend) serveConn(c *shmring.Conn) {
	defer f.wg.Done()
	s := newSession(f, c)
	s.open()
	f.mu.Lock()
	f.conns[c] = s
	f.mu.Unlock()
	s.loop()
	c.Close()
	s.cancelAll()
	s.close()
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// session is one ring client.
type session struct {
	f      *Frontend
	c      *shmring.Conn
	log    *slog.Logger
	lay    shmring.RingLayout // the request ring
	sealed bool

	byRef  bool
	region string // the backend's name of the request arena (by_reference)

	reqs []request
	free chan *request // requests not in flight

	mu sync.Mutex // guards each request's call
}

func newSession(f *Frontend, c *shmring.Conn) *session {
	lay := c.Layout().Rings[shmring.RequestRing]
	s := &session{f: f, c: c, lay: lay, sealed: c.Sealed(),
		log: f.log.With("pid", c.Peer().PID, "uid", c.Peer().UID)}
	// What the client can have outstanding: each request holds a descriptor
	// until it is received and a slot until it is answered.
	n := int(lay.Descriptors) + int(lay.Slots)
	s.reqs = make([]request, n)
	s.free = make(chan *request, n)
	for i := range s.reqs {
		r := &s.reqs[i]
		r.s = s
		r.buildFn = r.build
		s.free <- r
	}
	return s
}

// open decides the session's data path and says which it is.
func (s *session) open() {
	reason := s.byReference()
	path := PathCopy
	if reason == "" {
		path = PathByReference
	}
	s.f.sessions.WithLabelValues(path).Inc()
	s.log.Info("ring session", "path", path, "why", cond(reason == "", "the backend maps the client's /dev/shm region "+s.c.Key(), reason),
		"sealed", s.sealed, "request_slots", s.lay.Slots, "slot_bytes", s.lay.SlotSize)
}

func cond(ok bool, a, b string) string {
	if ok {
		return a
	}
	return b
}

// byReference registers the request arena with the backend when it can read it;
// it returns why not otherwise.
func (s *session) byReference() string {
	switch {
	case s.f.opts.NoByReference:
		return "by-reference forwarding is switched off"
	case s.c.Key() == "":
		return "the client's region has no /dev/shm key (a memfd, or an unlinked file): a backend cannot open it"
	case !s.f.gw.SystemSharedMemory():
		return "the backend is a ring runtime, not Triton system shared memory"
	}
	name := fmt.Sprintf("vig-ring-%d-%d", os.Getpid(), s.f.seq.Add(1))
	size := uint64(s.lay.Slots) * s.lay.SlotSize
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.f.gw.RegisterShm(ctx, name, s.c.Key(), s.lay.ArenaOff, size, s.c.Peer().UID); err != nil {
		return "the backend refused the region: " + status.Convert(err).Message()
	}
	s.byRef, s.region = true, name
	return ""
}

// The session is a gateway.SharedRegion: the client's sealed memfd.
func (s *session) Fd() int               { return s.c.RegionFd() }
func (s *session) Size() uint64          { return s.c.Layout().RegionSize }
func (s *session) Done() <-chan struct{} { return s.c.Done() }

// loop receives requests and submits them until the session ends.
func (s *session) loop() {
	for {
		var r *request
		select {
		case r = <-s.free:
		case <-s.c.Done():
			return
		}
		if err := s.c.Recv(&r.req); err != nil {
			s.free <- r
			if !errors.Is(err, shmring.ErrClosed) {
				s.log.Warn("ring client dropped", "err", err)
			}
			return
		}
		s.submit(r)
	}
}

// cancelAll tells the gateway that the client has left: every call of the
// session still waiting or running is cancelled (and still answered, into the
// closed session), so that it neither keeps a slot nor runs for nobody.
func (s *session) cancelAll() {
	var calls []*gateway.Call
	s.mu.Lock()
	for i := range s.reqs {
		if c := s.reqs[i].call; c != nil {
			c.Hold() // found unanswered under the lock Reply takes first: not recycled until Release
			calls = append(calls, c)
		}
	}
	s.mu.Unlock()
	for _, c := range calls {
		s.f.gw.Cancel(c)
		c.Release()
	}
}

// close waits until every request of the session has been answered, then
// unregisters the region.
func (s *session) close() {
	for range len(s.reqs) {
		<-s.free
	}
	path := PathCopy
	if s.byRef {
		path = PathByReference
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.f.gw.UnregisterShm(ctx, s.region); err != nil {
			s.log.Warn("ring session: unregistering its region from the backend", "region", s.region, "err", err)
		}
		cancel()
	}
	s.f.sessions.WithLabelValues(path).Dec()
}

// submit turns a received request into a Call and submits it; a request the
// frontend refuses is answered at once.
func (s *session) submit(r *request) {
	if err := r.check(); err != nil {
		r.answer(&shmring.Response{Status: shmring.StatusInvalid, Message: err.Error()})
		return
	}
	c := s.f.gw.NewCall()
	r.fill(c)
	c.Build, c.Replier, c.Tag = r.buildFn, r, r
	if s.sealed && !r.byRef && r.req.Slot != shmring.NoSlot {
		// A ring runtime can map the client's memfd: the frame goes by reference.
		d := &r.req.Descriptor
		sh := &r.shared
		sh.Region = s
		sh.Off = s.lay.ArenaOff + uint64(d.Slot)*s.lay.SlotSize + d.PayloadOff
		sh.Len = d.PayloadLen
		sh.Inputs = sh.Inputs[:0]
		for _, t := range r.tensors() {
			sh.Inputs = append(sh.Inputs, wire.Span{Off: int(t.Offset), Len: int(t.Length)})
		}
		c.Shared = sh
	}
	s.mu.Lock()
	r.call = c
	s.mu.Unlock()
	s.f.gw.Submit(c)
}

// request is one ring request in flight; the session owns a fixed set of them.
type request struct {
	s       *session
	req     shmring.Request
	buildFn func(*gateway.Call) (mem.BufferSlice, error)
	byRef   bool          // this request's message references the arena
	call    *gateway.Call // while submitted and unanswered; guarded by s.mu

	names  []byte              // the header's names and id
	enc    []byte              // scratch for the message's small fields
	shared gateway.SharedFrame // the frame in the client's sealed memfd, for a ring runtime
	res    shmring.Response
	chunks []shmring.Chunk
	out    wire.InferResponse
}

// The implicit input of a request without tensor records.
const (
	defaultInput    = "INPUT0"
	defaultDatatype = "UINT8"
)

// check refuses what cannot become a Call. DecodeDescriptor has already bounded
// every length, and the tensors lie inside the payload.
func (r *request) check() error {
	d := &r.req.Descriptor
	switch {
	case d.Model == "":
		return errors.New("model is empty")
	case d.CaptureNs < 0:
		return fmt.Errorf("capture time %d is negative", d.CaptureNs)
	}
	return nil
}

// tensors is the request's tensors: its records, or one implicit UINT8 input over
// the whole payload.
func (r *request) tensors() []shmring.Tensor {
	d := &r.req.Descriptor
	if d.NumTensors > 0 {
		return d.Tensors[:d.NumTensors]
	}
	t := &d.Tensors[0]
	*t = shmring.Tensor{Name: defaultInput, Datatype: defaultDatatype, Rank: 1, Length: d.PayloadLen}
	t.Dims[0] = int64(d.PayloadLen)
	return d.Tensors[:1]
}

// fill writes the Call's header from the descriptor.
func (r *request) fill(c *gateway.Call) {
	d := &r.req.Descriptor
	h := &c.Header
	h.Reset()
	ts := r.tensors()
	r.byRef = r.s.byRef && d.Slot != shmring.NoSlot

	stream := d.Stream
	if stream == "" {
		stream = d.Model
	}
	b := append(r.names[:0], d.Model...)
	mEnd := len(b)
	b = append(b, stream...)
	sEnd := len(b)
	b = append(b, stream...)
	b = append(b, '#')
	b = strconv.AppendUint(b, d.Frame, 10)
	idEnd := len(b)
	for i := range ts {
		b = append(b, ts[i].Name...)
		b = append(b, ts[i].Datatype...)
	}
	r.names = b // not grown below: the slices taken now stay valid
	h.Model, h.Stream, h.ID = b[:mEnd], b[mEnd:sEnd], b[sEnd:idEnd]
	h.Capture, h.HasCapture = d.CaptureNs, d.CaptureNs != 0

	off := idEnd
	pos := r.prefixSize(h, ts)
	for i := range ts {
		t := &ts[i]
		in := addInput(h)
		in.Name = b[off : off+len(t.Name)]
		off += len(t.Name)
		in.Datatype = b[off : off+len(t.Datatype)]
		off += len(t.Datatype)
		in.Shape = append(in.Shape, t.Shape()...)
		if r.byRef {
			continue
		}
		pos += 1 + sizeVarint(t.Length)
		h.Raw = append(h.Raw, wire.Span{Off: pos, Len: int(t.Length)})
		h.RawInputs++
		h.RawBytes += int(t.Length)
		pos += int(t.Length)
	}
	h.Size = pos
}

// addInput extends h.Inputs by one tensor, reusing its storage.
func addInput(h *wire.InferHeader) *wire.Tensor {
	if len(h.Inputs) < cap(h.Inputs) {
		h.Inputs = h.Inputs[:len(h.Inputs)+1]
	} else {
		h.Inputs = append(h.Inputs, wire.Tensor{})
	}
	t := &h.Inputs[len(h.Inputs)-1]
	*t = wire.Tensor{Shape: t.Shape[:0], Params: t.Params[:0]}
	return t
}

// Reply implements gateway.Replier: it writes the answer on the client's
// response ring, on whatever goroutine finished the call.
func (r *request) Reply(_ *gateway.Call, resp mem.BufferSlice, err error) {
	r.s.mu.Lock()
	r.call = nil
	r.s.mu.Unlock()
	res := &r.res
	if err != nil {
		st := status.Convert(err)
		*res = shmring.Response{Status: ringStatus(st.Code()), Message: st.Message()}
	} else {
		r.result(resp)
	}
	r.answer(res)
	resp.Free()
}

// answer posts res for the request and makes the request free again.
func (r *request) answer(res *shmring.Response) {
	s := r.s
	if err := s.c.Respond(&r.req, res); err != nil && !errors.Is(err, shmring.ErrClosed) {
		s.log.Warn("ring response", "stream", r.req.Stream, "frame", r.req.Frame, "err", err)
	}
	clear(r.chunks)
	r.chunks = r.chunks[:0]
	res.Chunks = nil
	s.free <- r
}

// ringStatus maps a gRPC code onto a ring status (the same numbers).
func ringStatus(c codes.Code) shmring.Status {
	if c == codes.OK {
		return shmring.StatusInternal // an error without a code
	}
	return shmring.Status(c)
}

// outputAlign is where each output's bytes start in a result payload: a multiple
// of 64, so that a client can read FP32/INT64 arrays in place.
const outputAlign = 64

// result turns the backend's ModelInferResponse into the ring response: one
// tensor record per output, each output's bytes copied from the backend's
// buffers into the response slot (their one copy).
func (r *request) result(resp mem.BufferSlice) {
	res := &r.res
	fail := func(format string, args ...any) {
		*res = shmring.Response{Status: shmring.StatusInternal, Message: fmt.Sprintf(format, args...)}
	}
	o := &r.out
	if err := o.ParseResponse(resp); err != nil {
		fail("backend answer: %v", err)
		return
	}
	if len(o.Outputs) > shmring.MaxTensors {
		fail("backend answered %d outputs; a ring result carries at most %d", len(o.Outputs), shmring.MaxTensors)
		return
	}
	*res = shmring.Response{Status: shmring.StatusOK, NumTensors: len(o.Outputs)}
	off := uint64(0)
	for i := range o.Outputs {
		out := &o.Outputs[i]
		switch {
		case out.HasContents:
			*res = shmring.Response{Status: shmring.StatusUnimplemented,
				Message: fmt.Sprintf("output '%s' came as typed contents; a ring carries raw_output_contents", out.Name)}
			return
		case len(out.Name) > shmring.MaxTensorName:
			fail("output name of %d bytes; a ring carries at most %d", len(out.Name), shmring.MaxTensorName)
			return
		case len(out.Datatype) > shmring.MaxDatatypeLen:
			fail("output '%s': datatype of %d bytes; a ring carries at most %d", out.Name, len(out.Datatype), shmring.MaxDatatypeLen)
			return
		case len(out.Shape) > shmring.MaxRank:
			fail("output '%s': rank %d; a ring carries at most %d", out.Name, len(out.Shape), shmring.MaxRank)
			return
		}
		t := &res.Tensors[i]
		t.Name, t.Datatype = r.intern(out.Name), r.intern(out.Datatype)
		t.Rank = copy(t.Dims[:], out.Shape)
		for _, dim := range out.Shape {
			if dim < 0 {
				fail("output '%s': negative dimension %d", out.Name, dim)
				return
			}
		}
		if len(o.Raw) == 0 { // outputs without bytes (e.g. written to shared memory)
			continue
		}
		span := o.Raw[i]
		off = (off + outputAlign - 1) &^ (outputAlign - 1)
		t.Offset, t.Length = off, uint64(span.Len)
		r.chunks = appendChunks(r.chunks, resp, span, off)
		off += uint64(span.Len)
	}
	res.Chunks = r.chunks
}

// intern returns b as a string without allocating for names seen before (the
// model's outputs repeat on every answer).
func (r *request) intern(b []byte) string { return r.s.f.names.get(b) }

// appendChunks appends the bytes of span in msg, one chunk per buffer they lie
// in, to be written from off on.
func appendChunks(chunks []shmring.Chunk, msg mem.BufferSlice, span wire.Span, off uint64) []shmring.Chunk {
	pos := 0
	for _, b := range msg {
		data := b.ReadOnlyData()
		lo, hi := max(span.Off-pos, 0), min(span.Off+span.Len-pos, len(data))
		if lo < hi {
			chunks = append(chunks, shmring.Chunk{Off: off + uint64(pos+lo-span.Off), Data: data[lo:hi]})
		}
		pos += len(data)
		if pos >= span.Off+span.Len {
			break
		}
	}
	return chunks
}
