package h2

import (
	"encoding/binary"

	"golang.org/x/net/http2"
)

// The frame loop: one for both roles.
//
// FrameLoop reads a connection's frames and decides, for each, what the
// connection itself must do (SETTINGS, PING, connection-level WINDOW_UPDATE, the
// checks every RST_STREAM, WINDOW_UPDATE, PRIORITY and GOAWAY must pass whatever
// the stream) and hands the rest to the role's stream table (Streams): a server
// leg's table of client streams, a client leg's table of the streams vig opened.
// The section of RFC 9113 each rule comes from is beside it.

// StreamState is a stream's state as RFC 9113 §5.1 names it. vig neither pushes
// nor is pushed to, so the reserved states never occur.
type StreamState uint8

const (
	StateIdle             StreamState = iota // not yet opened
	StateOpen                                // both sides may send
	StateHalfClosedLocal                     // vig has sent END_STREAM (or answered); the peer may still send
	StateHalfClosedRemote                    // the peer sent END_STREAM (or reset it); vig may still send
	StateClosed                              // no longer in the table (or never opened: skipped)
)

var stateNames = [...]string{"idle", "open", "half-closed (local)", "half-closed (remote)", "closed"}

func (s StreamState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "invalid"
}

// Streams is one role's stream table, as FrameLoop hands it the frames that
// concern its streams. Every method runs on the connection's reader goroutine,
// the one that runs FrameLoop, except SendState (below).
type Streams interface {
	// Idle reports whether id names a stream in state idle (§5.1): one the peer
	// has not opened yet (server role) or one vig never opened (client role). A
	// RST_STREAM or WINDOW_UPDATE on it is a connection error PROTOCOL_ERROR.
	Idle(id uint32) bool
	// Headers handles a HEADERS frame whose header h has been read; it reads
	// the header block (Reader.HeaderBlock). An error ends the connection.
	Headers(h FrameHeader) error
	// Data handles a DATA frame on a stream that is not idle: it reads (or
	// discards) the n bytes of data from the Reader, and gives its stream
	// window back as it sees fit (RecvWindow). FrameLoop has taken the frame
	// from the connection's window, read the pad length, and discards the
	// padding and gives the connection's window back after it. An error ends the
	// connection.
	Data(h FrameHeader, n int) error
	// Reset is a RST_STREAM from the peer, checked: stream id is not 0, not
	// idle, and code is the frame's.
	Reset(id uint32, code http2.ErrCode) error
	// SendState is what a stream WINDOW_UPDATE credits: id's send state, or nil
	// when the stream is closed (a WINDOW_UPDATE may still be in flight, §5.1).
	// It is called with the Writer's lock held.
	SendState(id uint32) *SendState
	// StreamError resets stream id with code: a stream error (§5.4.2) FrameLoop
	// found, why says which rule it broke.
	StreamError(id uint32, code http2.ErrCode, why string)
	// GoAway is the peer's GOAWAY, checked: it will open (or process) no stream
	// above last. An error ends the connection (ErrConnClosed: cleanly).
	GoAway(last uint32, code http2.ErrCode, debug []byte) error
	// Settings tells that the peer's SETTINGS (not an ACK) were applied and
	// acknowledged.
	Settings()
	// PingAck is the peer's acknowledgement of a PING vig sent with data.
	PingAck(data [8]byte)
}

// FrameLoop reads frames from r until one fails or a frame is a connection
// error, and returns that error. w is the connection's writer, s its stream
// table; peer names the other side in errors ("a client", "the backend");
// connWindow is the connection's receive window vig advertised.
func FrameLoop(r *Reader, w *Writer, peer string, connWindow uint32, s Streams) error {
	l := loop{r: r, w: w, peer: peer, s: s, connWindow: connWindow, recvConn: int64(connWindow)}
	for {
		h, err := r.ReadHeader()
		if err != nil {
			return err
		}
		if err := l.frame(h); err != nil {
			return err
		}
	}
}

// loop is a connection's frame loop.
type loop struct {
	r          *Reader
	w          *Writer
	peer       string
	s          Streams
	connWindow uint32
	recvConn   int64 // what the peer may still send on the connection
	given      int64 // Writer.connGiven when recvConn was last brought up to date
}

// frame handles one frame whose header has been read.
func (l *loop) frame(h FrameHeader) error {
	r, w, peer, s := l.r, l.w, l.peer, l.s
	switch h.Type {
	case http2.FrameData:
		return l.data(h)
	case http2.FrameHeaders:
		return s.Headers(h)
	case http2.FrameRSTStream:
		p, err := r.Payload(h)
		if err != nil {
			return err
		}
		switch {
		case h.Stream == 0:
			return ProtocolError("RST_STREAM on stream 0") // §6.4
		case len(p) != 4:
			return ConnError{Code: http2.ErrCodeFrameSize, Msg: "RST_STREAM of the wrong size"} // §6.4
		case s.Idle(h.Stream):
			return ProtocolError("RST_STREAM on idle stream %d", h.Stream) // §5.1 idle, §6.4
		}
		return s.Reset(h.Stream, http2.ErrCode(binary.BigEndian.Uint32(p)))
	case http2.FrameSettings:
		if err := SettingsFrame(r, w, h); err != nil {
			return err
		}
		if !h.Has(http2.FlagSettingsAck) {
			s.Settings()
		}
		return nil
	case http2.FramePing:
		if h.Has(http2.FlagPingAck) && h.Length == 8 && h.Stream == 0 {
			p, err := r.Payload(h)
			if err == nil {
				s.PingAck([8]byte(p))
			}
			return err
		}
		return PingFrame(r, w, h)
	case http2.FrameWindowUpdate:
		return windowUpdate(r, w, s, h)
	case http2.FrameGoAway:
		p, err := r.Payload(h)
		switch {
		case err != nil:
			return err
		case h.Stream != 0:
			return ProtocolError("GOAWAY on stream %d", h.Stream) // §6.8
		case len(p) < 8:
			return ConnError{Code: http2.ErrCodeFrameSize, Msg: "GOAWAY too short"} // §6.8
		}
		return s.GoAway(binary.BigEndian.Uint32(p)&0x7fffffff, http2.ErrCode(binary.BigEndian.Uint32(p[4:])), p[8:])
	case http2.FramePriority:
		// vig does not prioritise (§5.3.2 lets it), but a malformed PRIORITY
		// is still an error.
		p, err := r.Payload(h)
		switch {
		case err != nil:
			return err
		case h.Stream == 0:
			return ProtocolError("PRIORITY on stream 0") // §6.3
		case len(p) != 5:
			s.StreamError(h.Stream, http2.ErrCodeFrameSize, "PRIORITY of the wrong size (RFC 9113 §6.3)")
		case binary.BigEndian.Uint32(p)&0x7fffffff == h.Stream:
			s.StreamError(h.Stream, http2.ErrCodeProtocol, "a stream depending on itself (RFC 9113 §5.3.1)")
		}
		return nil
	case http2.FramePushPromise, http2.FrameContinuation:
		// vig disables push (SETTINGS_ENABLE_PUSH 0) and never pushes; a
		// CONTINUATION outside a header block is out of place (§6.10).
		return ProtocolError("unexpected %v frame from %s", h.Type, peer) // §8.4, §6.10
	default: // unknown extension frames are ignored (§5.5)
		return r.Discard(int(h.Length))
	}
}

// data takes a DATA frame from the connection's window (§6.9.1), hands its data
// to the stream table, and gives the window back.
func (l *loop) data(h FrameHeader) error {
	if h.Stream == 0 {
		return ProtocolError("DATA on stream 0 from %s", l.peer) // §6.1
	}
	// The window reaches as far as the WINDOW_UPDATEs written so far (not
	// those still owed: a peer may not count on them).
	given := l.w.connGiven.Load()
	l.recvConn += given - l.given
	l.given = given
	n, pad, err := l.r.DataStart(h, &l.recvConn, l.peer)
	if err != nil {
		return err
	}
	if l.s.Idle(h.Stream) {
		return ProtocolError("DATA on idle stream %d from %s", h.Stream, l.peer) // §5.1 idle
	}
	if err := l.s.Data(h, n); err != nil {
		return err
	}
	if err := l.r.Discard(pad); err != nil {
		return err
	}
	// Every frame is given back to the connection's window, one the stream
	// dropped too, on receipt.
	l.w.mu.Lock()
	if l.w.Credit(int(h.Length), l.connWindow) {
		l.w.Flush()
	}
	l.w.mu.Unlock()
	return nil
}

// windowUpdate credits a WINDOW_UPDATE to the connection's or a stream's send
// window (§6.9).
func windowUpdate(r *Reader, w *Writer, s Streams, h FrameHeader) error {
	p, err := r.Payload(h)
	if err != nil {
		return err
	}
	if len(p) != 4 {
		return ConnError{Code: http2.ErrCodeFrameSize, Msg: "WINDOW_UPDATE of the wrong size"} // §6.9
	}
	inc := binary.BigEndian.Uint32(p) & 0x7fffffff
	if h.Stream == 0 {
		if inc == 0 {
			return ProtocolError("WINDOW_UPDATE with increment 0") // §6.9
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		err := w.WindowUpdate(nil, inc) // above 2^31-1: FLOW_CONTROL_ERROR (§6.9.1)
		w.Flush()
		return err
	}
	if s.Idle(h.Stream) {
		return ProtocolError("WINDOW_UPDATE on idle stream %d", h.Stream) // §5.1 idle
	}
	if inc == 0 {
		s.StreamError(h.Stream, http2.ErrCodeProtocol, "a stream WINDOW_UPDATE of 0 (RFC 9113 §6.9)")
		return nil
	}
	w.mu.Lock()
	st := s.SendState(h.Stream)
	if st == nil || st.Rst {
		w.mu.Unlock()
		return nil // closed: a WINDOW_UPDATE may still arrive (§5.1)
	}
	err = w.WindowUpdate(st, inc)
	w.Flush()
	w.mu.Unlock()
	if err != nil {
		s.StreamError(h.Stream, http2.ErrCodeFlowControl, "a WINDOW_UPDATE took the stream's send window above 2^31-1 (RFC 9113 §6.9.1)")
	}
	return nil
}
