package h2

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
)

// The server role: a connection a client opened, and its table of client
// streams. ServerConn decides what every frame means for a stream (RFC 9113
// §5.1, the section of each rule beside it), assembles request messages, keeps
// the receive windows, the concurrency limit and the drain, and hands what is
// left, a request's headers and messages, to a Handler; the handler answers
// through its ServerStream's methods from any goroutine.

// ServerConfig sizes a ServerConn.
type ServerConfig struct {
	Window     uint32 // each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE)
	ConnWindow uint32 // the connection's receive window
	MaxMsg     int    // the largest request message
	MaxStreams int    // SETTINGS_MAX_CONCURRENT_STREAMS, enforced (§5.1.2)
	// MsgBudget bounds what the connection's messages hold, arriving or
	// delivered and not yet freed (0: NewBudget's bound for MaxMsg).
	MsgBudget int
	// AnswerBudget bounds the answers the connection holds for a client that
	// does not read them (the writer's Held): an answer that would take it
	// above fails the stream RESOURCE_EXHAUSTED instead, naming the bound. An
	// answer to a connection that holds none always goes (it is bounded by
	// the message limit). 0: no bound.
	AnswerBudget int64
	// EarlyMin: a request message of at least this many bytes is offered,
	// while it arrives, to a stream handler that implements Early
	// (cut-through; 0: none).
	EarlyMin int
	// Malformed, when set, is told of each request reset as malformed (§8.1.1),
	// and why. Reader goroutine.
	Malformed func(id uint32, why string)
}

// Handler is what a ServerConn asks of the server above it.
type Handler interface {
	// NewStream returns the storage of a stream a client opens and its
	// handler; ServerConn sets the stream up (the server's own stream type
	// usually embeds ServerStream, so one allocation holds both). It is called
	// only for a stream that is admitted, before StreamHandler.Open, on the
	// reader goroutine with the ServerConn's lock held (the stream enters the
	// table under it): it must only allocate.
	NewStream() (*ServerStream, StreamHandler)
}

// StreamHandler is the server above one stream. Open, Message, HalfClosed,
// Failed and Cancelled run on the connection's reader goroutine, without the
// ServerConn's lock: they may call the stream's methods. Answered alone runs
// with that lock held: it must not call into h2 nor block.
type StreamHandler interface {
	// Open is the request's headers, checked (CheckRequest). err is
	// ErrHeaderListTooBig when the list was above MaxHeaderList: fields are
	// then incomplete, and the handler answers the stream with an error.
	Open(fields []hpack.HeaderField, err error)
	// Message is one complete request message (owned by the handler).
	Message(msg mem.BufferSlice, compressed bool)
	// HalfClosed: the client ended its side (END_STREAM) after complete
	// messages.
	HalfClosed()
	// Failed: the transport cannot deliver the request (a message above
	// MaxMsg or the connection's Budget, or the client ended the stream
	// inside a message). The handler answers the stream with code and msg
	// (typically through Fail) and stops what it started.
	Failed(code codes.Code, msg string)
	// Cancelled: the stream ended before the handler answered it (the client
	// reset it, a stream error, the connection ended); code says which
	// (CANCELLED, INTERNAL). Nothing more can be sent: the handler stops what
	// it started. Answered has been called with code already.
	Cancelled(code codes.Code)
	// Answered tells, exactly once per opened stream, that the stream is
	// answered and with which status: by the handler (Finish, Fail,
	// RefuseHTTP, or INTERNAL from Head) or by Cancelled's cause. Called with
	// the ServerConn's lock held.
	Answered(code codes.Code)
}

// ServerConn is the server role of one connection, its preface read.
type ServerConn struct {
	cfg ServerConfig
	w   *Writer
	r   *Reader
	h   Handler

	// Guarded by w.mu.
	streams map[uint32]*ServerStream
	maxID   uint32 // highest stream opened
	goAway  bool   // the final GOAWAY was sent: no new streams
	closed  ClosedIDs

	// Reader goroutine only.
	lastID   uint32
	budget   Budget   // memory its incomplete messages may still take
	partials Partials // assemblers that may hold memory (Budget.Reclaim)
	skips    [][2]uint32
}

// ServerStream is one client stream. Its methods that answer (Head, Send,
// Finish, Fail, RefuseHTTP) may be called from any goroutine; they queue
// frames, which Flush writes. Once the stream is answered or ended they do
// nothing (Send frees its message).
type ServerStream struct {
	c  *ServerConn
	id uint32
	h  StreamHandler

	// Reader goroutine only.
	asm  Assembler
	recv RecvWindow
	half bool  // the client half-closed
	clen int64 // the request's content-length (-1: none), then what DATA may still bring

	// Guarded by c.w.mu.
	send    SendState
	hdrSent bool
	remote  bool // the client's side is closed (END_STREAM or RST_STREAM received)
	done    bool // answered (trailers or RST sent)
	trail   [4]hpack.HeaderField
}

// After a connection error vig reads (and drops) what the client still sends
// for a moment, so that its GOAWAY is read rather than lost in a reset.
const (
	lingerTime  = time.Second
	lingerBytes = 4 << 20
)

// DrainGrace is how long Drain waits for the client's answer to its PING
// before it refuses new streams.
const DrainGrace = time.Second

// drainPing is the payload of the PING that Drain sends.
var drainPing = [8]byte{'v', 'i', 'g', 'd', 'r', 'a', 'i', 'n'}

// NewServerConn is the server role on a connection read by r and written by w
// (its preface read: ReadPreface).
func NewServerConn(r *Reader, w *Writer, cfg ServerConfig, h Handler) *ServerConn {
	c := &ServerConn{cfg: cfg, w: w, r: r, h: h, streams: map[uint32]*ServerStream{}, budget: NewBudget(cfg.MaxMsg)}
	w.EachStream = func(f func(*SendState)) {
		for _, s := range c.streams {
			f(&s.send)
		}
	}
	w.OnClosed = func(st *SendState) {
		if s := c.streams[st.ID()]; s != nil && s.done {
			c.removeIfClosedLocked(s)
		}
	}
	if cfg.MsgBudget > 0 {
		c.budget.left, c.budget.limit = cfg.MsgBudget, cfg.MsgBudget
	}
	c.budget.Reclaim = c.reclaim
	c.budget.HoldDelivered() // a request vig queues or relays holds its client's memory
	return c
}

// ReadPreface reads the client preface from nc within timeout. A peer that
// sends something else is told (GOAWAY, RFC 9113 §3.4), read from a moment so
// that it sees a close rather than a reset, and closed; false then, and nc is
// closed.
func ReadPreface(nc net.Conn, timeout time.Duration) bool {
	var pre [len(ClientPreface)]byte
	nc.SetReadDeadline(time.Now().Add(timeout))
	if _, err := io.ReadFull(nc, pre[:]); err != nil || string(pre[:]) != ClientPreface {
		if err == nil {
			nc.Write(AppendGoAway(nil, 0, http2.ErrCodeProtocol, "invalid connection preface"))
			nc.SetReadDeadline(time.Now().Add(lingerTime))
			io.CopyN(io.Discard, nc, lingerBytes)
		}
		nc.Close()
		return false
	}
	nc.SetReadDeadline(time.Time{})
	return true
}

// Serve sends vig's SETTINGS and runs the connection until it ends, then ends
// every stream still open (Cancelled) and closes it.
func (c *ServerConn) Serve() {
	c.w.Lock()
	c.w.QueueSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(c.cfg.MaxStreams)},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.cfg.Window},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: MaxHeaderList})
	c.w.QueueWindowUpdate(0, c.cfg.ConnWindow-InitialWindow)
	c.w.Flush()
	c.w.Unlock()
	c.shutdown(FrameLoop(c.r, c.w, "a client", c.cfg.ConnWindow, (*serverStreams)(c)))
}

// noteAssembling remembers a stream whose message holds memory, so that reclaim
// finds it should the stream end before the message does. Reader goroutine.
func (c *ServerConn) noteAssembling(s *ServerStream) {
	if c.partials.Note(&s.asm, s.id) {
		c.reclaim(&s.asm)
	}
}

// reclaim frees what the incomplete messages of ended streams hold, and forgets
// the streams that hold nothing (Budget). Reader goroutine.
func (c *ServerConn) reclaim(skip *Assembler) {
	c.w.Lock()
	c.partials.Sweep(skip, &c.budget, func(id uint32, a *Assembler) bool {
		s := c.streams[id]
		return s == nil || &s.asm != a || s.done
	})
	c.w.Unlock()
}

// serverStreams is the stream table as FrameLoop sees it.
type serverStreams ServerConn

// Idle: a client's stream above the last one it opened (§5.1 idle; §5.1.1).
func (t *serverStreams) Idle(id uint32) bool             { return id > t.lastID }
func (t *serverStreams) Headers(h FrameHeader) error     { return (*ServerConn)(t).headersFrame(h) }
func (t *serverStreams) Data(h FrameHeader, n int) error { return (*ServerConn)(t).data(h, n) }
func (t *serverStreams) Reset(id uint32, _ http2.ErrCode) error {
	(*ServerConn)(t).reset(id)
	return nil
}

// SendState is called with the writer's lock held (it guards the table).
func (t *serverStreams) SendState(id uint32) *SendState {
	if s := t.streams[id]; s != nil {
		return &s.send
	}
	return nil
}

func (t *serverStreams) StreamError(id uint32, code http2.ErrCode, _ string) {
	(*ServerConn)(t).streamError(id, code)
}

// GoAway: the client will open no more streams; those it has finish normally.
func (t *serverStreams) GoAway(uint32, http2.ErrCode, []byte) error { return nil }

func (t *serverStreams) Settings() {}

// PingAck: the client has read everything before the drain PING (Drain).
func (t *serverStreams) PingAck(data [8]byte) {
	if data == drainPing {
		(*ServerConn)(t).finalGoAway()
	}
}

// state is stream id's state, and the stream while it is in the table. Reader
// goroutine.
func (c *ServerConn) state(id uint32) (StreamState, *ServerStream) {
	if id > c.lastID {
		return StateIdle, nil
	}
	c.w.Lock()
	s := c.streams[id]
	done := s != nil && s.done
	c.w.Unlock()
	switch {
	case s == nil:
		return StateClosed, nil
	case s.half:
		return StateHalfClosedRemote, s
	case done:
		return StateHalfClosedLocal, s
	}
	return StateOpen, s
}

// closedError is what a frame on a stream no longer in the table means (§5.1
// closed): nothing on a stream vig reset (frames in flight), a stream error
// STREAM_CLOSED otherwise. Reader goroutine.
func (c *ServerConn) closedError(id uint32) {
	c.w.Lock()
	ignore := c.closed.WasReset(id)
	c.w.Unlock()
	if !ignore {
		c.streamError(id, http2.ErrCodeStreamClosed)
	}
}

// streamError resets stream id with code (RFC 9113 §5.4.2) and ends what it had
// started. Reader goroutine.
func (c *ServerConn) streamError(id uint32, code http2.ErrCode) {
	c.w.Lock()
	s := c.streams[id]
	cancel := false
	if s != nil {
		s.remote = true
		c.w.Drop(&s.send)
		s.send.Closed = true
		cancel = c.endLocked(s, codes.Internal)
		c.removeLocked(s)
	}
	c.w.QueueRST(id, code)
	c.closed.NoteReset(id)
	c.w.Flush()
	c.w.Unlock()
	if s != nil {
		s.half = true
		s.asm.Reset(&c.budget)
		if cancel {
			s.h.Cancelled(codes.Internal)
		}
	}
}

// data reads a DATA frame's n bytes into its stream's message (FrameLoop has
// checked the stream is not idle and does the connection's window).
func (c *ServerConn) data(h FrameHeader, n int) error {
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
	live := st == StateOpen
	var err error
	switch st {
	case StateClosed:
		err = c.r.Discard(n)
		c.closedError(h.Stream)
	case StateHalfClosedRemote:
		err = c.r.Discard(n)
		c.streamError(h.Stream, http2.ErrCodeStreamClosed) // §5.1 half-closed (remote)
		s = nil
	case StateHalfClosedLocal:
		err = c.r.Discard(n) // answered already: dropped
	case StateOpen:
		if !s.recv.Take(h.Length) {
			return ConnError{Code: http2.ErrCodeFlowControl, Msg: "client sent more than the stream window"}
		}
		var left int
		left, err = s.asm.Read(c.r.Br, n, c.cfg.MaxMsg, &c.budget, func(msg mem.BufferSlice, compressed bool) error {
			s.h.Message(msg, compressed)
			return nil
		})
		switch err.(type) {
		case ErrMsgTooLarge, ErrBudget:
			s.h.Failed(codes.ResourceExhausted, err.Error())
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
				c.w.QueueWindowUpdate(s.id, inc) // sent with the connection's (FrameLoop)
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
func (c *ServerConn) headersFrame(h FrameHeader) error {
	if h.Stream == 0 || h.Stream%2 == 0 {
		return ProtocolError("HEADERS on stream %d: client streams are odd", h.Stream) // §5.1.1
	}
	err := c.r.HeaderBlock(h) // decoded whatever follows: the HPACK state stays in step
	if err != nil && err != ErrHeaderListTooBig {
		return err
	}
	if st, s := c.state(h.Stream); st != StateIdle {
		switch {
		case st == StateClosed && c.skipped(h.Stream):
			return ProtocolError("HEADERS opening stream %d, below the last stream %d", h.Stream, c.lastID) // §5.1.1
		case st == StateClosed:
			c.w.Lock()
			ignore := c.closed.WasReset(h.Stream)
			c.w.Unlock()
			if ignore {
				return nil // in flight when vig reset the stream (§5.1 closed)
			}
			return ConnError{Code: http2.ErrCodeStreamClosed, Msg: fmt.Sprintf("HEADERS on closed stream %d", h.Stream)} // §5.1 closed
		case st == StateHalfClosedRemote:
			c.streamError(h.Stream, http2.ErrCodeStreamClosed) // §5.1 half-closed (remote)
		case !h.Has(http2.FlagHeadersEndStream) || err != nil || CheckTrailers(c.r.Fields) != "":
			c.streamError(h.Stream, http2.ErrCodeProtocol) // §8.1: trailers end the stream
		case s.clen > 0:
			c.streamError(h.Stream, http2.ErrCodeProtocol) // §8.1.1: DATA short of content-length
		case st == StateHalfClosedLocal:
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
		if clen, why = CheckRequest(c.r.Fields); why != "" {
			if c.cfg.Malformed != nil {
				c.cfg.Malformed(h.Stream, why)
			}
			c.streamError(h.Stream, http2.ErrCodeProtocol) // §8.1.1: malformed
			return nil
		}
		if h.Has(http2.FlagHeadersEndStream) && clen > 0 {
			c.streamError(h.Stream, http2.ErrCodeProtocol) // §8.1.1: no DATA to make the content-length
			return nil
		}
	}
	c.w.Lock()
	refuse := c.goAway || len(c.streams) >= c.cfg.MaxStreams
	var s *ServerStream
	if !refuse {
		var sh StreamHandler
		s, sh = c.h.NewStream()
		s.c, s.id, s.h, s.recv, s.clen = c, h.Stream, sh, NewRecvWindow(c.cfg.Window), clen
		s.send.Init(h.Stream, c.w.InitWin())
		if e, ok := sh.(Early); ok && c.cfg.EarlyMin > 0 {
			s.asm.SetEarly(e, c.cfg.EarlyMin)
		}
		c.streams[s.id] = s
		c.maxID = s.id
	} else {
		c.w.QueueRST(h.Stream, http2.ErrCodeRefusedStream) // §5.1.2
		c.closed.NoteReset(h.Stream)
		c.w.Flush()
	}
	flood := refuse && c.w.Control() != nil
	c.w.Unlock()
	if flood {
		return ConnError{Code: http2.ErrCodeEnhanceYourCalm, Msg: "refused streams flood a connection that does not read"}
	}
	if refuse {
		return nil
	}
	s.h.Open(c.r.Fields, err)
	if h.Has(http2.FlagHeadersEndStream) {
		c.halfClose(s)
	}
	return nil
}

// skip records that the client skipped the stream ids lo..hi: they are closed
// without having been opened (§5.1.1). Only the last few ranges are kept: an id
// of an older one then counts as opened and closed, also a connection error.
func (c *ServerConn) skip(lo, hi uint32) {
	if len(c.skips) == cap(c.skips) && len(c.skips) > 0 {
		copy(c.skips, c.skips[1:])
		c.skips = c.skips[:len(c.skips)-1]
	}
	if c.skips == nil {
		c.skips = make([][2]uint32, 0, 8)
	}
	c.skips = append(c.skips, [2]uint32{lo, hi})
}

func (c *ServerConn) skipped(id uint32) bool {
	for _, r := range c.skips {
		if r[0] <= id && id <= r[1] {
			return true
		}
	}
	return false
}

// halfClose: the client sent END_STREAM on s.
func (c *ServerConn) halfClose(s *ServerStream) {
	s.half = true
	c.w.Lock()
	s.remote = true
	c.removeIfClosedLocked(s)
	c.w.Unlock()
	if s.asm.Partial() {
		s.asm.Reset(&c.budget)
		s.h.Failed(codes.Internal, "stream ended inside a message")
		return
	}
	s.h.HalfClosed()
}

// reset: the client sent RST_STREAM (it cancelled).
func (c *ServerConn) reset(id uint32) {
	c.w.Lock()
	s := c.streams[id]
	if s == nil {
		c.w.Unlock()
		return
	}
	s.remote = true
	s.send.Closed = true // nothing more may be sent on it
	c.w.Drop(&s.send)
	cancel := c.endLocked(s, codes.Canceled)
	c.removeLocked(s)
	c.w.Unlock()
	s.half = true
	s.asm.Reset(&c.budget)
	if cancel {
		s.h.Cancelled(codes.Canceled)
	}
}

// endLocked records that s is answered with code; false if it was already.
// Called with w.mu held.
func (c *ServerConn) endLocked(s *ServerStream, code codes.Code) bool {
	if s.done {
		return false
	}
	s.done = true
	s.h.Answered(code)
	if s.send.Closed {
		c.removeIfClosedLocked(s)
	} // else once its last frame is out (w.OnClosed)
	return true
}

// removeIfClosedLocked forgets s once it is closed on both sides: answered, its
// frames all sent, and the client's END_STREAM or RST_STREAM received. Until
// then it counts against the concurrent-stream limit (§5.1.2). Called with w.mu
// held.
func (c *ServerConn) removeIfClosedLocked(s *ServerStream) {
	if s.done && s.send.Closed && s.remote {
		c.removeLocked(s)
	}
}

// removeLocked forgets a stream. Called with w.mu held.
func (c *ServerConn) removeLocked(s *ServerStream) {
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
func (c *ServerConn) shutdown(err error) {
	var ce ConnError
	if errors.As(err, &ce) {
		c.w.GoAway(c.lastID, ce.Code, ce.Msg)
		// Let the GOAWAY arrive before the close: a peer still sending would
		// otherwise get a reset instead. Bounded in time and bytes.
		t := time.AfterFunc(lingerTime, func() { c.w.nc.Close() })
		io.CopyN(io.Discard, c.r.Br, lingerBytes)
		t.Stop()
	}
	c.w.Lock()
	var cancelled []*ServerStream
	for _, s := range c.streams {
		s.send.Closed = true
		c.w.Drop(&s.send)
		if c.endLocked(s, codes.Canceled) {
			cancelled = append(cancelled, s)
		}
	}
	c.w.Fail(ErrConnClosed)
	c.w.Unlock()
	for _, s := range cancelled {
		s.h.Cancelled(codes.Canceled)
	}
}

// Drain shuts the connection down gracefully (RFC 9113 §6.8): a GOAWAY that
// still admits every stream, and a PING; once the client has answered the PING
// (or after DrainGrace), every stream it opened before seeing the GOAWAY has
// arrived, and a second GOAWAY names the last one. The connection closes when
// those are answered. Any goroutine.
func (c *ServerConn) Drain() {
	c.w.Lock()
	c.w.QueueGoAway(1<<31-1, http2.ErrCodeNo, "vig draining")
	c.w.QueuePing(false, drainPing)
	c.w.Flush()
	c.w.Unlock()
	time.AfterFunc(DrainGrace, c.finalGoAway)
}

// finalGoAway refuses streams from now on and closes the connection once it has
// none left.
func (c *ServerConn) finalGoAway() {
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

// ID is the stream's id.
func (s *ServerStream) ID() uint32 { return s.id }

// Done reports whether s is answered (or ended).
func (s *ServerStream) Done() bool {
	s.c.w.Lock()
	defer s.c.w.Unlock()
	return s.done
}

// respHeaders open every gRPC response.
var respHeaders = []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}

// Head queues the response headers, with fields (metadata), unless they are
// sent. Headers above the client's SETTINGS_MAX_HEADER_LIST_SIZE are not sent:
// s is answered INTERNAL, naming the setting, and Head reports false, as it
// does for a stream already answered.
func (s *ServerStream) Head(fields []hpack.HeaderField) bool {
	s.c.w.Lock()
	defer s.c.w.Unlock()
	return s.headLocked(fields)
}

func (s *ServerStream) headLocked(fields []hpack.HeaderField) bool {
	if s.done {
		return false
	}
	if s.hdrSent {
		return true
	}
	w := s.c.w
	if n := HeaderListSize(respHeaders, fields); n > w.PeerMaxHeaderList() {
		s.failLocked(codes.Internal, fmt.Sprintf("response headers of %d bytes exceed the client's SETTINGS_MAX_HEADER_LIST_SIZE of %d (RFC 9113 §6.5.2): the backend's metadata is too large for this client", n, w.PeerMaxHeaderList()), nil)
		return false
	}
	s.hdrSent = true
	w.Headers(s.id, false, respHeaders, fields)
	return true
}

// Send queues one gRPC message (body, owned from here on), after the response
// headers if they are not sent. False if s is answered, or the message would
// take the connection's unread answers above ServerConfig.AnswerBudget (s is
// then failed RESOURCE_EXHAUSTED): body is freed.
func (s *ServerStream) Send(body mem.BufferSlice, compressed bool) bool {
	s.c.w.Lock()
	defer s.c.w.Unlock()
	if !s.headLocked(nil) {
		body.Free()
		return false
	}
	if b, held := s.c.cfg.AnswerBudget, s.c.w.Held(); b > 0 && held > 0 && held+int64(body.Len()) > b {
		n := body.Len()
		body.Free()
		s.failLocked(codes.ResourceExhausted, fmt.Sprintf("this connection holds %d bytes of answers its client has not read, and this %d-byte answer would take it above %d: read the answers, or send fewer requests at once on one connection", held, n, b), nil)
		return false
	}
	s.c.w.QueueMsg(&s.send, compressed, body)
	return true
}

// Finish answers s with status OK and trailers (metadata), after its queued
// messages. Trailers above the client's SETTINGS_MAX_HEADER_LIST_SIZE are
// replaced by an INTERNAL status naming the setting.
func (s *ServerStream) Finish(trailers []hpack.HeaderField) {
	s.c.w.Lock()
	defer s.c.w.Unlock()
	if s.done {
		return
	}
	if !s.hdrSent {
		s.failLocked(codes.OK, "", trailers) // trailers-only
		return
	}
	w := s.c.w
	tr := append(s.trail[:0], hpack.HeaderField{Name: "grpc-status", Value: "0"})
	tr = append(tr, trailers...)
	if n := HeaderListSize(tr); n > w.PeerMaxHeaderList() {
		w.Finish(&s.send, s.c.trailersTooLarge(n))
		s.c.endLocked(s, codes.Internal)
		return
	}
	w.Finish(&s.send, tr)
	s.c.endLocked(s, codes.OK)
}

// Fail answers s with status code and msg (and trailers, metadata): in the
// trailers after the response headers if they were sent, else as a
// trailers-only response. What s had queued is dropped.
func (s *ServerStream) Fail(code codes.Code, msg string, trailers []hpack.HeaderField) {
	s.c.w.Lock()
	s.failLocked(code, msg, trailers)
	s.c.w.Unlock()
}

func (s *ServerStream) failLocked(code codes.Code, msg string, trailers []hpack.HeaderField) {
	if s.done {
		return
	}
	w := s.c.w
	fields := make([]hpack.HeaderField, 0, 4+len(trailers))
	if !s.hdrSent {
		s.hdrSent = true
		fields = append(fields, respHeaders...)
	}
	headers := len(fields)
	fields = append(fields, hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(code))})
	if msg != "" {
		fields = append(fields, hpack.HeaderField{Name: "grpc-message", Value: EncodeGrpcMessage(msg)})
	}
	fields = append(fields, trailers...)
	if n := HeaderListSize(fields); n > w.PeerMaxHeaderList() && len(trailers) > 0 {
		fields = append(fields[:headers], s.c.trailersTooLarge(n)...)
		code = codes.Internal
	}
	if code == codes.OK {
		w.Finish(&s.send, fields) // after the queued messages
	} else {
		w.Drop(&s.send)
		w.Finish(&s.send, fields)
	}
	s.c.endLocked(s, code)
}

// trailersTooLarge are the trailers that replace ones above the client's
// SETTINGS_MAX_HEADER_LIST_SIZE (n bytes, the backend's trailer metadata).
// Called with w.mu held.
func (c *ServerConn) trailersTooLarge(n uint32) []hpack.HeaderField {
	return []hpack.HeaderField{{Name: "grpc-status", Value: strconv.Itoa(int(codes.Internal))}, {Name: "grpc-message", Value: EncodeGrpcMessage(fmt.Sprintf(
		"response trailers of %d bytes exceed the client's SETTINGS_MAX_HEADER_LIST_SIZE of %d (RFC 9113 §6.5.2): the backend's metadata is too large for this client", n, c.w.PeerMaxHeaderList()))}}
}

// RefuseHTTP answers a request that is not gRPC with a plain HTTP response:
// status, a text body (msg), END_STREAM; it counts as UNIMPLEMENTED.
func (s *ServerStream) RefuseHTTP(status, msg string) {
	w := s.c.w
	w.Lock()
	defer w.Unlock()
	if s.done {
		return
	}
	s.hdrSent = true
	w.Headers(s.id, false, []hpack.HeaderField{{Name: ":status", Value: status}, {Name: "content-type", Value: "text/plain; charset=utf-8"}})
	w.QueueData(&s.send, mem.BufferSlice{mem.SliceBuffer("vig: " + msg + "\n")})
	w.Finish(&s.send, nil)
	s.c.endLocked(s, codes.Unimplemented)
}

// Flush writes what s's methods (and others) have queued on the connection.
func (s *ServerStream) Flush() {
	s.c.w.Lock()
	s.c.w.Flush()
	s.c.w.Unlock()
}

// EncodeGrpcMessage percent-encodes a status message as gRPC's wire format asks
// (grpc-message).
func EncodeGrpcMessage(msg string) string {
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
