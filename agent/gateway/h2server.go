package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/h2"
	"github.com/vig-edge/vig/wire"
)

// The client leg: one sconn per accepted connection, served by one goroutine that
// reads its frames. A request is handled on that goroutine as soon as its message
// is complete; its answer is written by whichever goroutine has it (normally the
// backend connection's reader). Nothing else runs per connection or per stream.

// rpcKind says how vig treats an RPC.
type rpcKind uint8

const (
	kindRelay       rpcKind = iota // passed through to the backend, message by message
	kindInfer                      // ModelInfer: governed
	kindStreamInfer                // ModelStreamInfer: each message governed
	kindLocal                      // answered by vig itself (health; liveness for a ring backend)
)

const maxConcurrentStreams = 1000

// After a connection error vig reads (and drops) what the client still sends for
// a moment, so that its GOAWAY is read rather than lost in a reset.
const (
	lingerTime  = time.Second
	lingerBytes = 4 << 20
)

// sconn is one client connection.
type sconn struct {
	g      *Gateway
	nc     net.Conn
	w      *h2.Writer
	r      *h2.Reader
	uid    uint32 // the peer's uid (Unix sockets), for shared-memory regions
	hasUID bool

	// Guarded by w.mu.
	streams map[uint32]*sstream
	maxID   uint32 // highest stream opened
	goAway  bool   // the final GOAWAY was sent: no new streams
	closed  h2.ClosedIDs

	// Reader goroutine only.
	lastID   uint32
	budget   h2.Budget   // memory its incomplete messages may still take
	partials h2.Partials // assemblers that may hold memory (h2.Budget.Reclaim)
	skips    [][2]uint32 // stream ids the client skipped (closed, never opened)
}

// sstream is one RPC on a client connection.
type sstream struct {
	c      *sconn
	id     uint32
	kind   rpcKind
	method string // full path
	m      *metrics.Method

	// Reader goroutine only.
	asm      h2.Assembler
	recv     h2.RecvWindow
	gotMsg   bool
	meta     []string
	enc      [2]string // grpc-encoding, grpc-accept-encoding (relayed RPCs carry them on)
	deadline int64
	half     bool  // the client half-closed
	clen     int64 // the request's content-length (-1: none), then what DATA may still bring

	// Guarded by c.w.mu.
	send     h2.SendState
	hdrSent  bool
	pending  int                  // ModelStreamInfer: requests not yet answered
	halfSeen bool                 // the client half-closed (copy for repliers)
	remote   bool                 // the client's side is closed (END_STREAM or RST_STREAM received)
	done     bool                 // answered (trailers or RST sent)
	call     *Call                // ModelInfer: the request's call while it runs
	calls    []*Call              // ModelStreamInfer: the calls not yet answered
	relay    relayTarget          // a relayed RPC's backend stream
	onOK     func()               // run when a relayed call succeeds (shared-memory mirror)
	trail    [4]hpack.HeaderField // the trailers' storage
}

func (g *Gateway) serveConn(nc net.Conn) {
	defer g.conns.Done()
	peerUID, hasUID := uint32(0), false
	if a, ok := nc.RemoteAddr().(PeerUID); ok {
		peerUID, hasUID = a.PeerUID()
	}
	// The preface is read here, with a deadline: a connection that sends nothing
	// is dropped before it costs more.
	var pre [len(h2.ClientPreface)]byte
	nc.SetReadDeadline(time.Now().Add(g.handshakeTimeout))
	if _, err := io.ReadFull(nc, pre[:]); err != nil || string(pre[:]) != h2.ClientPreface {
		if err == nil {
			// Not HTTP/2: a connection error (RFC 9113 §3.4). The GOAWAY and a
			// moment's reading let the peer see a close rather than a reset.
			nc.Write(h2.AppendGoAway(nil, 0, http2.ErrCodeProtocol, "invalid connection preface"))
			nc.SetReadDeadline(time.Now().Add(lingerTime))
			io.CopyN(io.Discard, nc, lingerBytes)
		}
		nc.Close()
		return
	}
	nc.SetReadDeadline(time.Time{})
	c, ok := g.newSconn(nc, peerUID, hasUID)
	if !ok {
		return
	}
	defer g.untrack(c)
	c.shutdown(c.serve())
}

// newSconn builds a client connection's state and tracks it.
func (g *Gateway) newSconn(nc net.Conn, peerUID uint32, hasUID bool) (*sconn, bool) {
	w, err := newH2Writer(nc)
	if err != nil {
		nc.Close()
		return nil, false
	}
	c := &sconn{g: g, nc: nc, w: w, r: h2.NewReader(connReader(nc), g.readBuf), streams: map[uint32]*sstream{}, uid: peerUID, hasUID: hasUID,
		budget: h2.NewBudget(g.maxMsg)}
	w.EachStream = func(f func(*h2.SendState)) {
		for _, s := range c.streams {
			f(&s.send)
		}
	}
	w.OnClosed = func(st *h2.SendState) {
		if s := c.streams[st.ID()]; s != nil && s.done {
			c.removeIfClosedLocked(s)
		}
	}
	c.budget.Reclaim = c.reclaim
	if !g.track(c) {
		nc.Close()
		return nil, false
	}
	return c, true
}

// noteAssembling remembers a stream whose message holds memory, so that reclaim
// finds it should the stream end before the message does. Reader goroutine.
func (c *sconn) noteAssembling(s *sstream) {
	if c.partials.Note(&s.asm, s.id) {
		c.reclaim(&s.asm)
	}
}

// reclaim frees what the incomplete messages of ended streams hold, and forgets
// the streams that hold nothing (h2.Budget). Reader goroutine.
func (c *sconn) reclaim(skip *h2.Assembler) {
	c.w.Lock()
	c.partials.Sweep(skip, &c.budget, func(id uint32, a *h2.Assembler) bool {
		s := c.streams[id]
		return s == nil || &s.asm != a || s.done
	})
	c.w.Unlock()
}

// serve runs the connection (its preface read) until it ends.
func (c *sconn) serve() error {
	c.w.Lock()
	c.w.QueueSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: maxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.g.window},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h2.MaxHeaderList})
	c.w.QueueWindowUpdate(0, c.g.connWindow-h2.InitialWindow)
	c.w.Flush()
	c.w.Unlock()
	return h2.FrameLoop(c.r, c.w, "a client", c.g.connWindow, (*serverStreams)(c))
}

// serverStreams is the client leg's stream table as h2.FrameLoop sees it: the
// frames that concern streams, each on the connection's reader goroutine. What a
// frame means in each stream state is RFC 9113 §5.1; the section of each rule is
// beside it.
type serverStreams sconn

// Idle: a client's stream above the last one it opened (§5.1 idle; §5.1.1).
func (t *serverStreams) Idle(id uint32) bool                    { return id > t.lastID }
func (t *serverStreams) Headers(h h2.FrameHeader) error         { return (*sconn)(t).headersFrame(h) }
func (t *serverStreams) Data(h h2.FrameHeader, n int) error     { return (*sconn)(t).data(h, n) }
func (t *serverStreams) Reset(id uint32, _ http2.ErrCode) error { (*sconn)(t).reset(id); return nil }

// SendState is called with the writer's lock held (it guards the table).
func (t *serverStreams) SendState(id uint32) *h2.SendState {
	if s := t.streams[id]; s != nil {
		return &s.send
	}
	return nil
}

func (t *serverStreams) StreamError(id uint32, code http2.ErrCode, _ string) {
	(*sconn)(t).streamError(id, code)
}

// GoAway: the client will open no more streams; those it has finish normally.
func (t *serverStreams) GoAway(uint32, http2.ErrCode, []byte) error { return nil }

func (t *serverStreams) Settings() {}

// PingAck: the client has read everything before vig's drain PING (drain).
func (t *serverStreams) PingAck(data [8]byte) {
	if data == drainPing {
		(*sconn)(t).finalGoAway()
	}
}

// state is stream id's state, and the stream while it is in the table. Reader
// goroutine.
func (c *sconn) state(id uint32) (h2.StreamState, *sstream) {
	if id > c.lastID {
		return h2.StateIdle, nil
	}
	s := c.stream(id)
	switch {
	case s == nil:
		return h2.StateClosed, nil
	case s.half:
		return h2.StateHalfClosedRemote, s
	case s.doneLocked():
		return h2.StateHalfClosedLocal, s
	}
	return h2.StateOpen, s
}

// stream returns the stream id of the table, answered or not. Reader goroutine.
func (c *sconn) stream(id uint32) *sstream {
	c.w.Lock()
	s := c.streams[id]
	c.w.Unlock()
	return s
}

// closedError is what a frame on a stream no longer in the table means (§5.1
// closed): nothing on a stream vig reset (frames in flight), a stream error
// STREAM_CLOSED otherwise. Reader goroutine.
func (c *sconn) closedError(id uint32) {
	c.w.Lock()
	ignore := c.closed.WasReset(id)
	c.w.Unlock()
	if !ignore {
		c.streamError(id, http2.ErrCodeStreamClosed)
	}
}

// streamError resets stream id with code (RFC 9113 §5.4.2) and ends what it had
// started. Reader goroutine.
func (c *sconn) streamError(id uint32, code http2.ErrCode) {
	c.w.Lock()
	s := c.streams[id]
	var calls []*Call
	var bs relayTarget
	if s != nil {
		s.remote = true
		calls, bs = s.takeCalls(), s.relay
		s.relay = nil
		c.w.Drop(&s.send)
		s.send.Closed = true
		c.endLocked(s, codes.Internal)
		c.removeLocked(s)
	}
	c.w.QueueRST(id, code)
	c.closed.NoteReset(id)
	c.w.Flush()
	c.w.Unlock()
	if s != nil {
		s.half = true
		s.asm.Reset(&c.budget)
		for _, call := range calls {
			c.g.Cancel(call)
			call.Release()
		}
		if bs != nil {
			bs.cancel()
		}
	}
}

// data reads a DATA frame's n bytes into its stream's message (h2.FrameLoop
// has checked the stream is not idle and does the connection's window).
func (c *sconn) data(h h2.FrameHeader, n int) error {
	st, s := c.state(h.Stream)
	if s != nil && s.clen >= 0 {
		// The DATA must add up to the content-length (§8.1.1).
		if s.clen -= int64(n); s.clen < 0 || (h.Has(http2.FlagDataEndStream) && s.clen != 0) {
			s.clen = -1
			err := c.r.Discard(n)
			c.streamError(h.Stream, http2.ErrCodeProtocol)
			return err
		}
	}
	live := st == h2.StateOpen
	var err error
	switch st {
	case h2.StateClosed:
		err = c.r.Discard(n)
		c.closedError(h.Stream)
	case h2.StateHalfClosedRemote:
		err = c.r.Discard(n)
		c.streamError(h.Stream, http2.ErrCodeStreamClosed) // §5.1 half-closed (remote)
		s = nil
	case h2.StateHalfClosedLocal:
		err = c.r.Discard(n) // vig answered already: dropped
	case h2.StateOpen:
		if !s.recv.Take(h.Length) {
			return h2.ConnError{Code: http2.ErrCodeFlowControl, Msg: "client sent more than the stream window"}
		}
		var left int
		left, err = s.asm.Read(c.r.Br, n, c.g.maxMsg, &c.budget, func(msg mem.BufferSlice, compressed bool) error {
			return c.message(s, msg, compressed)
		})
		switch err.(type) {
		case h2.ErrMsgTooLarge, h2.ErrBudget:
			c.failStream(s, status.Error(codes.ResourceExhausted, err.Error()))
			err = c.r.Discard(left)
		}
		c.noteAssembling(s)
		if err == nil && !h.Has(http2.FlagDataEndStream) {
			s.recv.Owe(h.Length)
		}
	}
	if err != nil {
		return err
	}
	if live {
		c.w.Lock()
		if !s.send.Closed {
			if inc := s.recv.Due(); inc > 0 {
				c.w.QueueWindowUpdate(s.id, inc) // sent with the connection's (h2.FrameLoop)
			}
		}
		c.w.Unlock()
	}
	if h.Has(http2.FlagDataEndStream) && s != nil && !s.half {
		c.halfClose(s)
	}
	return nil
}

// headersFrame opens a stream (or carries a client's trailers, which gRPC does not
// use but HTTP/2 allows).
func (c *sconn) headersFrame(h h2.FrameHeader) error {
	if h.Stream == 0 || h.Stream%2 == 0 {
		return h2.ProtocolError("HEADERS on stream %d: client streams are odd", h.Stream) // §5.1.1
	}
	err := c.r.HeaderBlock(h) // decoded whatever follows: the HPACK state stays in step
	if err != nil && err != h2.ErrHeaderListTooBig {
		return err
	}
	if st, s := c.state(h.Stream); st != h2.StateIdle {
		switch {
		case st == h2.StateClosed && c.skipped(h.Stream):
			return h2.ProtocolError("HEADERS opening stream %d, below the last stream %d", h.Stream, c.lastID) // §5.1.1
		case st == h2.StateClosed:
			c.w.Lock()
			ignore := c.closed.WasReset(h.Stream)
			c.w.Unlock()
			if ignore {
				return nil // in flight when vig reset the stream (§5.1 closed)
			}
			return h2.ConnError{Code: http2.ErrCodeStreamClosed, Msg: fmt.Sprintf("HEADERS on closed stream %d", h.Stream)} // §5.1 closed
		case st == h2.StateHalfClosedRemote:
			c.streamError(h.Stream, http2.ErrCodeStreamClosed) // §5.1 half-closed (remote)
		case !h.Has(http2.FlagHeadersEndStream) || err != nil || h2.CheckTrailers(c.r.Fields) != "":
			c.streamError(h.Stream, http2.ErrCodeProtocol) // §8.1: trailers end the stream
		case s.clen > 0:
			c.streamError(h.Stream, http2.ErrCodeProtocol) // §8.1.1: DATA short of content-length
		case st == h2.StateHalfClosedLocal:
			s.half = true
			c.w.Lock()
			s.remote = true
			c.removeIfClosedLocked(s)
			c.w.Unlock()
		default:
			c.halfClose(s) // the client's trailers
		}
		return nil
	}
	if lo := max(c.lastID+2, 1); h.Stream > lo {
		c.skip(lo, h.Stream-2)
	}
	c.lastID = h.Stream
	if c.r.PrioSelf {
		c.streamError(h.Stream, http2.ErrCodeProtocol) // §5.3.1: a stream cannot depend on itself
		return nil
	}
	clen := int64(-1)
	if err == nil {
		var why string
		if clen, why = h2.CheckRequest(c.r.Fields); why != "" {
			c.g.log.Debug("malformed request: stream reset", "stream", h.Stream, "why", why)
			c.streamError(h.Stream, http2.ErrCodeProtocol) // §8.1.1: malformed
			return nil
		}
		if h.Has(http2.FlagHeadersEndStream) && clen > 0 {
			c.streamError(h.Stream, http2.ErrCodeProtocol) // §8.1.1: no DATA to make the content-length
			return nil
		}
	}
	s := &sstream{c: c, id: h.Stream, recv: h2.NewRecvWindow(c.g.window), clen: clen}
	c.w.Lock()
	s.send.Init(h.Stream, c.w.InitWin())
	refuse := c.goAway || len(c.streams) >= maxConcurrentStreams
	if !refuse {
		c.streams[s.id] = s
		c.maxID = s.id
		c.g.accepted.Add(1)
	} else {
		c.w.QueueRST(s.id, http2.ErrCodeRefusedStream) // §5.1.2
		c.closed.NoteReset(s.id)
		c.w.Flush()
	}
	flood := refuse && c.w.Control() != nil
	c.w.Unlock()
	if flood {
		return h2.ConnError{Code: http2.ErrCodeEnhanceYourCalm, Msg: "refused streams flood a connection that does not read"}
	}
	if refuse {
		return nil
	}
	if err == h2.ErrHeaderListTooBig {
		s.m = c.g.m.Method("other")
		s.m.Start()
		c.failStream(s, status.Errorf(codes.ResourceExhausted, "header list larger than %d bytes", h2.MaxHeaderList))
	} else if err := c.request(s, c.r.Fields); err != nil {
		var hr httpRefusal
		if errors.As(err, &hr) {
			c.refuseHTTP(s, hr)
		} else {
			c.failStream(s, err)
		}
	}
	if h.Has(http2.FlagHeadersEndStream) {
		c.halfClose(s)
	}
	return nil
}

// skip records that the client skipped the stream ids lo..hi: they are closed
// without having been opened (§5.1.1). Only the last few ranges are kept: an id
// of an older one then counts as opened and closed, also a connection error.
func (c *sconn) skip(lo, hi uint32) {
	if len(c.skips) == cap(c.skips) && len(c.skips) > 0 {
		copy(c.skips, c.skips[1:])
		c.skips = c.skips[:len(c.skips)-1]
	}
	if c.skips == nil {
		c.skips = make([][2]uint32, 0, 8)
	}
	c.skips = append(c.skips, [2]uint32{lo, hi})
}

func (c *sconn) skipped(id uint32) bool {
	for _, r := range c.skips {
		if r[0] <= id && id <= r[1] {
			return true
		}
	}
	return false
}

// httpRefusal answers a request that is not gRPC with a plain HTTP response, so
// that a person or a generic HTTP/2 client sees what vig is.
type httpRefusal struct {
	status string
	msg    string
}

func (e httpRefusal) Error() string { return e.msg }

// refuseHTTP answers s with hr: :status, a text body, END_STREAM.
func (c *sconn) refuseHTTP(s *sstream, hr httpRefusal) {
	c.w.Lock()
	defer c.w.Unlock()
	if s.done {
		return
	}
	s.hdrSent = true
	c.w.Headers(s.id, false, []hpack.HeaderField{{Name: ":status", Value: hr.status}, {Name: "content-type", Value: "text/plain; charset=utf-8"}})
	c.w.QueueData(&s.send, mem.BufferSlice{mem.SliceBuffer("vig: " + hr.msg + "\n")})
	c.w.Finish(&s.send, nil)
	c.endLocked(s, codes.Unimplemented)
	c.w.Flush()
}

// reservedHeader reports headers the transport owns, which are not forwarded as
// metadata.
func reservedHeader(name string) bool {
	switch name {
	case "content-type", "te", "user-agent", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding",
		"grpc-status", "grpc-message", "connection", "host":
		return true
	}
	return strings.HasPrefix(name, ":")
}

// request reads a stream's request headers and decides what vig does with it.
func (c *sconn) request(s *sstream, fields []hpack.HeaderField) error {
	var method, path, ctype string
	var badTimeout error // answered once s.m is set (a nil s.m crashed vig: FuzzServerConn)
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		case "content-type":
			ctype = f.Value
		case "grpc-timeout":
			d, ok := parseTimeout(f.Value)
			if !ok {
				badTimeout = status.Errorf(codes.Internal, "malformed grpc-timeout %q", f.Value)
				continue
			}
			s.deadline = int64(c.g.clock()) + int64(d)
		case "grpc-encoding":
			s.enc[0] = f.Value
		case "grpc-accept-encoding":
			s.enc[1] = f.Value
		default:
			if !reservedHeader(f.Name) {
				s.meta = append(s.meta, f.Name, f.Value)
			}
		}
	}
	s.method = path
	s.m = c.g.m.Method(shortName(path))
	s.m.Start()
	if badTimeout != nil {
		return badTimeout
	}
	if method != "POST" {
		return httpRefusal{"405", fmt.Sprintf("%s %s: vig serves gRPC (Triton's GRPCInferenceService), which needs POST", method, path)}
	}
	if ctype != "application/grpc" && !strings.HasPrefix(ctype, "application/grpc+") && !strings.HasPrefix(ctype, "application/grpc;") {
		return httpRefusal{"415", fmt.Sprintf("content-type %q is not gRPC: vig serves gRPC (Triton's GRPCInferenceService)", ctype)}
	}
	if err := c.g.authorize(path, &s.meta); err != nil { // auth.go
		return err
	}
	g := c.g
	switch {
	case path == methodInfer:
		s.kind = kindInfer
	case path == methodStreamInfer:
		s.kind = kindStreamInfer
	case path == "/grpc.health.v1.Health/Check" || path == "/grpc.health.v1.Health/Watch":
		s.kind = kindLocal
	case strings.HasPrefix(path, "/grpc.health.v1.Health/"):
		return status.Errorf(codes.Unimplemented, "unknown method %s for service grpc.health.v1.Health", path[len("/grpc.health.v1.Health/"):])
	case g.relay == nil:
		s.kind = kindLocal // a ring backend: vig answers what it can
	default:
		// The backend stream opens with the first request message (after it
		// is checked, for shared-memory registration): a stream reset before
		// it, rapid reset (CVE-2023-44487) included, never reaches the backend.
		s.kind = kindRelay
	}
	return nil
}

// relayTarget is the backend end of a relayed RPC, as the client leg forwards
// the request to it (a stream of the gRPC backend, h2backend.go). No method may
// be called with the client connection's lock held.
type relayTarget interface {
	forward(body mem.BufferSlice, compressed bool) // one request message (owned)
	closeSend()                                    // the request is complete
	cancel()                                       // reset it: the client left
}

// openRelay starts the backend stream of a relayed RPC.
func (c *sconn) openRelay(s *sstream) error {
	// A relayed message keeps its compressed flag, so its encoding goes with it
	// (it was dropped, and a compressed request failed).
	meta := s.meta
	if s.enc[0] != "" {
		meta = append(meta[:len(meta):len(meta)], "grpc-encoding", s.enc[0])
	}
	if s.enc[1] != "" {
		meta = append(meta[:len(meta):len(meta)], "grpc-accept-encoding", s.enc[1])
	}
	bs, err := c.g.relay.openRelay(s.method, meta, s.deadline, s)
	if err != nil {
		return err
	}
	c.w.Lock()
	s.relay = bs
	c.w.Unlock()
	return nil
}

// message handles one complete request message of s (on the reader goroutine).
func (c *sconn) message(s *sstream, msg mem.BufferSlice, compressed bool) error {
	s.m.Received(msg.Len())
	switch s.kind {
	case kindInfer, kindStreamInfer:
		if compressed {
			msg.Free()
			c.failStream(s, status.Error(codes.Unimplemented, "vig reads ModelInfer requests: send them uncompressed (no grpc-encoding on the channel)"))
			return nil
		}
		if s.kind == kindInfer {
			if s.gotMsg {
				msg.Free()
				c.failStream(s, status.Error(codes.Internal, "ModelInfer is unary: a second request message"))
				return nil
			}
			s.gotMsg = true
		}
		c.infer(s, msg)
	case kindLocal:
		if s.gotMsg {
			msg.Free()
			return nil
		}
		s.gotMsg = true
		c.local(s, msg)
	default:
		if s.method == methodShmRegister || s.method == methodShmUnregister {
			if s.gotMsg {
				msg.Free()
				return nil
			}
			s.gotMsg = true
			hook, err := c.g.shmCheck(s.method, msg, c.uid, c.hasUID)
			if err == nil {
				err = c.openRelay(s)
			}
			if err != nil {
				msg.Free()
				c.failStream(s, err)
				return nil
			}
			c.w.Lock()
			s.onOK = hook
			c.w.Unlock()
		}
		if !s.gotMsg {
			s.gotMsg = true
			if err := c.openRelay(s); err != nil {
				msg.Free()
				c.failStream(s, err)
				return nil
			}
		}
		c.w.Lock()
		bs := s.relay
		c.w.Unlock()
		if bs == nil {
			msg.Free()
			return nil
		}
		bs.forward(msg, compressed)
	}
	return nil
}

// infer turns one ModelInfer request into a Call and submits it.
func (c *sconn) infer(s *sstream, msg mem.BufferSlice) {
	call := c.g.NewCall()
	err := c.g.prepare(call, msg, c.uid, c.hasUID)
	if errors.Is(err, errShmUnknown) {
		// The backend's region list is read on a goroutine of this request's own:
		// the connection's reader must not wait for it.
		c.w.Lock()
		s.pending++ // keeps a ModelStreamInfer open meanwhile
		c.w.Unlock()
		go func() {
			err := c.g.shmSync()
			if err == nil {
				err = c.g.finishPrepare(call, c.uid, c.hasUID, true)
			}
			c.submit(s, call, err, true)
		}()
		return
	}
	c.submit(s, call, err, false)
}

// submit hands a prepared call to the gateway, or answers the error prepare
// found. counted: s.pending already counts the call.
func (c *sconn) submit(s *sstream, call *Call, err error, counted bool) {
	if err != nil {
		if s.kind == kindStreamInfer {
			c.streamSend(s, call.Header.ID, nil, err, counted) // the id, if it parsed, says which request failed
			call.release()
			return
		}
		if counted {
			c.w.Lock()
			s.pending--
			c.w.Unlock()
		}
		call.release()
		c.failStream(s, err)
		return
	}
	call.Meta = append(call.Meta[:0], s.meta...)
	call.Deadline = s.deadline
	call.Replier = s
	c.w.Lock()
	if s.done {
		c.w.Unlock()
		call.release() // the client left while the region was looked up
		return
	}
	if s.kind == kindInfer {
		s.call = call
	} else {
		s.calls = append(s.calls, call)
	}
	if !counted {
		s.pending++
	}
	c.w.Unlock()
	c.g.Submit(call)
}

// halfClose: the client sent END_STREAM on s.
func (c *sconn) halfClose(s *sstream) {
	s.half = true
	c.w.Lock()
	s.remote = true
	c.removeIfClosedLocked(s)
	c.w.Unlock()
	if s.asm.Partial() {
		s.asm.Reset(&c.budget)
		c.failStream(s, status.Error(codes.Internal, "stream ended inside a message"))
		return
	}
	switch s.kind {
	case kindInfer, kindLocal:
		if !s.gotMsg {
			c.failStream(s, status.Error(codes.Internal, "no request message"))
		}
	case kindStreamInfer:
		c.w.Lock()
		s.halfSeen = true
		if s.pending == 0 {
			c.finishLocked(s, nil)
		}
		c.w.Unlock()
		c.w.Lock()
		c.w.Flush()
		c.w.Unlock()
	default:
		c.w.Lock()
		bs := s.relay
		c.w.Unlock()
		if bs != nil {
			bs.closeSend()
		} else if !s.gotMsg {
			c.failStream(s, status.Error(codes.Internal, "no request message"))
		}
	}
}

// reset: the client sent RST_STREAM (it cancelled).
func (c *sconn) reset(id uint32) {
	c.w.Lock()
	s := c.streams[id]
	if s == nil {
		c.w.Unlock()
		return
	}
	s.remote = true
	if s.done { // answered, its last frames perhaps still waiting for window: drop them
		c.w.Drop(&s.send)
		s.send.Closed = true
		c.removeLocked(s)
		c.w.Unlock()
		s.half = true
		s.asm.Reset(&c.budget)
		return
	}
	s.half = true
	s.send.Closed = true // nothing more may be sent on it
	c.w.Drop(&s.send)
	calls, bs := s.takeCalls(), s.relay
	c.endLocked(s, codes.Canceled)
	c.removeLocked(s)
	c.w.Unlock()
	s.asm.Reset(&c.budget)
	for _, call := range calls {
		c.g.Cancel(call)
		call.Release()
	}
	if bs != nil {
		bs.cancel()
	}
}

// Reply answers a ModelInfer (or one message of ModelStreamInfer) on its stream.
func (s *sstream) Reply(call *Call, resp mem.BufferSlice, err error) {
	c := s.c
	if s.kind == kindStreamInfer {
		c.streamAnswer(s, call, resp, err)
		return
	}
	c.w.Lock()
	s.call = nil
	s.pending--
	if s.done {
		c.w.Unlock()
		resp.Free()
		return
	}
	if err != nil {
		if len(call.RespMeta) > 0 {
			c.headLocked(s, call.RespMeta) // the backend sent headers before its error
		}
		c.answerLocked(s, err, call.TrailMeta)
	} else {
		c.headLocked(s, call.RespMeta)
		c.msgLocked(s, resp)
		c.finishLocked(s, call.TrailMeta)
	}
	c.w.Flush()
	c.w.Unlock()
}

// streamAnswer sends one ModelStreamInferResponse: the backend's ModelInferResponse
// spliced in as infer_response, or the error in-band (Triton's convention).
func (c *sconn) streamAnswer(s *sstream, call *Call, resp mem.BufferSlice, err error) {
	c.w.Lock()
	for i, x := range s.calls {
		if x == call {
			s.calls[i] = s.calls[len(s.calls)-1]
			s.calls[len(s.calls)-1] = nil
			s.calls = s.calls[:len(s.calls)-1]
			break
		}
	}
	c.w.Unlock()
	c.streamSend(s, call.Header.ID, resp, err, true)
}

// takeCalls returns the calls s has running, held (the caller cancels, then
// releases them), and forgets them. Called with w.mu held: a call still listed
// has not been answered, so it cannot have been recycled.
func (s *sstream) takeCalls() []*Call {
	calls := s.calls
	s.calls = nil
	if s.call != nil {
		calls = append(calls, s.call)
		s.call = nil
	}
	for _, c := range calls {
		c.Hold()
	}
	return calls
}

// streamSend sends one ModelStreamInferResponse for the request with id; counted
// says it was one of the stream's submitted calls.
func (c *sconn) streamSend(s *sstream, id []byte, resp mem.BufferSlice, err error, counted bool) {
	var out mem.BufferSlice
	if err != nil {
		out = streamError(id, err)
	} else {
		prefix := protowireBytesPrefix(2, resp.Len())
		out = append(mem.BufferSlice{mem.SliceBuffer(prefix)}, resp...)
	}
	c.w.Lock()
	if counted {
		s.pending--
	}
	if s.done {
		c.w.Unlock()
		out.Free()
		return
	}
	c.headLocked(s, nil)
	c.msgLocked(s, out)
	if s.halfSeen && s.pending == 0 {
		c.finishLocked(s, nil)
	}
	c.w.Flush()
	c.w.Unlock()
}

// headLocked sends the response headers once. Headers above the client's
// SETTINGS_MAX_HEADER_LIST_SIZE (the backend's metadata) are not sent: s is
// answered INTERNAL, naming the setting, and headLocked reports false (s takes
// nothing more). Called with w.mu held.
func (c *sconn) headLocked(s *sstream, meta []string) bool {
	if s.hdrSent {
		return true
	}
	fields := metaFields(meta)
	if n := h2.HeaderListSize(respHeaders, fields); n > c.w.PeerMaxHeaderList() {
		c.answerLocked(s, status.Errorf(codes.Internal, "response headers of %d bytes exceed the client's SETTINGS_MAX_HEADER_LIST_SIZE of %d (RFC 9113 §6.5.2): the backend's metadata is too large for this client", n, c.w.PeerMaxHeaderList()), nil)
		return false
	}
	s.hdrSent = true
	c.w.Headers(s.id, false, respHeaders, fields)
	return true
}

// trailersTooLarge are the trailers that replace ones above the client's
// SETTINGS_MAX_HEADER_LIST_SIZE (n bytes, the backend's trailer metadata).
func (c *sconn) trailersTooLarge(n uint32) []hpack.HeaderField {
	return []hpack.HeaderField{{Name: "grpc-status", Value: strconv.Itoa(int(codes.Internal))}, {Name: "grpc-message", Value: encodeGrpcMessage(fmt.Sprintf(
		"response trailers of %d bytes exceed the client's SETTINGS_MAX_HEADER_LIST_SIZE of %d (RFC 9113 §6.5.2): the backend's metadata is too large for this client", n, c.w.PeerMaxHeaderList()))}}
}

var respHeaders = []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}

// msgLocked queues one gRPC message (body owned) on s.
func (c *sconn) msgLocked(s *sstream, body mem.BufferSlice) {
	s.m.Sent(body.Len())
	c.w.QueueMsg(&s.send, false, body)
}

// finishLocked ends s with status OK (err nil) after its queued messages.
func (c *sconn) finishLocked(s *sstream, trailMeta []string) {
	if s.done {
		return
	}
	tr := append(s.trail[:0], hpack.HeaderField{Name: "grpc-status", Value: "0"})
	tr = append(tr, metaFields(trailMeta)...)
	if n := h2.HeaderListSize(tr); n > c.w.PeerMaxHeaderList() {
		c.w.Finish(&s.send, c.trailersTooLarge(n))
		c.endLocked(s, codes.Internal)
		return
	}
	c.w.Finish(&s.send, tr)
	c.endLocked(s, codes.OK)
}

// answerLocked ends s with an error status: in the trailers after the response
// headers if they were sent, else as a trailers-only response.
func (c *sconn) answerLocked(s *sstream, err error, trailMeta []string) {
	if s.done {
		return
	}
	err = deadlineStatus(err, s.deadline, c.g.clock()) // deadline.go
	st := status.Convert(err)
	code := st.Code()
	fields := make([]hpack.HeaderField, 0, 4+len(trailMeta)/2)
	if !s.hdrSent {
		s.hdrSent = true
		fields = append(fields, respHeaders...)
	}
	headers := len(fields)
	fields = append(fields, hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(code))})
	if msg := st.Message(); msg != "" {
		fields = append(fields, hpack.HeaderField{Name: "grpc-message", Value: encodeGrpcMessage(msg)})
	}
	fields = append(fields, metaFields(trailMeta)...)
	if n := h2.HeaderListSize(fields); n > c.w.PeerMaxHeaderList() && len(trailMeta) > 0 {
		fields = append(fields[:headers], c.trailersTooLarge(n)...)
		code = codes.Internal
	}
	c.w.Drop(&s.send)
	c.w.Finish(&s.send, fields)
	c.endLocked(s, code)
}

// failStream answers s with err now (on any goroutine) and stops whatever it had
// started.
func (c *sconn) failStream(s *sstream, err error) {
	c.w.Lock()
	calls, bs := s.takeCalls(), s.relay
	s.relay = nil
	c.answerLocked(s, err, nil)
	c.w.Flush()
	c.w.Unlock()
	for _, call := range calls {
		c.g.Cancel(call)
		call.Release()
	}
	if bs != nil {
		bs.cancel()
	}
}

// endLocked records that s is answered. Called with w.mu held.
func (c *sconn) endLocked(s *sstream, code codes.Code) {
	if s.done {
		return
	}
	s.done = true
	s.m.Done(code)
	c.g.answered.Add(1)
	if s.send.Closed {
		c.removeIfClosedLocked(s)
	} // else once its last frame is out (w.onClosed)
}

// removeIfClosedLocked forgets s once it is closed on both sides: answered, its
// frames all sent, and the client's END_STREAM or RST_STREAM received. Until
// then it counts against the concurrent-stream limit (§5.1.2). Called with w.mu
// held.
func (c *sconn) removeIfClosedLocked(s *sstream) {
	if s.done && s.send.Closed && s.remote {
		c.removeLocked(s)
	}
}

// removeLocked forgets a stream. Called with w.mu held.
func (c *sconn) removeLocked(s *sstream) {
	if c.streams[s.id] != s {
		return
	}
	c.w.Forget(&s.send)
	delete(c.streams, s.id)
	if c.goAway && len(c.streams) == 0 {
		c.w.CloseWhenFlushed() // drained: nothing more will be sent
	}
}

// shutdown ends the connection: every open stream is cancelled.
func (c *sconn) shutdown(err error) {
	var ce h2.ConnError
	if errors.As(err, &ce) {
		c.w.GoAway(c.lastID, ce.Code, ce.Msg)
		// Let the GOAWAY arrive before the close: a peer still sending would
		// otherwise get a reset instead. Bounded in time and bytes.
		t := time.AfterFunc(lingerTime, func() { c.nc.Close() })
		io.CopyN(io.Discard, c.r.Br, lingerBytes)
		t.Stop()
	}
	c.w.Lock()
	var calls []*Call
	var relays []relayTarget
	for _, s := range c.streams {
		s.send.Closed = true
		c.w.Drop(&s.send)
		calls = append(calls, s.takeCalls()...)
		if s.relay != nil {
			relays = append(relays, s.relay)
		}
		c.endLocked(s, codes.Canceled)
	}
	c.w.Fail(h2.ErrConnClosed)
	c.w.Unlock()
	for _, call := range calls {
		c.g.Cancel(call)
		call.Release()
	}
	for _, bs := range relays {
		bs.cancel()
	}
}

// drain shuts the connection down gracefully (RFC 9113 §6.8): a GOAWAY that
// still admits every stream, and a PING; once the client has answered the PING
// (or after drainGrace), every stream it opened before seeing the GOAWAY has
// arrived, and a second GOAWAY names the last one. The connection closes when
// those are answered.
func (c *sconn) drain() {
	c.w.Lock()
	c.w.QueueGoAway(1<<31-1, http2.ErrCodeNo, "vig draining")
	c.w.QueuePing(false, drainPing)
	c.w.Flush()
	c.w.Unlock()
	time.AfterFunc(drainGrace, c.finalGoAway)
}

// drainPing is the payload of the PING that drain sends.
var drainPing = [8]byte{'v', 'i', 'g', 'd', 'r', 'a', 'i', 'n'}

const drainGrace = time.Second

// finalGoAway refuses streams from now on and closes the connection once it has
// none left.
func (c *sconn) finalGoAway() {
	c.w.Lock()
	defer c.w.Unlock()
	if c.goAway {
		return
	}
	c.goAway = true
	c.w.QueueGoAway(c.maxID, http2.ErrCodeNo, "vig draining")
	c.w.Flush()
	if len(c.streams) == 0 {
		c.w.CloseWhenFlushed()
	}
}

// metaFields turns name, value pairs into header fields.
func metaFields(meta []string) []hpack.HeaderField {
	if len(meta) == 0 {
		return nil
	}
	fs := make([]hpack.HeaderField, 0, len(meta)/2)
	for i := 0; i+1 < len(meta); i += 2 {
		fs = append(fs, hpack.HeaderField{Name: meta[i], Value: meta[i+1]})
	}
	return fs
}

// parseTimeout reads a grpc-timeout value ("<1-8 digits><unit>"). Like
// grpc-go, a value beyond what a Duration holds ("99999999H") is clamped, to
// maxTimeout: it means no deadline in practice, never an instant one.
func parseTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > int64(maxTimeout/unit) {
		return maxTimeout, true
	}
	return time.Duration(n) * unit, true
}

// maxTimeout bounds a deadline's distance (~146 years), so that the clock plus
// it cannot overflow.
const maxTimeout = time.Duration(1 << 62)

// formatTimeout writes d as a grpc-timeout value: at most 8 digits, in the
// finest unit that holds it (rounded up, so that the backend never gives up
// before vig would).
func formatTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		d time.Duration
		c string
	}{{time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if n := d/u.d + 1; n < 1e8 {
			return strconv.FormatInt(int64(n), 10) + u.c
		}
	}
	return strconv.FormatInt(min(int64(d/time.Hour)+1, 99999999), 10) + "H"
}

// encodeGrpcMessage percent-encodes a status message as gRPC's wire format asks.
func encodeGrpcMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c > 0x7e || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c > 0x7e || c == '%' {
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)|0x100, 16)[1:]))
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// decodeGrpcMessage undoes encodeGrpcMessage.
func decodeGrpcMessage(msg string) string {
	if !strings.Contains(msg, "%") {
		return msg
	}
	var b bytes.Buffer
	for i := 0; i < len(msg); i++ {
		if msg[i] == '%' && i+2 < len(msg) {
			if v, err := strconv.ParseUint(msg[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(msg[i])
	}
	return b.String()
}

// statusFromTrailers reads grpc-status and grpc-message.
func statusFromTrailers(fields []hpack.HeaderField) (error, bool) {
	code, msg, have := codes.Unknown, "", false
	for _, f := range fields {
		switch f.Name {
		case "grpc-status":
			v, err := strconv.ParseUint(f.Value, 10, 32)
			if err != nil {
				return status.Errorf(codes.Internal, "malformed grpc-status %q", f.Value), true
			}
			code, have = codes.Code(v), true
		case "grpc-message":
			msg = decodeGrpcMessage(f.Value)
		}
	}
	if !have {
		return nil, false
	}
	if code == codes.OK {
		return nil, true
	}
	return status.Error(code, msg), true
}

// protowireBytesPrefix is the tag and length of a length-delimited field.
func protowireBytesPrefix(field int, n int) []byte {
	b := make([]byte, 0, 12)
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	return binary.AppendUvarint(b, uint64(n))
}

var _ = wire.Service
var _ sync.Locker
