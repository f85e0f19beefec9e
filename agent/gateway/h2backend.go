package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/h2"
)

// The backend leg: one HTTP/2 connection to Triton (or any server of its gRPC
// protocol) carries every call, multiplexed. Calls are written by the goroutine
// that dispatches them; one reader goroutine per connection takes the answers and
// finishes the calls on the spot. A lost connection fails its calls UNAVAILABLE and
// is dialled again with capped exponential backoff.

// h2Backend is the gRPC backend. It implements Backend, and relays the RPCs vig
// does not govern.
type h2Backend struct {
	addr   string
	dial   func(ctx context.Context, addr string) (net.Conn, error)
	log    *slog.Logger
	window uint32 // receive window per stream and for the connection
	maxMsg int
	rbuf   int
	clock  func() int64

	gzip      bool // inference messages in gRPC's gzip encoding (backend.compression)
	cur       atomic.Pointer[bconn]
	conns     sync.Map // seq → *bconn, every connection whose reader runs (Abort finds a call's by Call.run)
	seq       atomic.Uint32
	state     func(up bool)
	onConnect func()        // after each new connection, on a goroutine of its own
	first     chan struct{} // closed once the first connection attempt has ended

	// While a connection is being dialled right after a working one (the backend
	// sent GOAWAY: it restarts gracefully), calls wait for it instead of failing.
	mu         sync.Mutex
	connecting bool
	parked     []*Call
	ctx        context.Context
	cancel     context.CancelFunc
	redial     chan struct{}
	done       chan struct{}
}

// Reconnect backoff: a backend that restarts is found again within about a
// second; one that stays down is not dialled more than once a second.
const (
	backoffBase = 50 * time.Millisecond
	backoffMax  = time.Second
	// stableAfter: a connection that lasted this long resets the backoff.
	stableAfter = time.Second
)

func newH2Backend(addr string, dial func(context.Context, string) (net.Conn, error), window uint32, maxMsg, rbuf int, clock func() int64, log *slog.Logger) *h2Backend {
	ctx, cancel := context.WithCancel(context.Background())
	return &h2Backend{addr: addr, dial: dial, log: log, window: window, maxMsg: maxMsg, rbuf: rbuf, clock: clock,
		ctx: ctx, cancel: cancel, redial: make(chan struct{}, 1), done: make(chan struct{}), first: make(chan struct{})}
}

// Open implements Backend: it starts the connection manager and waits for its
// first attempt (at most the dial timeout), so that the first requests find the
// connection ready rather than failing UNAVAILABLE; after a failed attempt it keeps
// trying in the background.
func (b *h2Backend) Open(state func(up bool)) {
	b.state = state
	go b.run()
	<-b.first
}

// settle ends a connection attempt: calls parked during it start on c, or fail.
func (b *h2Backend) settle(c *bconn) {
	b.mu.Lock()
	parked := b.parked
	b.parked, b.connecting = nil, false
	b.mu.Unlock()
	for _, call := range parked {
		if c == nil {
			call.Finish(nil, errBackendDown)
		} else {
			b.Start(call)
		}
	}
}

// Close implements Backend.
func (b *h2Backend) Close() error {
	b.cancel()
	<-b.done
	return nil
}

// run keeps one usable connection: it dials, waits until the connection becomes
// unusable (lost, or GOAWAY from the backend), and dials again.
func (b *h2Backend) run() {
	defer close(b.done)
	delay := time.Duration(0)
	up := false
	setUp := func(v bool) {
		if v != up {
			up = v
			b.state(v)
		}
	}
	for {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-b.ctx.Done():
				t.Stop()
				setUp(false)
				return
			case <-t.C:
			}
		}
		c, err := b.connect()
		if err != nil {
			b.settle(nil)
			b.firstDone()
			setUp(false)
			if b.ctx.Err() != nil {
				return
			}
			delay = min(max(delay*8/5, backoffBase), backoffMax)
			delay += time.Duration(rand.Int64N(int64(delay) / 5))
			continue
		}
		b.cur.Store(c)
		b.settle(c)
		b.firstDone()
		setUp(true)
		if b.onConnect != nil {
			go b.onConnect()
		}
		b.log.Info("backend connected", "address", b.addr)
		since := time.Now()
		select {
		case <-b.ctx.Done():
			b.cur.CompareAndSwap(c, nil)
			c.close(status.Error(codes.Unavailable, "vig is shutting down"))
			<-c.readerDone
			b.settle(nil)
			setUp(false)
			return
		case <-c.unusable:
		}
		// The backoff is kept across a connection that ends soon: a backend
		// that accepts and then sends GOAWAY (or resets) at once is not
		// redialled in a loop.
		if time.Since(since) >= stableAfter {
			delay = 0
		}
		next := min(max(delay*8/5, backoffBase), backoffMax)
		select {
		case <-c.readerDone:
			b.cur.CompareAndSwap(c, nil)
			b.log.Warn("backend connection lost", "address", b.addr, "err", c.err())
			setUp(false)
			delay = next
		default: // GOAWAY: the old connection drains while a new one is dialled
			b.mu.Lock()
			b.connecting = true
			b.mu.Unlock()
			b.cur.CompareAndSwap(c, nil)
			if delay > 0 || time.Since(since) < stableAfter {
				delay = next
			}
		}
		if delay > 0 {
			delay += time.Duration(rand.Int64N(int64(delay)/5 + 1))
		}
	}
}

// connect dials and opens the HTTP/2 session: preface and settings sent, the
// backend's first SETTINGS received.
func (b *h2Backend) connect() (*bconn, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	nc, err := b.dial(ctx, b.addr)
	if err != nil {
		return nil, err
	}
	w, err := newH2Writer(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &bconn{b: b, seq: b.seq.Add(1), nc: nc, w: w, r: h2.NewReader(connReader(nc), b.rbuf), streams: map[uint32]*bstream{}, nextID: 1,
		budget: h2.NewBudget(b.maxMsg), unusable: make(chan struct{}), readerDone: make(chan struct{}), ready: make(chan error, 1)}
	w.EachStream = func(f func(*h2.SendState)) {
		for _, bs := range c.streams {
			f(&bs.send)
		}
	}
	c.budget.Reclaim = c.reclaim
	// The preface and SETTINGS are queued before the reader can run: the
	// backend sends its SETTINGS at once, and the reader's ACK must follow the
	// preface on the wire (a backend that read the ACK first takes it for a
	// bogus preface and resets the connection).
	w.Lock()
	w.Raw([]byte(h2.ClientPreface))
	w.QueueSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: b.window},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h2.MaxHeaderList})
	w.QueueWindowUpdate(0, b.window-h2.InitialWindow)
	w.Unlock()
	w.Lock()
	w.Flush()
	w.Unlock()
	b.conns.Store(c.seq, c) // until its reader ends (read)
	go c.read()
	select {
	case err := <-c.ready:
		if err != nil {
			c.close(err)
			<-c.readerDone
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.close(ctx.Err())
		<-c.readerDone
		return nil, ctx.Err()
	}
}

// bconn is one connection to the backend.
type bconn struct {
	b   *h2Backend
	seq uint32 // its key in b.conns
	nc  net.Conn
	w   *h2.Writer
	r   *h2.Reader

	// Guarded by w.mu.
	streams map[uint32]*bstream
	nextID  uint32
	goAway  bool
	failErr error

	// Reader goroutine only.
	settled  bool
	budget   h2.Budget
	partials h2.Partials // assemblers that may hold memory (h2.Budget.Reclaim)

	unusable   chan struct{} // closed once no new call may start here
	unusableMu sync.Once
	readerDone chan struct{}
	ready      chan error
}

// bstream is one RPC on the backend connection: an inference call, a relayed RPC,
// or one of vig's own unary calls.
type bstream struct {
	c     *bconn
	id    uint32
	send  h2.SendState // guarded by c.w.mu
	call  *Call
	relay relayClient // a relayed RPC's client
	unary chan unaryResult

	// Reader goroutine only.
	asm    h2.Assembler
	gotHdr bool
	resp   mem.BufferSlice
	recv   h2.RecvWindow
}

type unaryResult struct {
	resp []byte
	err  error
}

func (c *bconn) err() error {
	c.w.Lock()
	defer c.w.Unlock()
	if c.failErr != nil {
		return c.failErr
	}
	return c.w.Err()
}

func (c *bconn) markUnusable() { c.unusableMu.Do(func() { close(c.unusable) }) }

var errBackendDown = status.Error(codes.Unavailable, "backend not connected")

func (b *h2Backend) firstDone() {
	select {
	case <-b.first:
	default:
		close(b.first)
	}
}

// Start implements Backend.
func (b *h2Backend) Start(call *Call) {
	c := b.cur.Load()
	if c == nil {
		b.mu.Lock()
		if b.connecting {
			b.parked = append(b.parked, call)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		call.Finish(nil, errBackendDown)
		return
	}
	msg, err := call.Message()
	if err != nil {
		call.Finish(nil, err)
		return
	}
	if b.gzip {
		if msg, err = gzipMessage(msg); err != nil {
			call.Finish(nil, status.Errorf(codes.Internal, "compressing the request: %v", err))
			return
		}
	} else {
		msg.Ref() // the Call keeps its own references (its header views them)
	}
	// The stream is the call's (for Abort) from the moment it is registered.
	bs, err := c.open(methodInfer, call.Meta, call.Deadline, func(bs *bstream) { bs.call = call; call.run.Store(uint64(c.seq)<<32 | uint64(bs.id)) })
	if err != nil {
		msg.Free()
		call.Finish(nil, err)
		return
	}
	c.w.Lock()
	if c.streams[bs.id] != bs { // finished meanwhile (connection lost, aborted): call is not ours
		c.w.Unlock()
		msg.Free()
		return
	}
	// vig may have given up on the call before its stream was stored (expiry.go:
	// the mark is set before Abort looks for the stream).
	expired := call.expired.Load()
	if !expired {
		c.w.QueueMsg(&bs.send, b.gzip, msg)
		c.w.Finish(&bs.send, nil)
		c.w.Flush()
	}
	c.w.Unlock()
	if expired {
		msg.Free()
		c.abort(bs, http2.ErrCodeCancel)
	}
}

// Abort implements Backend: the client left; the backend stream is reset and the
// call finished CANCELLED.
func (b *h2Backend) Abort(call *Call) {
	run := call.run.Load()
	if run == 0 {
		return
	}
	v, ok := b.conns.Load(uint32(run >> 32))
	if !ok {
		return // its connection has ended, and failed the call
	}
	c := v.(*bconn)
	c.w.Lock()
	bs := c.streams[uint32(run)]
	c.w.Unlock()
	if bs != nil && bs.call == call {
		c.abort(bs, http2.ErrCodeCancel)
	}
}

// open starts a stream: HEADERS for method with the client's metadata. init
// attaches the stream's owner before any answer can arrive.
func (c *bconn) open(method string, meta []string, deadline int64, init func(*bstream)) (*bstream, error) {
	c.w.Lock()
	defer c.w.Unlock()
	if c.goAway || c.w.Err() != nil || c.failErr != nil {
		return nil, errBackendDown
	}
	if max := c.w.PeerMaxStreams(); uint32(len(c.streams)) >= max { // its SETTINGS_MAX_CONCURRENT_STREAMS (§5.1.2)
		return nil, status.Errorf(codes.Unavailable, "backend allows %d concurrent streams and all are in use", max)
	}
	if c.nextID >= 1<<31-1 {
		c.goAway = true
		c.markUnusable()
		return nil, errBackendDown
	}
	req := reqHeaders(method, c.b.addr)
	if c.b.gzip && method == methodInfer {
		req = append(req, hpack.HeaderField{Name: "grpc-encoding", Value: "gzip"}, hpack.HeaderField{Name: "grpc-accept-encoding", Value: "gzip"})
	}
	if deadline != 0 {
		req = append(req, hpack.HeaderField{Name: "grpc-timeout", Value: formatTimeout(time.Duration(deadline - c.b.clock()))})
	}
	// The backend's SETTINGS_MAX_HEADER_LIST_SIZE (§6.5.2, counted as §6.5.2
	// says): a request above it is refused here, as grpc-go's client does,
	// rather than sent to be reset.
	size := 0
	for _, f := range req {
		size += len(f.Name) + len(f.Value) + 32
	}
	for _, m := range meta {
		size += len(m) + 16
	}
	if uint32(size) > c.w.PeerMaxHeaderList() {
		return nil, status.Errorf(codes.Internal, "request headers of %d bytes exceed the backend's SETTINGS_MAX_HEADER_LIST_SIZE of %d: send less metadata", size, c.w.PeerMaxHeaderList())
	}
	bs := &bstream{c: c, id: c.nextID, recv: h2.NewRecvWindow(c.b.window)}
	c.nextID += 2
	bs.send.Init(bs.id, c.w.InitWin())
	init(bs)
	c.streams[bs.id] = bs
	c.w.Headers(bs.id, false, req, metaFields(meta))
	return bs, nil
}

func reqHeaders(method, authority string) []hpack.HeaderField {
	return []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method},
		{Name: ":authority", Value: authority},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	}
}

// sendMessage queues one message of a relayed stream (body owned).
func (c *bconn) sendMessage(bs *bstream, body mem.BufferSlice, compressed bool) {
	c.w.Lock()
	c.w.QueueMsg(&bs.send, compressed, body)
	c.w.Flush()
	c.w.Unlock()
}

// closeSend half-closes a relayed stream.
func (c *bconn) closeSend(bs *bstream) {
	c.w.Lock()
	c.w.Finish(&bs.send, nil)
	c.w.Flush()
	c.w.Unlock()
}

// abort resets a stream vig no longer wants and finishes its owner.
func (c *bconn) abort(bs *bstream, code http2.ErrCode) {
	c.w.Lock()
	if c.streams[bs.id] != bs {
		c.w.Unlock()
		return // already finished
	}
	delete(c.streams, bs.id)
	c.w.Forget(&bs.send)
	c.w.Reset(&bs.send, code)
	c.drainedLocked()
	c.w.Flush()
	c.w.Unlock()
	bs.finish(nil, nil, nil, status.Error(codes.Canceled, "cancelled by the client"))
}

// finish delivers a stream's outcome to its owner, once, after it has left the
// stream table.
func (bs *bstream) finish(resp mem.BufferSlice, hdr, trail []hpack.HeaderField, err error) {
	switch {
	case bs.call != nil:
		call := bs.call
		if hdr != nil {
			call.RespMeta = appendMeta(call.RespMeta[:0], hdr)
		}
		call.TrailMeta = appendMeta(call.TrailMeta[:0], trail)
		if err == nil && resp == nil {
			err = status.Error(codes.Internal, "backend answered ModelInfer without a message")
		}
		if err != nil {
			resp.Free()
			resp = nil
		}
		call.Finish(resp, err)
	case bs.relay != nil:
		bs.relay.relayEnd(trail, err)
	case bs.unary != nil:
		var b []byte
		if err == nil {
			b = resp.Materialize()
		}
		resp.Free()
		bs.unary <- unaryResult{b, err}
	}
}

// appendMeta keeps the metadata of a response's header fields.
func appendMeta(dst []string, fields []hpack.HeaderField) []string {
	for _, f := range fields {
		if !reservedHeader(f.Name) {
			dst = append(dst, f.Name, f.Value)
		}
	}
	return dst
}

// read is the connection's reader goroutine.
func (c *bconn) read() {
	defer close(c.readerDone)
	defer c.b.conns.Delete(c.seq)
	err := h2.FrameLoop(c.r, c.w, "the backend", c.b.window, (*backendStreams)(c))
	if !c.settled {
		c.ready <- err
	}
	var ce h2.ConnError
	if errors.As(err, &ce) {
		// The backend broke the protocol: it is told why (RFC 9113 §5.4.1)
		// before the connection is closed and redialled.
		c.w.GoAway(0, ce.Code, ce.Msg)
	}
	c.close(err)
}

// backendStreams is the backend leg's stream table as h2.FrameLoop sees it: the
// frames that concern the streams vig opened, each on the connection's reader
// goroutine.
type backendStreams bconn

// Idle: a stream vig never opened; a frame on it is a connection error
// PROTOCOL_ERROR (§5.1 idle).
func (t *backendStreams) Idle(id uint32) bool {
	st, _ := (*bconn)(t).state(id)
	return st == h2.StateIdle
}

func (t *backendStreams) Headers(h h2.FrameHeader) error     { return (*bconn)(t).headersFrame(h) }
func (t *backendStreams) Data(h h2.FrameHeader, n int) error { return (*bconn)(t).data(h, n) }
func (t *backendStreams) Reset(id uint32, code http2.ErrCode) error {
	(*bconn)(t).reset(id, code)
	return nil
}

// SendState is called with the writer's lock held (it guards the table).
func (t *backendStreams) SendState(id uint32) *h2.SendState {
	if bs := t.streams[id]; bs != nil {
		return &bs.send
	}
	return nil
}

// StreamError: the backend's fault stays with that stream's call.
func (t *backendStreams) StreamError(id uint32, code http2.ErrCode, why string) {
	(*bconn)(t).streamError(id, code, status.Error(codes.Internal, "backend sent "+why))
}

func (t *backendStreams) GoAway(last uint32, code http2.ErrCode, debug []byte) error {
	return (*bconn)(t).wentAway(last, code, debug)
}

// Settings: the backend's first SETTINGS is what connect waits for.
func (t *backendStreams) Settings() {
	if !t.settled {
		t.settled = true
		t.ready <- nil
	}
}

func (t *backendStreams) PingAck([8]byte) {} // vig sends the backend no PING

// state is stream id's state as the backend's frames find it (RFC 9113 §5.1),
// and the stream while it is in the table. vig opens odd streams in order; a
// stream leaves the table when the backend ends it (END_STREAM or RST_STREAM),
// so half-closed (remote) is never seen here. Reader goroutine.
func (c *bconn) state(id uint32) (h2.StreamState, *bstream) {
	c.w.Lock()
	defer c.w.Unlock()
	if id%2 == 0 || id >= c.nextID {
		return h2.StateIdle, nil
	}
	bs := c.streams[id]
	switch {
	case bs == nil:
		return h2.StateClosed, nil
	case bs.send.Closed:
		return h2.StateHalfClosedLocal, bs // the request is sent whole (or vig stopped sending)
	}
	return h2.StateOpen, bs
}

// take removes a stream that ends now; nil if it had ended already.
func (c *bconn) take(id uint32) *bstream {
	c.w.Lock()
	bs := c.streams[id]
	if bs != nil {
		delete(c.streams, id)
		c.w.Forget(&bs.send)
		if !bs.send.Closed {
			// The answer is complete but vig's side is not (request data not
			// yet sent, a relay still streaming): the stream is reset rather
			// than left open on the backend.
			c.w.Reset(&bs.send, http2.ErrCodeCancel)
			c.w.Flush()
		}
		c.w.Drop(&bs.send)
		bs.send.Closed = true
		c.drainedLocked()
	}
	c.w.Unlock()
	return bs
}

// streamError resets stream id with code (RFC 9113 §5.4.2) and fails its call
// with err: the backend's fault stays with that call, the connection goes on.
// Reader goroutine.
func (c *bconn) streamError(id uint32, code http2.ErrCode, err error) {
	c.w.Lock()
	bs := c.streams[id]
	if bs != nil {
		delete(c.streams, id)
		c.w.Forget(&bs.send)
		c.w.Drop(&bs.send)
		bs.send.Closed, bs.send.Rst = true, true
		c.drainedLocked()
	}
	c.w.QueueRST(id, code)
	c.w.Flush()
	c.w.Unlock()
	if bs != nil {
		bs.asm.Reset(&c.budget)
		resp := bs.resp
		bs.resp = nil
		resp.Free()
		bs.finish(nil, nil, nil, err)
	}
}

// drainedLocked closes a connection the backend sent GOAWAY on once its last
// stream has ended. Called with w.mu held.
func (c *bconn) drainedLocked() {
	if c.goAway && len(c.streams) == 0 {
		c.w.CloseWhenFlushed()
	}
}

func (c *bconn) headersFrame(h h2.FrameHeader) error {
	err := c.r.HeaderBlock(h)
	if err != nil && err != h2.ErrHeaderListTooBig {
		return err
	}
	st, bs := c.state(h.Stream)
	switch {
	case h.Stream == 0 || st == h2.StateIdle:
		return h2.ProtocolError("backend sent HEADERS on stream %d, which vig never opened", h.Stream) // §5.1 idle, §8.4
	case st == h2.StateClosed:
		return nil // vig reset it (or it failed): frames in flight are ignored (§5.1 closed)
	}
	if err == h2.ErrHeaderListTooBig {
		if bs = c.take(h.Stream); bs != nil {
			c.w.Lock()
			c.w.QueueRST(h.Stream, http2.ErrCodeCancel)
			c.w.Flush()
			c.w.Unlock()
			bs.asm.Reset(&c.budget)
			bs.finish(nil, nil, nil, status.Errorf(codes.Internal, "backend sent a header list larger than %d bytes", h2.MaxHeaderList))
		}
		return nil
	}
	fields := c.r.Fields
	end := h.Has(http2.FlagHeadersEndStream)
	if !bs.gotHdr {
		bs.gotHdr = true
		if err := httpStatus(fields); err != nil && !end {
			if bs = c.take(h.Stream); bs != nil {
				bs.finish(nil, nil, nil, err)
			}
			return nil
		}
		if !end {
			if bs.relay != nil {
				bs.relay.relayHeaders(fields)
			} else if bs.call != nil {
				// Under the lock: an Abort on another goroutine may finish the
				// call, and its Replier reads RespMeta.
				c.w.Lock()
				if c.streams[h.Stream] == bs {
					bs.call.RespMeta = appendMeta(bs.call.RespMeta[:0], fields)
				}
				c.w.Unlock()
			}
			return nil
		}
		// A trailers-only response.
	}
	if !end {
		c.streamError(h.Stream, http2.ErrCodeProtocol, status.Error(codes.Internal, "backend sent a second header block without END_STREAM (RFC 9113 §8.1)")) // malformed response
		return nil
	}
	if bs = c.take(h.Stream); bs == nil {
		return nil
	}
	rpcErr, ok := statusFromTrailers(fields)
	if !ok {
		rpcErr = status.Error(codes.Internal, "backend ended the stream without grpc-status")
	}
	resp := bs.resp
	bs.resp = nil
	bs.finish(resp, nil, fields, rpcErr)
	return nil
}

// httpStatus checks a response's :status (gRPC maps other HTTP statuses to codes).
func httpStatus(fields []hpack.HeaderField) error {
	for _, f := range fields {
		if f.Name != ":status" {
			continue
		}
		if f.Value == "200" {
			return nil
		}
		code := codes.Unknown
		switch f.Value {
		case "400":
			code = codes.Internal
		case "401":
			code = codes.Unauthenticated
		case "403":
			code = codes.PermissionDenied
		case "404":
			code = codes.Unimplemented
		case "429", "502", "503", "504":
			code = codes.Unavailable
		}
		return status.Errorf(code, "backend answered HTTP status %s", f.Value)
	}
	return status.Error(codes.Internal, "backend response without :status")
}

func (c *bconn) data(h h2.FrameHeader, n int) error {
	_, bs := c.state(h.Stream) // not idle: h2.FrameLoop checked
	var err error
	// Closed (vig reset it, or it failed): bs is nil and the frame is dropped,
	// counted for the connection's window (§5.1 closed, §6.9).
	if bs != nil && !bs.recv.Fits(h.Length) {
		// More than the stream's window: a stream error FLOW_CONTROL_ERROR
		// (§6.9.1); the frame still counts for the connection's window.
		c.streamError(h.Stream, http2.ErrCodeFlowControl, status.Error(codes.Internal, "backend sent more than the stream's flow-control window"))
		bs = nil
	}
	if bs == nil {
		err = c.r.Discard(n)
	} else {
		bs.recv.Take(h.Length)
		var left int
		left, err = bs.asm.Read(c.r.Br, n, c.b.maxMsg, &c.budget, func(msg mem.BufferSlice, compressed bool) error {
			if bs.relay != nil {
				bs.relay.relayMessage(msg, compressed)
				return nil
			}
			if compressed {
				if !c.b.gzip {
					msg.Free()
					return errCompressed
				}
				var err error
				if msg, err = gunzipMessage(msg, c.b.maxMsg); err != nil {
					return errCompressed
				}
			}
			if bs.resp != nil {
				bs.resp.Free()
			}
			bs.resp = msg
			return nil
		})
		// A type switch, not errors.As: its target would escape, an allocation
		// per DATA frame.
		msg := ""
		switch err.(type) {
		case h2.ErrMsgTooLarge, h2.ErrBudget:
			msg = "backend answer: " + err.Error()
		default:
			if err == errCompressed {
				msg = "backend answer: compressed, and vig asked for none"
			}
		}
		if msg != "" {
			if t := c.take(h.Stream); t != nil {
				c.w.Lock()
				c.w.QueueRST(h.Stream, http2.ErrCodeCancel)
				c.w.Unlock()
				bs.asm.Reset(&c.budget)
				resp := bs.resp
				bs.resp = nil
				resp.Free()
				bs.finish(nil, nil, nil, status.Error(codes.ResourceExhausted, msg))
			}
			err = c.r.Discard(left)
		}
		if err == nil {
			bs.recv.Owe(h.Length)
		}
		c.noteAssembling(bs)
	}
	if err != nil {
		return err
	}
	c.w.Lock()
	// Every stream gets its window back, an inference answer too: one larger
	// than window_mib (but within max_message_mib) would otherwise stall the
	// backend until the call expires. What an answer holds meanwhile is bounded
	// by max_message_mib and the connection's h2.Budget.
	if bs != nil && !h.Has(http2.FlagDataEndStream) && c.streams[bs.id] == bs {
		if inc := bs.recv.Due(); inc > 0 {
			c.w.QueueWindowUpdate(bs.id, inc) // sent with the connection's (h2.FrameLoop)
		}
	}
	c.w.Unlock()
	if h.Has(http2.FlagDataEndStream) && bs != nil {
		if t := c.take(h.Stream); t != nil {
			resp := bs.resp
			bs.resp = nil
			resp.Free()
			bs.finish(nil, nil, nil, status.Error(codes.Internal, "backend ended the stream without trailers"))
		}
	}
	return nil
}

// noteAssembling remembers a stream whose answer holds memory (sconn.noteAssembling).
func (c *bconn) noteAssembling(bs *bstream) {
	if c.partials.Note(&bs.asm, bs.id) {
		c.reclaim(&bs.asm)
	}
}

// reclaim frees what the incomplete answers of ended streams hold (sconn.reclaim).
func (c *bconn) reclaim(skip *h2.Assembler) {
	c.w.Lock()
	c.partials.Sweep(skip, &c.budget, func(id uint32, a *h2.Assembler) bool {
		bs := c.streams[id]
		return bs == nil || &bs.asm != a
	})
	c.w.Unlock()
}

// reset: the backend reset stream id; its call fails with code's status.
func (c *bconn) reset(id uint32, code http2.ErrCode) {
	c.w.Lock()
	if bs := c.streams[id]; bs != nil {
		bs.send.Closed, bs.send.Rst = true, true // reset by the peer: vig sends nothing more on it
	}
	c.w.Unlock()
	bs := c.take(id)
	if bs == nil {
		return
	}
	bs.asm.Reset(&c.budget)
	resp := bs.resp
	bs.resp = nil
	resp.Free()
	bs.finish(nil, nil, nil, rstError(code))
}

func rstError(code http2.ErrCode) error {
	switch code {
	case http2.ErrCodeRefusedStream:
		return status.Error(codes.Unavailable, "backend refused the stream")
	case http2.ErrCodeCancel:
		return status.Error(codes.Canceled, "backend cancelled the stream")
	case http2.ErrCodeEnhanceYourCalm:
		return status.Error(codes.ResourceExhausted, "backend: enhance your calm")
	}
	return status.Errorf(codes.Internal, "backend reset the stream: %v", code)
}

// wentAway: the backend will take no new streams. Those above its last stream id
// were not processed and fail UNAVAILABLE; the rest finish here while a new
// connection is dialled for new calls.
func (c *bconn) wentAway(last uint32, code http2.ErrCode, debug []byte) error {
	// New calls wait for the next connection from now on (run dials it).
	b := c.b
	b.mu.Lock()
	b.connecting = true
	b.mu.Unlock()
	b.cur.CompareAndSwap(c, nil)
	c.w.Lock()
	c.goAway = true
	var refused []*bstream
	for id, bs := range c.streams {
		if id > last {
			delete(c.streams, id)
			c.w.Forget(&bs.send)
			c.w.Drop(&bs.send)
			bs.send.Closed = true
			refused = append(refused, bs)
		}
	}
	idle := len(c.streams) == 0
	c.w.Unlock()
	c.markUnusable()
	if code != http2.ErrCodeNo {
		b.log.Warn("backend sent GOAWAY", "address", b.addr, "code", code.String(), "debug", string(debug[:min(len(debug), 128)]))
	}
	for _, bs := range refused {
		bs.asm.Reset(&c.budget)
		resp := bs.resp
		bs.resp = nil
		resp.Free()
		if bs.call != nil && !bs.call.expired.Load() {
			// The backend did not process it (RFC 9113 §6.8): it is started
			// again on the next connection.
			b.mu.Lock()
			if b.connecting {
				b.parked = append(b.parked, bs.call)
				b.mu.Unlock()
				continue
			}
			b.mu.Unlock()
		}
		bs.finish(nil, nil, nil, status.Error(codes.Unavailable, "backend is going away (GOAWAY) and had not processed the call: retry"))
	}
	if idle {
		return h2.ErrConnClosed
	}
	return nil
}

// close ends the connection and fails every stream on it.
func (c *bconn) close(err error) {
	if err == nil || errors.Is(err, h2.ErrConnClosed) {
		err = h2.ErrConnClosed
	}
	c.w.Lock()
	if c.failErr == nil {
		c.failErr = err
	}
	streams := make([]*bstream, 0, len(c.streams))
	for id, bs := range c.streams {
		delete(c.streams, id)
		c.w.Forget(&bs.send)
		c.w.Drop(&bs.send)
		bs.send.Closed = true
		streams = append(streams, bs)
	}
	c.w.Fail(h2.ErrConnClosed)
	c.w.Unlock()
	c.markUnusable()
	msg := fmt.Sprintf("backend connection lost: %v", err)
	for _, bs := range streams {
		resp := bs.resp
		bs.resp = nil
		resp.Free()
		bs.finish(nil, nil, nil, status.Error(codes.Unavailable, msg))
	}
}

// Invoke makes one unary call of vig's own (statistics, shared-memory
// registration) and returns the answer's bytes.
func (b *h2Backend) Invoke(ctx context.Context, method string, req []byte) ([]byte, error) {
	c := b.cur.Load()
	if c == nil {
		return nil, errBackendDown
	}
	var deadline int64
	if d, ok := ctx.Deadline(); ok {
		deadline = b.clock() + int64(time.Until(d))
	}
	ch := make(chan unaryResult, 1)
	bs, err := c.open(method, nil, deadline, func(bs *bstream) { bs.unary = ch })
	if err != nil {
		return nil, err
	}
	c.w.Lock()
	c.w.QueueMsg(&bs.send, false, mem.BufferSlice{mem.SliceBuffer(req)})
	c.w.Finish(&bs.send, nil)
	c.w.Flush()
	c.w.Unlock()
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-ctx.Done():
		c.abort(bs, http2.ErrCodeCancel)
		<-ch
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// relayClient is the client of a relayed RPC as the backend leg hands it the
// backend's answer (the client leg's stream, rpc.go). Each method is called on
// the backend connection's reader, with none of its locks held.
type relayClient interface {
	relayHeaders(fields []hpack.HeaderField)
	relayMessage(body mem.BufferSlice, compressed bool)
	relayEnd(trail []hpack.HeaderField, err error)
}

// openRelay opens the backend stream of a relayed RPC, whose answer goes to to.
func (b *h2Backend) openRelay(method string, meta []string, deadline int64, to relayClient) (relayTarget, error) {
	c := b.cur.Load()
	if c == nil {
		return nil, errBackendDown
	}
	bs, err := c.open(method, meta, deadline, func(bs *bstream) { bs.relay = to })
	if err != nil {
		return nil, err
	}
	return bs, nil
}

// A backend stream is a relayed RPC's target (relayTarget): the client leg
// forwards the request to it.
func (bs *bstream) forward(body mem.BufferSlice, compressed bool) {
	bs.c.sendMessage(bs, body, compressed)
}
func (bs *bstream) closeSend() { bs.c.closeSend(bs) }
func (bs *bstream) cancel()    { bs.c.abort(bs, http2.ErrCodeCancel) }
