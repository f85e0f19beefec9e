package gateway

import (
	"context"
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
	"github.com/vig-edge/vig/wire"
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
			c.cc.Close(status.Error(codes.Unavailable, "vig is shutting down"))
			<-c.readerDone
			b.settle(nil)
			setUp(false)
			return
		case <-c.unusable:
		}
		if c.lost.Load() {
			<-c.readerDone // a lost connection, not a GOAWAY: its reader is about to end
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
	c := &bconn{b: b, seq: b.seq.Add(1), unusable: make(chan struct{}), readerDone: make(chan struct{}), ready: make(chan error, 1)}
	c.cc = h2.NewClientConn(w, h2.NewReader(connReader(nc), b.rbuf), h2.ClientConfig{
		Peer: "backend", Window: b.window, MaxMsg: b.maxMsg,
		Ready:  func(err error) { c.ready <- err },
		GoAway: c.wentAway,
	})
	b.conns.Store(c.seq, c) // until its reader ends (read)
	go c.read()
	select {
	case err := <-c.ready:
		if err != nil {
			c.cc.Close(err)
			<-c.readerDone
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.cc.Close(ctx.Err())
		<-c.readerDone
		return nil, ctx.Err()
	}
}

// bconn is one connection to the backend: its HTTP/2 client role (h2.ClientConn
// keeps the streams) and what the connection manager watches.
type bconn struct {
	b   *h2Backend
	seq uint32 // its key in b.conns
	cc  *h2.ClientConn

	unusable   chan struct{} // closed once no new call may start here
	unusableMu sync.Once
	lost       atomic.Bool // set before unusable closes when the reader ended (not a GOAWAY)
	readerDone chan struct{}
	ready      chan error
}

// bstream is one RPC on the backend connection: an inference call, a relayed RPC,
// or one of vig's own unary calls. It is its h2 stream's handler
// (h2.ClientHandler).
type bstream struct {
	h2.ClientStream
	c     *bconn
	call  *Call
	relay relayClient // a relayed RPC's client
	unary chan unaryResult

	// A call's response metadata is set on the reader goroutine while an
	// Abort may finish the call on another (its Replier reads RespMeta): mu
	// orders the two, done says the call was finished.
	mu   sync.Mutex
	done bool

	resp mem.BufferSlice // reader goroutine only: the answer so far
}

type unaryResult struct {
	resp []byte
	err  error
}

func (c *bconn) err() error { return c.cc.Err() }

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
	if call.body != nil {
		b.startArriving(c, call)
		return
	}
	msg, err := call.Message()
	if err != nil {
		call.Finish(nil, err)
		return
	}
	owned := false // msg holds references of its own (else the Call's)
	if call.rename != nil {
		if msg, err = wire.RenameModel(nil, msg, call.rename); err != nil {
			call.Finish(nil, status.Errorf(codes.Internal, "renaming the request for its variant: %v", err))
			return
		}
		owned = true
	}
	msg = call.gw.withHandOff(call, msg)
	if b.gzip {
		zipped, err := gzipMessage(msg)
		if owned {
			msg.Free()
		}
		if msg = zipped; err != nil {
			call.Finish(nil, status.Errorf(codes.Internal, "compressing the request: %v", err))
			return
		}
	} else if !owned {
		msg.Ref() // the Call keeps its own references (its header views them)
	}
	bs, ok := c.openCall(call, msg)
	if !ok {
		return
	}
	c.cc.Send(&bs.ClientStream, b.gzip, msg, true) // false: finished meanwhile (connection lost, aborted), msg freed
}

// openCall opens call's backend stream, the call's (for Abort) from the
// moment it is registered. When it cannot be opened, or vig gave up on the
// call before its stream was stored (expiry.go: the mark is set before Abort
// looks for the stream), the call is finished, msg freed, and ok false.
func (c *bconn) openCall(call *Call, msg mem.BufferSlice) (bs *bstream, ok bool) {
	bs = &bstream{c: c, call: call}
	if err := c.open(bs, methodInfer, call.Meta, call.Deadline, func(id uint32) { call.run.Store(uint64(c.seq)<<32 | uint64(id)) }); err != nil {
		msg.Free()
		call.Finish(nil, err)
		return nil, false
	}
	if call.expired.Load() {
		msg.Free()
		c.abort(bs, http2.ErrCodeCancel)
		return nil, false
	}
	return bs, true
}

// startArriving starts a call whose request is still arriving
// (cutthrough.go): the message's start with its final length, then the
// bytes as they come.
func (b *h2Backend) startArriving(c *bconn, call *Call) {
	// What the stream needs of the call is taken first: once the stream is
	// registered, the call may be finished (client gone, expired, connection
	// lost) and recycled on another goroutine.
	p, head := call.body, call.Msg
	extra := call.gw.handParams(call) // vig's hand-off follows the last byte
	head.Ref()                        // the Call keeps its own references (its header views them)
	bs, ok := c.openCall(call, head)
	if !ok {
		return
	}
	// The bytes that arrived go with the head, in one write; those that
	// arrive meanwhile wait for attach.
	arrived, end, ok := p.take()
	if !ok {
		head.Free()
		c.abort(bs, http2.ErrCodeCancel) // the request will not be complete: its call is being cancelled
		return
	}
	if end && extra != nil {
		arrived = append(arrived, mem.SliceBuffer(extra))
	}
	if !c.cc.SendStart(&bs.ClientStream, p.size+len(extra), head, arrived, end) || end {
		return // finished meanwhile, or sent whole
	}
	if !p.attach(func(m mem.BufferSlice, end bool) bool {
		if end && extra != nil {
			return c.cc.SendMore(&bs.ClientStream, m, false) && c.cc.SendMore(&bs.ClientStream, mem.BufferSlice{mem.SliceBuffer(extra)}, true)
		}
		return c.cc.SendMore(&bs.ClientStream, m, end)
	}) {
		c.abort(bs, http2.ErrCodeCancel)
	}
}

// Abort implements Backend: the client left; the backend stream is reset and the
// call finished CANCELLED.
func (b *h2Backend) Abort(call *Call) {
	// A call parked while a connection is dialled (or parked again after a
	// GOAWAY left it unprocessed) is finished here and now.
	b.mu.Lock()
	for i, p := range b.parked {
		if p == call {
			b.parked = append(b.parked[:i], b.parked[i+1:]...)
			b.mu.Unlock()
			call.Finish(nil, status.Error(codes.Canceled, "cancelled by the client"))
			return
		}
	}
	b.mu.Unlock()
	run := call.run.Load()
	if run == 0 {
		return
	}
	v, ok := b.conns.Load(uint32(run >> 32))
	if !ok {
		return // its connection has ended, and failed the call
	}
	c := v.(*bconn)
	if bs, _ := c.cc.Lookup(uint32(run)).(*bstream); bs != nil && bs.call == call {
		c.abort(bs, http2.ErrCodeCancel)
	}
}

// open starts bs's stream: HEADERS for method with the client's metadata.
// opened records the stream's id before any answer can arrive (under h2's
// lock: it does nothing else).
func (c *bconn) open(bs *bstream, method string, meta []string, deadline int64, opened func(id uint32)) error {
	req := reqHeaders(method, c.b.addr)
	if c.b.gzip && method == methodInfer {
		req = append(req, hpack.HeaderField{Name: "grpc-encoding", Value: "gzip"}, hpack.HeaderField{Name: "grpc-accept-encoding", Value: "gzip"})
	}
	if deadline != 0 {
		req = append(req, hpack.HeaderField{Name: "grpc-timeout", Value: formatTimeout(time.Duration(deadline - c.b.clock()))})
	}
	err := c.cc.Open(&bs.ClientStream, bs, opened, req, metaFields(meta))
	if err == h2.ErrConnClosed {
		if c.cc.IDsExhausted() {
			c.markUnusable() // run dials a new connection
		}
		return errBackendDown
	}
	return err
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

// abort resets a stream vig no longer wants and finishes its owner.
func (c *bconn) abort(bs *bstream, code http2.ErrCode) {
	if c.cc.Cancel(&bs.ClientStream, code) {
		bs.finish(nil, nil, status.Error(codes.Canceled, "cancelled by the client"))
	}
}

// Headers implements h2.ClientHandler: the answer's header metadata.
func (bs *bstream) Headers(fields []hpack.HeaderField) {
	switch {
	case bs.relay != nil:
		bs.relay.relayHeaders(fields)
	case bs.call != nil:
		bs.mu.Lock()
		if !bs.done {
			bs.call.RespMeta = appendMeta(bs.call.RespMeta[:0], fields)
		}
		bs.mu.Unlock()
	}
}

// Message implements h2.ClientHandler: a relayed message goes to the client,
// an answer is kept (uncompressed) until the trailers.
func (bs *bstream) Message(msg mem.BufferSlice, compressed bool) error {
	if bs.relay != nil {
		bs.relay.relayMessage(msg, compressed)
		return nil
	}
	b := bs.c.b
	if compressed {
		if !b.gzip {
			msg.Free()
			return errCompressedAnswer
		}
		var err error
		if msg, err = gunzipMessage(msg, b.maxMsg); err != nil {
			return errCompressedAnswer
		}
	}
	if bs.resp != nil {
		bs.resp.Free()
	}
	bs.resp = msg
	return nil
}

var errCompressedAnswer = status.Error(codes.ResourceExhausted, "backend answer: compressed, and vig asked for none")

// End implements h2.ClientHandler: the stream's outcome goes to its owner.
func (bs *bstream) End(trail []hpack.HeaderField, err error) {
	resp := bs.resp
	bs.resp = nil
	if u, ok := err.(h2.UnprocessedError); ok && bs.call != nil && !bs.call.expired.Load() && bs.call.body == nil {
		// The backend did not process it (RFC 9113 §6.8): it is started
		// again on the next connection (not a request forwarded as it
		// arrived: the bytes sent are gone, and it is answered UNAVAILABLE).
		resp.Free()
		b := bs.c.b
		b.mu.Lock()
		if b.connecting {
			b.parked = append(b.parked, bs.call)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		err = u
	}
	if err != nil {
		resp.Free()
		resp = nil
	}
	bs.finish(resp, trail, err)
}

// finish delivers a stream's outcome to its owner, once, after it has left the
// stream table.
func (bs *bstream) finish(resp mem.BufferSlice, trail []hpack.HeaderField, err error) {
	switch {
	case bs.call != nil:
		call := bs.call
		bs.mu.Lock()
		bs.done = true
		bs.mu.Unlock()
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
	c.cc.Run()
	c.lost.Store(true)
	c.markUnusable()
}

// wentAway: the backend will take no new streams (h2.ClientConfig.GoAway). New
// calls wait for the next connection from now on (run dials it); those above
// its last stream id were not processed and are started there (End).
func (c *bconn) wentAway(last uint32, code http2.ErrCode, debug []byte) {
	b := c.b
	b.mu.Lock()
	b.connecting = true
	b.mu.Unlock()
	b.cur.CompareAndSwap(c, nil)
	c.markUnusable()
	if code != http2.ErrCodeNo {
		b.log.Warn("backend sent GOAWAY", "address", b.addr, "code", code.String(), "debug", string(debug[:min(len(debug), 128)]))
	}
}

// Invoke makes one unary call of vig's own (statistics, shared-memory
// registration) and returns the answer's bytes.
func (b *h2Backend) Invoke(ctx context.Context, method string, req []byte) ([]byte, error) {
	return b.invoke(ctx, method, nil, req)
}

// invoke is Invoke with the request metadata meta (name, value pairs).
func (b *h2Backend) invoke(ctx context.Context, method string, meta []string, req []byte) ([]byte, error) {
	c := b.cur.Load()
	if c == nil {
		return nil, errBackendDown
	}
	var deadline int64
	if d, ok := ctx.Deadline(); ok {
		deadline = b.clock() + int64(time.Until(d))
	}
	ch := make(chan unaryResult, 1)
	bs := &bstream{c: c, unary: ch}
	if err := c.open(bs, method, meta, deadline, nil); err != nil {
		return nil, err
	}
	c.cc.Send(&bs.ClientStream, false, mem.BufferSlice{mem.SliceBuffer(req)}, true)
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
	bs := &bstream{c: c, relay: to}
	if err := c.open(bs, method, meta, deadline, nil); err != nil {
		return nil, err
	}
	return bs, nil
}

// A backend stream is a relayed RPC's target (relayTarget): the client leg
// forwards the request to it.
func (bs *bstream) forward(body mem.BufferSlice, compressed bool) {
	bs.c.cc.Send(&bs.ClientStream, compressed, body, false)
}
func (bs *bstream) closeSend() { bs.c.cc.CloseSend(&bs.ClientStream) }
func (bs *bstream) cancel()    { bs.c.abort(bs, http2.ErrCodeCancel) }
