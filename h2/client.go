package h2

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// The client role: a connection on which vig opens the streams (gRPC calls to
// a server) and the peer answers them.
//
// ClientConn keeps the streams vig opened and what the peer's frames mean for
// them (RFC 9113 §5.1, §8.1): it checks each answer (:status, the header and
// trailer blocks, the flow-control windows, grpc-status), assembles its
// messages within the connection's Budget, gives the windows back, and tells
// each stream's ClientHandler what it got. A fault of the peer that concerns
// one stream is a stream error (RST_STREAM, the stream's handler told why,
// the other streams untouched); a connection error ends every stream. Each
// ending is a gRPC status error, ready to answer a client with.

// ClientHandler is what a stream's owner is told of the peer's answer. Every
// method is called on the connection's reader goroutine (the one that runs
// ClientConn.Run) with no lock of h2 held, so it may call the ClientConn.
type ClientHandler interface {
	// Headers is the answer's header block (:status 200 checked), unless the
	// answer is trailers-only. At most once, before any Message.
	Headers(fields []hpack.HeaderField)
	// Message is one complete gRPC message (owned by the callee) with its
	// compressed flag. An error (a gRPC status error) ends the stream: it is
	// reset CANCEL and ended with that error.
	Message(msg mem.BufferSlice, compressed bool) error
	// End is the stream's end, once: trail is the trailer block (the whole
	// block of a trailers-only answer; nil when there was none) and err its
	// grpc-status as an error (nil for OK), or why the stream failed (a gRPC
	// status error; UnprocessedError when the peer's GOAWAY says it never
	// processed the stream). Not called after Cancel has returned true.
	End(trail []hpack.HeaderField, err error)
}

// ClientConfig is a client connection's parameters and connection-level
// callbacks.
type ClientConfig struct {
	// Peer names the peer in errors and statuses ("backend").
	Peer string
	// Window is the receive window vig advertises per stream
	// (SETTINGS_INITIAL_WINDOW_SIZE) and for the connection; at least
	// InitialWindow.
	Window uint32
	// MaxMsg is the largest message accepted (its stream fails
	// RESOURCE_EXHAUSTED above it).
	MaxMsg int
	// Ready is called once, on the reader goroutine: with nil once the
	// peer's first SETTINGS are applied, or with the error that ended the
	// connection before them. Optional.
	Ready func(err error)
	// GoAway is told of the peer's GOAWAY (RFC 9113 §6.8), on the reader
	// goroutine with no lock held, before the streams above last end with an
	// UnprocessedError: no stream can be opened on the connection from then
	// on. Optional.
	GoAway func(last uint32, code http2.ErrCode, debug []byte)
}

// ClientStream is one stream vig opened: the owner allocates it (embedded in
// its own per-stream value, typically) and hands it to Open.
type ClientStream struct {
	id   uint32
	h    ClientHandler
	send SendState // guarded by the Writer's lock

	// Reader goroutine only.
	asm    Assembler
	gotHdr bool
	recv   RecvWindow
}

// ID is the stream's id, set by Open.
func (s *ClientStream) ID() uint32 { return s.id }

// ClientConn is the client role of one HTTP/2 connection. Open, Send,
// CloseSend, Cancel, Lookup, Close and Err may be called from any goroutine;
// Run is the reader goroutine.
//
// Its stream table is guarded by its Writer's lock, which no caller takes
// (doc.go, Locking).
type ClientConn struct {
	w    *Writer
	r    *Reader
	cfg  ClientConfig
	peer string // "the " + cfg.Peer, as FrameLoop names it

	// Guarded by w.mu.
	streams map[uint32]*ClientStream
	nextID  uint32
	goAway  bool
	failErr error

	// Reader goroutine only.
	settled     bool
	budget      Budget
	partials    Partials
	unprocessed UnprocessedError
}

// UnprocessedError ends a stream above the last-stream-id of the peer's GOAWAY:
// the peer did not process it (RFC 9113 §6.8), so it may be retried on another
// connection. It is a gRPC status error, UNAVAILABLE.
type UnprocessedError struct{ st *status.Status }

// Error implements error.
func (e UnprocessedError) Error() string { return e.st.Err().Error() }

// GRPCStatus is its status (UNAVAILABLE), for package status.
func (e UnprocessedError) GRPCStatus() *status.Status { return e.st }

// NewClientConn starts the client role on a connection whose sending half is w
// and receiving half r: it queues and flushes the preface, vig's SETTINGS (no
// push, cfg.Window, MaxHeaderList) and the connection's window. Run must follow.
func NewClientConn(w *Writer, r *Reader, cfg ClientConfig) *ClientConn {
	c := &ClientConn{w: w, r: r, cfg: cfg, peer: "the " + cfg.Peer, streams: map[uint32]*ClientStream{}, nextID: 1,
		budget: NewBudget(cfg.MaxMsg)}
	c.unprocessed = UnprocessedError{status.New(codes.Unavailable, cfg.Peer+" is going away (GOAWAY) and had not processed the call: retry")}
	c.budget.Reclaim = c.reclaim
	w.mu.Lock()
	w.EachStream = func(f func(*SendState)) {
		for _, s := range c.streams {
			f(&s.send)
		}
	}
	// The preface and SETTINGS are queued before the reader can run: the
	// peer sends its SETTINGS at once, and the reader's ACK must follow the
	// preface on the wire (a server that read the ACK first takes it for a
	// bogus preface and resets the connection).
	w.Raw([]byte(ClientPreface))
	w.QueueSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: cfg.Window},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: MaxHeaderList})
	w.QueueWindowUpdate(0, cfg.Window-InitialWindow)
	w.Flush()
	w.mu.Unlock()
	return c
}

// Run reads the connection until it ends, then ends every stream still open
// (UNAVAILABLE, "<peer> connection lost: why") and returns why it ended
// (ErrConnClosed: cleanly). A peer that broke the protocol is sent GOAWAY with
// the error's code first (RFC 9113 §5.4.1).
func (c *ClientConn) Run() error {
	err := FrameLoop(c.r, c.w, c.peer, c.cfg.Window, (*clientStreams)(c))
	if !c.settled && c.cfg.Ready != nil {
		c.settled = true
		c.cfg.Ready(err)
	}
	var ce ConnError
	if errors.As(err, &ce) {
		c.w.GoAway(0, ce.Code, ce.Msg)
	}
	c.Close(err)
	c.w.mu.Lock()
	err = c.failErr
	ended := make([]*ClientStream, 0, len(c.streams))
	for id, s := range c.streams {
		delete(c.streams, id)
		c.w.Forget(&s.send)
		c.w.Drop(&s.send)
		s.send.Closed = true
		ended = append(ended, s)
	}
	c.w.mu.Unlock()
	lost := status.Error(codes.Unavailable, fmt.Sprintf("%s connection lost: %v", c.cfg.Peer, err))
	for _, s := range ended {
		s.asm.Reset(&c.budget)
		s.h.End(nil, lost)
	}
	return err
}

// Close ends the connection (err says why; nil: cleanly): no stream opens from
// now on, the socket is closed, and Run ends the open streams and returns.
func (c *ClientConn) Close(err error) {
	if err == nil || errors.Is(err, ErrConnClosed) {
		err = ErrConnClosed
	}
	c.w.mu.Lock()
	if c.failErr == nil {
		c.failErr = err
	}
	c.w.Fail(ErrConnClosed)
	c.w.mu.Unlock()
}

// Err is why the connection ended, nil while it works.
func (c *ClientConn) Err() error {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.failErr != nil {
		return c.failErr
	}
	return c.w.Err()
}

// Open starts stream s for h: its HEADERS with fields are queued, to be written
// with the stream's first Send or CloseSend (one write for the call's frames),
// the request's end to follow. opened, when not nil, is told the stream's id before any
// answer can arrive; it runs with the connection's lock held and must do no
// more than record it (it must not call the ClientConn). It fails with
// ErrConnClosed when the connection ended or the peer sent GOAWAY (a new
// connection is needed), and with a gRPC status error when the peer's
// SETTINGS_MAX_CONCURRENT_STREAMS are all in use (UNAVAILABLE) or the fields
// exceed its SETTINGS_MAX_HEADER_LIST_SIZE (INTERNAL; RFC 9113 §6.5.2, refused
// here as grpc-go's client does rather than sent to be reset).
func (c *ClientConn) Open(s *ClientStream, h ClientHandler, opened func(id uint32), fields ...[]hpack.HeaderField) error {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.goAway || c.w.Err() != nil || c.failErr != nil {
		return ErrConnClosed
	}
	if max := c.w.PeerMaxStreams(); uint32(len(c.streams)) >= max { // §5.1.2
		return status.Errorf(codes.Unavailable, "%s allows %d concurrent streams and all are in use", c.cfg.Peer, max)
	}
	if c.nextID >= 1<<31-1 { // stream ids exhausted (§5.1.1): a new connection is needed
		c.goAway = true
		return ErrConnClosed
	}
	if size, max := HeaderListSize(fields...), c.w.PeerMaxHeaderList(); size > max {
		return status.Errorf(codes.Internal, "request headers of %d bytes exceed the %s's SETTINGS_MAX_HEADER_LIST_SIZE of %d: send less metadata", size, c.cfg.Peer, max)
	}
	*s = ClientStream{id: c.nextID, h: h, recv: NewRecvWindow(c.cfg.Window)}
	c.nextID += 2
	s.send.Init(s.id, c.w.InitWin())
	if opened != nil {
		opened(s.id)
	}
	c.streams[s.id] = s
	c.w.Headers(s.id, false, fields...)
	return nil
}

// IDsExhausted reports whether the connection has no stream id left (Open
// fails ErrConnClosed from then on).
func (c *ClientConn) IDsExhausted() bool {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.nextID >= 1<<31-1
}

// Send queues one message of s (msg owned from here on; prefixed, with its
// compressed flag) and, with end, the request's end, and writes what the
// windows allow. It reports false, freeing msg, when s has ended already.
func (c *ClientConn) Send(s *ClientStream, compressed bool, msg mem.BufferSlice, end bool) bool {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.streams[s.id] != s {
		msg.Free()
		return false
	}
	c.w.QueueMsg(&s.send, compressed, msg)
	if end {
		c.w.Finish(&s.send, nil)
	}
	c.w.Flush()
	return true
}

// SendStart queues the start of one uncompressed message of s, size bytes of
// which head, then more (both owned), are the first, and with end the
// request's end; the rest follows with SendMore, as it arrives (cut-through).
// What is queued goes in one write. It reports false, freeing head and more,
// when s has ended.
func (c *ClientConn) SendStart(s *ClientStream, size int, head, more mem.BufferSlice, end bool) bool {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.streams[s.id] != s {
		head.Free()
		more.Free()
		return false
	}
	if len(more) > 0 {
		head = slices.Concat(head, more) // not into head's array: the caller's
	}
	c.w.QueueMsgStart(&s.send, false, size, head)
	if end {
		c.w.Finish(&s.send, nil)
	}
	c.w.Flush()
	return true
}

// SendMore queues more bytes of the message SendStart began (owned) and,
// with end, the request's end. The caller sends exactly the size SendStart
// declared. It reports false, freeing b, when s has ended.
func (c *ClientConn) SendMore(s *ClientStream, b mem.BufferSlice, end bool) bool {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.streams[s.id] != s {
		b.Free()
		return false
	}
	c.w.QueueData(&s.send, b)
	if end {
		c.w.Finish(&s.send, nil)
	}
	c.w.Flush()
	return true
}

// CloseSend ends s's request (END_STREAM after what is queued).
func (c *ClientConn) CloseSend(s *ClientStream) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.streams[s.id] == s {
		c.w.Finish(&s.send, nil)
		c.w.Flush()
	}
}

// Cancel resets s with code (RST_STREAM) if it is still open and reports
// whether it was. True means that its handler will not be told its End, and
// that the caller ends it; a Headers or Message call already under way on the
// reader goroutine may still be running (the handler orders the two).
func (c *ClientConn) Cancel(s *ClientStream, code http2.ErrCode) bool {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.streams[s.id] != s {
		return false
	}
	c.removeLocked(s)
	c.w.Reset(&s.send, code)
	c.w.Flush()
	return true
}

// Lookup is the handler of open stream id, nil when there is none.
func (c *ClientConn) Lookup(id uint32) ClientHandler {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if s := c.streams[id]; s != nil {
		return s.h
	}
	return nil
}

// removeLocked takes s out of the table. With w.mu held.
func (c *ClientConn) removeLocked(s *ClientStream) {
	delete(c.streams, s.id)
	c.w.Forget(&s.send)
	// A connection the peer sent GOAWAY on closes once its last stream has
	// ended.
	if c.goAway && len(c.streams) == 0 {
		c.w.CloseWhenFlushed()
		c.w.Flush() // what is queued goes now, and the connection closes after it
	}
}

// clientStreams is the client role's stream table as FrameLoop sees it.
type clientStreams ClientConn

// Idle: a stream vig never opened; a frame on it is a connection error
// PROTOCOL_ERROR (§5.1 idle).
func (t *clientStreams) Idle(id uint32) bool {
	st, _ := (*ClientConn)(t).state(id)
	return st == StateIdle
}

func (t *clientStreams) Headers(h FrameHeader) error     { return (*ClientConn)(t).headers(h) }
func (t *clientStreams) Data(h FrameHeader, n int) error { return (*ClientConn)(t).data(h, n) }

// Reset: the peer reset the stream; it ends with the code's status.
func (t *clientStreams) Reset(id uint32, code http2.ErrCode) error {
	c := (*ClientConn)(t)
	c.w.mu.Lock()
	s := c.streams[id]
	if s != nil {
		s.send.Closed, s.send.Rst = true, true // reset by the peer: vig sends nothing more on it
		c.w.Drop(&s.send)
		c.removeLocked(s)
	}
	c.w.mu.Unlock()
	if s != nil {
		s.asm.Reset(&c.budget)
		s.h.End(nil, c.rstError(code))
	}
	return nil
}

// SendState is called with the Writer's lock held (it guards the table).
func (t *clientStreams) SendState(id uint32) *SendState {
	if s := t.streams[id]; s != nil {
		return &s.send
	}
	return nil
}

// StreamError: the peer's fault stays with that stream.
func (t *clientStreams) StreamError(id uint32, code http2.ErrCode, why string) {
	c := (*ClientConn)(t)
	c.streamError(id, code, status.Error(codes.Internal, c.cfg.Peer+" sent "+why))
}

func (t *clientStreams) GoAway(last uint32, code http2.ErrCode, debug []byte) error {
	return (*ClientConn)(t).goneAway(last, code, debug)
}

// Settings: the peer's first SETTINGS make the connection ready.
func (t *clientStreams) Settings() {
	if !t.settled {
		t.settled = true
		if t.cfg.Ready != nil {
			t.cfg.Ready(nil)
		}
	}
}

func (t *clientStreams) PingAck([8]byte) {} // vig sends no PING with data

// state is stream id's state as the peer's frames find it (§5.1), and the
// stream while it is in the table. vig opens odd streams in order; a stream
// leaves the table when it ends (the peer's END_STREAM or RST_STREAM, a stream
// error, Cancel), so half-closed (remote) is never seen here, and frames on a
// stream that left it are ignored (they may have been in flight).
func (c *ClientConn) state(id uint32) (StreamState, *ClientStream) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if id%2 == 0 || id >= c.nextID {
		return StateIdle, nil
	}
	s := c.streams[id]
	switch {
	case s == nil:
		return StateClosed, nil
	case s.send.Closed:
		return StateHalfClosedLocal, s // the request is sent whole (or vig stopped sending)
	}
	return StateOpen, s
}

// endLocked takes s out of the table as it ends on the reader goroutine; with
// reset (the peer has not ended the stream, or vig's side of it is not sent
// whole) it is reset CANCEL, so that it does not stay open at the peer. It
// reports false when s had ended already. With w.mu held.
func (c *ClientConn) endLocked(s *ClientStream, reset bool) bool {
	if c.streams[s.id] != s {
		return false
	}
	reset = reset || !s.send.Closed
	if reset {
		c.w.Reset(&s.send, http2.ErrCodeCancel)
	}
	c.w.Drop(&s.send)
	s.send.Closed = true
	c.removeLocked(s)
	if reset {
		c.w.Flush() // else what the connection is owed rides with the next batch
	}
	return true
}

// end ends s on the reader goroutine (endLocked) and tells its handler.
func (c *ClientConn) end(s *ClientStream, reset bool, trail []hpack.HeaderField, err error) {
	c.w.mu.Lock()
	ok := c.endLocked(s, reset)
	c.w.mu.Unlock()
	if ok {
		s.asm.Reset(&c.budget)
		s.h.End(trail, err)
	}
}

// streamError resets stream id with code (§5.4.2) and ends it with err: the
// peer's fault stays with that stream, the connection goes on. Reader goroutine.
func (c *ClientConn) streamError(id uint32, code http2.ErrCode, err error) {
	c.w.mu.Lock()
	s := c.streams[id]
	if s != nil {
		c.w.Drop(&s.send)
		s.send.Closed, s.send.Rst = true, true
		c.removeLocked(s)
	}
	c.w.QueueRST(id, code)
	c.w.Flush()
	c.w.mu.Unlock()
	if s != nil {
		s.asm.Reset(&c.budget)
		s.h.End(nil, err)
	}
}

// headers handles a HEADERS frame: the answer's header block, or its trailers.
func (c *ClientConn) headers(h FrameHeader) error {
	err := c.r.HeaderBlock(h)
	if err != nil && err != ErrHeaderListTooBig {
		return err
	}
	st, s := c.state(h.Stream)
	switch {
	case h.Stream == 0 || st == StateIdle:
		return ProtocolError("%s sent HEADERS on stream %d, which vig never opened", c.cfg.Peer, h.Stream) // §5.1 idle, §8.4
	case st == StateClosed:
		return nil // vig reset it (or it failed): frames in flight are ignored (§5.1 closed)
	}
	end := h.Has(http2.FlagHeadersEndStream)
	if err == ErrHeaderListTooBig {
		c.end(s, !end, nil, status.Errorf(codes.Internal, "%s sent a header list larger than %d bytes", c.cfg.Peer, MaxHeaderList))
		return nil
	}
	fields := c.r.Fields
	if !s.gotHdr {
		s.gotHdr = true
		if !end {
			if err := httpStatus(c.cfg.Peer, fields); err != nil {
				c.end(s, true, nil, err) // a non-200 answer: the stream is reset, not left open
				return nil
			}
			s.h.Headers(fields)
			return nil
		}
		// A trailers-only answer: grpc-status decides.
	} else if why := CheckTrailers(fields); why != "" {
		c.streamError(h.Stream, http2.ErrCodeProtocol, status.Errorf(codes.Internal, "%s sent malformed trailers: %s (RFC 9113)", c.cfg.Peer, why))
		return nil
	}
	if !end {
		c.streamError(h.Stream, http2.ErrCodeProtocol, status.Errorf(codes.Internal, "%s sent a second header block without END_STREAM (RFC 9113 §8.1)", c.cfg.Peer)) // malformed response
		return nil
	}
	rpcErr, ok := grpcStatus(fields)
	if !ok {
		rpcErr = status.Errorf(codes.Internal, "%s ended the stream without grpc-status", c.cfg.Peer)
	}
	c.end(s, false, fields, rpcErr)
	return nil
}

// errHandler: a handler's Message refused a message (its error is kept aside).
var errHandler = errors.New("message refused")

// data handles a DATA frame's n bytes of data on a stream that is not idle.
func (c *ClientConn) data(h FrameHeader, n int) error {
	_, s := c.state(h.Stream)
	// Closed (vig reset it, or it ended): s is nil and the frame is dropped,
	// counted for the connection's window (§5.1 closed, §6.9).
	if s != nil && !s.recv.Fits(h.Length) {
		// More than the stream's window: a stream error FLOW_CONTROL_ERROR
		// (§6.9.1); the frame still counts for the connection's window.
		c.streamError(h.Stream, http2.ErrCodeFlowControl, status.Errorf(codes.Internal, "%s sent more than the stream's flow-control window", c.cfg.Peer))
		s = nil
	}
	if s == nil {
		return c.r.Discard(n)
	}
	s.recv.Take(h.Length)
	var refused error
	left, err := s.asm.Read(c.r.Br, n, c.cfg.MaxMsg, &c.budget, func(msg mem.BufferSlice, compressed bool) error {
		if err := s.h.Message(msg, compressed); err != nil {
			refused = err
			return errHandler
		}
		return nil
	})
	// A type switch, not errors.As: its target would escape, an allocation
	// per DATA frame.
	var fail error
	switch err.(type) {
	case ErrMsgTooLarge, ErrBudget:
		fail = status.Error(codes.ResourceExhausted, c.cfg.Peer+" answer: "+err.Error())
	default:
		if err == errHandler {
			fail = refused
		}
	}
	if fail != nil {
		c.end(s, true, nil, fail)
		err = c.r.Discard(left)
	}
	if err != nil {
		return err
	}
	s.recv.Owe(h.Length)
	if c.partials.Note(&s.asm, s.id) {
		c.reclaim(&s.asm)
	}
	endStream := h.Has(http2.FlagDataEndStream)
	// Every stream gets its window back: an answer larger than the window
	// (but within MaxMsg) would otherwise stall. What it holds meanwhile is
	// bounded by MaxMsg and the connection's Budget.
	if !endStream {
		c.w.mu.Lock()
		if c.streams[s.id] == s {
			if inc := s.recv.Due(); inc > 0 {
				c.w.QueueWindowUpdate(s.id, inc) // sent with the connection's (FrameLoop)
			}
		}
		c.w.mu.Unlock()
		return nil
	}
	c.end(s, false, nil, status.Errorf(codes.Internal, "%s ended the stream without trailers", c.cfg.Peer))
	return nil
}

// reclaim frees what the incomplete answers of ended streams hold (Budget.Reclaim).
func (c *ClientConn) reclaim(skip *Assembler) {
	c.w.mu.Lock()
	c.partials.Sweep(skip, &c.budget, func(id uint32, a *Assembler) bool {
		s := c.streams[id]
		return s == nil || &s.asm != a
	})
	c.w.mu.Unlock()
}

// goneAway: the peer will process no stream above last (§6.8). Those end with
// an UnprocessedError; the rest finish while no new stream opens, and the
// connection closes after the last.
func (c *ClientConn) goneAway(last uint32, code http2.ErrCode, debug []byte) error {
	if c.cfg.GoAway != nil {
		c.cfg.GoAway(last, code, debug)
	}
	c.w.mu.Lock()
	c.goAway = true
	var refused []*ClientStream
	for id, s := range c.streams {
		if id > last {
			c.w.Drop(&s.send)
			s.send.Closed = true
			delete(c.streams, id)
			c.w.Forget(&s.send)
			refused = append(refused, s)
		}
	}
	idle := len(c.streams) == 0
	c.w.mu.Unlock()
	for _, s := range refused {
		s.asm.Reset(&c.budget)
		s.h.End(nil, c.unprocessed)
	}
	if idle {
		return ErrConnClosed
	}
	return nil
}

// rstError is the status a stream the peer reset with code ends with.
func (c *ClientConn) rstError(code http2.ErrCode) error {
	switch code {
	case http2.ErrCodeRefusedStream:
		return status.Error(codes.Unavailable, c.cfg.Peer+" refused the stream")
	case http2.ErrCodeCancel:
		return status.Error(codes.Canceled, c.cfg.Peer+" cancelled the stream")
	case http2.ErrCodeEnhanceYourCalm:
		return status.Error(codes.ResourceExhausted, c.cfg.Peer+": enhance your calm")
	}
	return status.Errorf(codes.Internal, "%s reset the stream: %v", c.cfg.Peer, code)
}

// httpStatus checks an answer's :status (gRPC maps other HTTP statuses to codes).
func httpStatus(peer string, fields []hpack.HeaderField) error {
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
		return status.Errorf(code, "%s answered HTTP status %s", peer, f.Value)
	}
	return status.Errorf(codes.Internal, "%s response without :status", peer)
}

// grpcStatus reads grpc-status and grpc-message (nil for OK); ok is false
// without grpc-status.
func grpcStatus(fields []hpack.HeaderField) (err error, ok bool) {
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

// decodeGrpcMessage undoes grpc-message's percent-encoding.
func decodeGrpcMessage(msg string) string {
	if !strings.Contains(msg, "%") {
		return msg
	}
	var b strings.Builder
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
