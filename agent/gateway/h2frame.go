package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/h2"
	"github.com/vig-edge/vig/netopt"
)

// vig speaks HTTP/2 itself, on both legs, instead of through grpc-go's transport.
//
// grpc-go gives every connection a reader goroutine, every RPC a handler goroutine
// and every connection a writer goroutine (loopy), so one proxied request crosses
// four hand-offs between goroutines, each a futex wake-up of another thread on a
// multi-core machine. vig needs none of that machinery: it reads a request's
// frames on the connection's reader goroutine, decides there (the scheduler is a
// state machine taken under a lock), and writes the request to the backend from
// that same goroutine; the backend connection's reader writes the answer to the
// client. A request therefore costs a read and a write on each side and the
// netpoller's wake-ups, as in an event-driven proxy.
//
// This file holds what both legs share beyond package h2 (framing, the receiving
// half h2.Reader, message assembly): the sending half of a connection (h2writer:
// frames assembled under a lock and written with one writev that never parks
// the caller) with flow control.

// errConnClosed: the connection ended (peer, error, or vig).
var errConnClosed = errors.New("connection closed")

// connReader is what a connection's reader reads: the event loop's coroutine for a
// connection the loop owns, else the socket read with raw syscalls (netopt.Reader).
func connReader(nc net.Conn) io.Reader {
	if lc, ok := nc.(*loopConn); ok {
		return lc
	}
	return netopt.NewReader(nc)
}

// windowUpdateFrame applies a WINDOW_UPDATE frame: to the connection's window, or
// to the send state lookup finds for its stream (nil: the stream has ended). lookup
// is called with w.mu held.
func windowUpdateFrame(r *h2.Reader, w *h2writer, h h2.FrameHeader, lookup func(uint32) *sendState) error {
	inc, err := r.WindowIncrement(h)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var st *sendState
	if h.Stream != 0 && lookup != nil {
		if st = lookup(h.Stream); st == nil {
			return nil
		}
	}
	err = w.windowUpdate(st, inc)
	w.flush()
	return err
}

var errCompressed = errors.New("compressed message")

// sendState is the sending side of one stream: DATA waiting for flow-control
// window, and what ends the stream once it is sent. Guarded by its h2writer's mu.
type sendState struct {
	id     uint32
	win    int64   // stream send window
	head   [5]byte // a gRPC message prefix sent before data (headN bytes of it left)
	headN  int
	data   mem.BufferSlice // queued DATA payload, owned
	inline [4]mem.Buffer   // data's storage for the usual few buffers
	off    int             // bytes of data[0] already sent
	end    bool            // end the stream once data is sent
	trail  []hpack.HeaderField
	closed bool // END_STREAM or RST_STREAM sent
	rst    bool // RST_STREAM sent
	queued bool // in the writer's blocked list
}

// h2writer is the sending half of a connection. Any goroutine may send: frames are
// assembled under mu and written at once with one writev, without parking the
// caller (netopt.TryWriter). What the socket does not take now is queued for a
// flusher goroutine that exists only while that queue is not empty.
type h2writer struct {
	mu sync.Mutex
	nc net.Conn // closed through it (it may be a loop's connection)
	sw sockWriter

	enc  *hpack.Encoder
	hbuf bytes.Buffer

	buf  []byte       // small frames of the batch being assembled
	vec  [][]byte     // the batch, in order: slices of buf and payload views
	refs []mem.Buffer // payload buffers referenced by vec, freed once written
	mark int          // start of buf not yet referenced by vec

	flushing bool // a flusher goroutine owns queue
	// ctlQueued counts the control frames vig queued in answer to the peer
	// (PING and SETTINGS ACKs, RST_STREAM) since the socket last took a write
	// while it was full: a peer that floods them and never reads is cut off
	// at maxQueuedControl (control).
	ctlQueued int
	closing   bool // close the connection once everything queued is written
	queue     [][]byte
	qrefs     []mem.Buffer
	err       error // the connection failed; nothing more is sent

	maxFrame int // peer's SETTINGS_MAX_FRAME_SIZE
	// The peer's SETTINGS_MAX_CONCURRENT_STREAMS and SETTINGS_MAX_HEADER_LIST_SIZE
	// (unlimited until announced, RFC 9113 §6.5.2).
	peerMaxStreams, peerMaxHeaderList uint32
	initWin                           int64 // peer's SETTINGS_INITIAL_WINDOW_SIZE
	connWin                           int64 // connection send window
	blocked                           []*sendState
	owedConn                          uint32 // WINDOW_UPDATE increment owed to the peer on stream 0

	// eachStream visits the send state of every open stream, and onClosed is
	// told when a stream's last frame has been queued (both set by the
	// connection that owns the writer; called with mu held).
	eachStream func(func(*sendState))
	onClosed   func(*sendState)
}

// sockWriter writes a connection: Writev never waits (it takes what the socket
// takes now), WriteAll waits as long as it must (the flusher's).
type sockWriter interface {
	Writev(bufs [][]byte) (int, error)
	WriteAll(bufs [][]byte) error
}

// connWriter is a sockWriter on a net.Conn.
type connWriter struct {
	tw *netopt.TryWriter
	c  net.Conn
}

func (w connWriter) Writev(bufs [][]byte) (int, error) { return w.tw.Writev(bufs) }
func (w connWriter) WriteAll(bufs [][]byte) error {
	b := net.Buffers(bufs)
	_, err := b.WriteTo(w.c)
	return err
}

func newH2Writer(nc net.Conn) (*h2writer, error) {
	var sw sockWriter
	if lc, ok := nc.(*loopConn); ok {
		sw = lc // the loop owns the socket
	} else {
		tw, err := netopt.NewTryWriter(nc)
		if err != nil {
			return nil, err
		}
		sw = connWriter{tw, nc}
	}
	w := &h2writer{nc: nc, sw: sw, maxFrame: h2.DefaultMaxFrame, initWin: h2.InitialWindow, connWin: h2.InitialWindow,
		peerMaxStreams: 1<<32 - 1, peerMaxHeaderList: 1<<32 - 1}
	w.enc = hpack.NewEncoder(&w.hbuf)
	return w, nil
}

// raw appends bytes (whole small frames) to the batch. Called with mu held.
func (w *h2writer) raw(b []byte) { w.buf = append(w.buf, b...) }

// cut closes the run of buf appended since the last cut into one vec entry.
func (w *h2writer) cut() {
	if len(w.buf) > w.mark {
		w.vec = append(w.vec, w.buf[w.mark:len(w.buf):len(w.buf)])
		w.mark = len(w.buf)
	}
}

// headers encodes fields as a header block on stream id (HEADERS, then
// CONTINUATION frames as the peer's frame size requires). Called with mu held;
// encoding under the lock keeps the HPACK state in the order blocks are sent.
func (w *h2writer) headers(id uint32, endStream bool, fields ...[]hpack.HeaderField) {
	w.hbuf.Reset()
	for _, fs := range fields {
		for _, f := range fs {
			w.enc.WriteField(f)
		}
	}
	block := w.hbuf.Bytes()
	typ, flags := http2.FrameHeaders, http2.Flags(0)
	if endStream {
		flags = http2.FlagHeadersEndStream
	}
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), w.maxFrame)
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders
		}
		w.buf = h2.AppendFrameHeader(w.buf, n, typ, f, id)
		w.buf = append(w.buf, block[:n]...)
		block = block[n:]
		typ, flags = http2.FrameContinuation, 0
	}
}

// queueData appends payload to s and sends what the windows allow. Ownership of
// payload passes to the writer. Called with mu held.
func (w *h2writer) queueData(s *sendState, payload mem.BufferSlice) {
	if s.closed {
		payload.Free()
		return
	}
	if s.data == nil {
		s.data = s.inline[:0]
	}
	s.data = append(s.data, payload...)
	w.pump(s)
}

// queueMsg queues one gRPC message: its 5-byte prefix, then body (owned by the
// writer from here on). The prefix travels in the frame buffer, not as a buffer
// of its own. Only one message may wait per stream at a time for the prefix to
// stay in order: a second one while the first is still queued goes as buffers.
// Called with mu held.
func (w *h2writer) queueMsg(s *sendState, compressed bool, body mem.BufferSlice) {
	var p [5]byte
	if compressed {
		p[0] = 1
	}
	binary.BigEndian.PutUint32(p[1:], uint32(body.Len()))
	if s.headN > 0 || len(s.data) > 0 {
		w.queueData(s, append(mem.BufferSlice{mem.SliceBuffer(p[:])}, body...))
		return
	}
	if s.closed {
		body.Free()
		return
	}
	s.head, s.headN = p, 5
	w.queueData(s, body)
}

// finish ends s after its queued data: with trailers, or with an empty END_STREAM
// DATA frame when trailers is nil. Called with mu held.
func (w *h2writer) finish(s *sendState, trailers []hpack.HeaderField) {
	if s.closed {
		return
	}
	s.end, s.trail = true, trailers
	w.pump(s)
}

// pump sends as much of s's data as the stream and connection windows allow, and
// the stream's end once its data is out. Called with mu held.
func (w *h2writer) pump(s *sendState) {
	for s.headN > 0 || len(s.data) > 0 {
		avail := min(s.win, w.connWin)
		if avail <= 0 {
			if !s.queued {
				s.queued = true
				w.blocked = append(w.blocked, s)
			}
			return
		}
		if s.headN > 0 {
			// The prefix, and what fits of the body, in one frame.
			k := int(min(int64(s.headN), avail))
			body := 0
			if k == s.headN && len(s.data) > 0 {
				body = int(min(int64(min(s.data[0].Len(), w.maxFrame-k)), avail-int64(k)))
			}
			w.buf = h2.AppendFrameHeader(w.buf, k+body, http2.FrameData, 0, s.id)
			w.buf = append(w.buf, s.head[5-s.headN:5-s.headN+k]...)
			s.headN -= k
			s.win -= int64(k)
			w.connWin -= int64(k)
			if body == 0 {
				continue
			}
			w.cut()
			b := s.data[0]
			w.vec = append(w.vec, b.ReadOnlyData()[:body])
			s.win -= int64(body)
			w.connWin -= int64(body)
			s.off = body
			if s.off == b.Len() {
				w.refs = append(w.refs, b)
				s.data[0] = nil
				s.data = s.data[1:]
				s.off = 0
			}
			continue
		}
		b := s.data[0]
		rest := b.Len() - s.off
		n := int(min(int64(min(rest, w.maxFrame)), avail))
		w.buf = h2.AppendFrameHeader(w.buf, n, http2.FrameData, 0, s.id)
		w.cut()
		w.vec = append(w.vec, b.ReadOnlyData()[s.off:s.off+n])
		s.win -= int64(n)
		w.connWin -= int64(n)
		s.off += n
		if s.off == b.Len() {
			w.refs = append(w.refs, b) // freed once written
			s.data[0] = nil
			s.data = s.data[1:]
			s.off = 0
		}
	}
	s.data = nil
	if !s.end || s.closed {
		return
	}
	s.closed = true
	if s.trail != nil {
		w.headers(s.id, true, s.trail)
		s.trail = nil
	} else {
		w.buf = h2.AppendFrameHeader(w.buf, 0, http2.FrameData, http2.FlagDataEndStream, s.id)
	}
	if w.onClosed != nil {
		w.onClosed(s)
	}
}

// reset ends s with RST_STREAM and drops what it had queued. Called with mu held.
// A stream whose END_STREAM is sent (half-closed) is still reset: the peer may
// be working on it.
func (w *h2writer) reset(s *sendState, code http2.ErrCode) {
	if s.rst {
		return
	}
	w.drop(s)
	s.closed, s.rst = true, true
	w.buf = h2.AppendRST(w.buf, s.id, code)
}

// drop frees what s has queued, without sending anything. Called with mu held.
func (w *h2writer) drop(s *sendState) {
	if s.off > 0 && len(s.data) > 0 {
		// Part of data[0] is in a batch not yet written: it is freed with it.
		w.refs = append(w.refs, s.data[0])
		s.data = s.data[1:]
	}
	s.data.Free()
	s.data, s.off, s.trail, s.headN = nil, 0, nil, 0
}

// windowUpdate applies a WINDOW_UPDATE from the peer (s nil: the connection's) and
// sends what it unblocks. Called with mu held.
func (w *h2writer) windowUpdate(s *sendState, inc uint32) error {
	if s != nil {
		if s.win+int64(inc) > 1<<31-1 {
			return errFlowControl
		}
		s.win += int64(inc)
		if !s.queued {
			w.pump(s)
		}
	} else {
		if w.connWin+int64(inc) > 1<<31-1 {
			return errFlowControl
		}
		w.connWin += int64(inc)
	}
	w.unblock()
	return nil
}

var errFlowControl = h2.ConnError{Code: http2.ErrCodeFlowControl, Msg: "window exceeds 2^31-1"}

// unblock retries the streams waiting for window. Called with mu held.
func (w *h2writer) unblock() {
	if len(w.blocked) == 0 {
		return
	}
	list := w.blocked
	w.blocked = nil
	for i, s := range list {
		s.queued = false
		list[i] = nil
		w.pump(s)
	}
	if w.blocked == nil {
		w.blocked = list[:0]
	}
}

// forget removes a finished stream from the blocked list. Called with mu held.
func (w *h2writer) forget(s *sendState) {
	if !s.queued {
		return
	}
	for i, b := range w.blocked {
		if b == s {
			w.blocked = append(w.blocked[:i], w.blocked[i+1:]...)
			break
		}
	}
	s.queued = false
}

// credit owes the peer n bytes of connection window; the WINDOW_UPDATE rides with
// the next batch, or goes now once half the window is owed.
func (w *h2writer) credit(n int, window uint32) (sendNow bool) {
	w.owedConn += uint32(n)
	return w.owedConn >= window/2
}

// closeWhenFlushed closes the connection once what is queued now has been
// written. Called with mu held.
func (w *h2writer) closeWhenFlushed() {
	w.closing = true
	if !w.flushing && len(w.vec) == 0 && len(w.buf) == w.mark {
		w.fail(errConnClosed)
	}
}

// flush writes the batch. Called with mu held; never parks the caller.
func (w *h2writer) flush() {
	defer func() {
		if w.closing && !w.flushing {
			w.fail(errConnClosed)
		}
	}()
	if w.owedConn > 0 {
		w.buf = h2.AppendWindowUpdate(w.buf, 0, w.owedConn)
		w.owedConn = 0
	}
	w.cut()
	if len(w.vec) == 0 {
		return
	}
	if w.err != nil {
		w.freeBatch()
		return
	}
	if w.flushing {
		w.queue = append(w.queue, w.vec...)
		w.qrefs = append(w.qrefs, w.refs...)
		w.newBatch()
		return
	}
	n, err := w.sw.Writev(w.vec)
	if err != nil {
		w.fail(err)
		w.freeBatch()
		return
	}
	total := 0
	for _, v := range w.vec {
		total += len(v)
	}
	if n == total {
		w.freeBatch()
		return
	}
	// The socket is full: a flusher takes the rest, blocking on its own goroutine.
	for n > 0 {
		if n >= len(w.vec[0]) {
			n -= len(w.vec[0])
			w.vec = w.vec[1:]
			continue
		}
		w.vec[0] = w.vec[0][n:]
		n = 0
	}
	w.queue = append(w.queue[:0], w.vec...)
	w.qrefs = append(w.qrefs[:0], w.refs...)
	w.newBatch()
	w.flushing = true
	go w.flusher()
}

// freeBatch releases a written (or abandoned) batch and reuses its storage.
func (w *h2writer) freeBatch() {
	for i, r := range w.refs {
		r.Free()
		w.refs[i] = nil
	}
	clear(w.vec)
	w.buf, w.vec, w.refs, w.mark = w.buf[:0], w.vec[:0], w.refs[:0], 0
}

// newBatch starts a batch in fresh storage: the old one now belongs to the queue.
func (w *h2writer) newBatch() {
	w.buf, w.vec, w.refs, w.mark = make([]byte, 0, 512), nil, nil, 0
}

func (w *h2writer) flusher() {
	for {
		w.mu.Lock()
		q, refs := w.queue, w.qrefs
		if len(q) == 0 || w.err != nil {
			for _, r := range refs {
				r.Free()
			}
			w.queue, w.qrefs, w.flushing = nil, nil, false
			if w.closing {
				w.fail(errConnClosed)
			}
			w.mu.Unlock()
			return
		}
		w.queue, w.qrefs = nil, nil
		w.mu.Unlock()
		err := w.sw.WriteAll(q)
		for _, r := range refs {
			r.Free()
		}
		w.mu.Lock()
		if err != nil {
			w.fail(err)
		}
		w.ctlQueued = 0 // the peer reads
		w.mu.Unlock()
	}
}

// maxQueuedControl is how many control frames answering the peer may wait
// while the socket does not take them (x/net's server has the same bound).
const maxQueuedControl = 10000

// control accounts for one control frame vig is about to queue in answer to
// the peer, and refuses it (ENHANCE_YOUR_CALM) past maxQueuedControl while the
// socket is full. Called with mu held.
func (w *h2writer) control() error {
	if !w.flushing {
		return nil
	}
	if w.ctlQueued++; w.ctlQueued > maxQueuedControl {
		return h2.ConnError{Code: http2.ErrCodeEnhanceYourCalm, Msg: fmt.Sprintf("more than %d control frames wait for a peer that does not read", maxQueuedControl)}
	}
	return nil
}

// fail marks the connection dead and closes it, so its reader ends too. Called
// with mu held.
func (w *h2writer) fail(err error) {
	if w.err == nil {
		w.err = err
		w.nc.Close()
	}
}

// goAway sends GOAWAY and, for an error, closes the connection once it is out.
func (w *h2writer) goAway(last uint32, code http2.ErrCode, debug string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = h2.AppendGoAway(w.buf, last, code, debug)
	w.flush()
}

// initWindowChanged applies a new SETTINGS_INITIAL_WINDOW_SIZE of the peer: every
// open stream's send window moves by the difference (RFC 9113 §6.9.2). Called with
// mu held.
func (w *h2writer) initWindowChanged(v int64) {
	delta := v - w.initWin
	w.initWin = v
	if w.eachStream != nil {
		w.eachStream(func(s *sendState) { s.win += delta })
	}
	w.unblock()
}

// initWindowOverflows reports whether SETTINGS_INITIAL_WINDOW_SIZE v would push
// a stream's send window above 2^31-1, a connection error (§6.9.2). Called
// with mu held.
func (w *h2writer) initWindowOverflows(v int64) bool {
	delta := v - w.initWin
	over := false
	if delta > 0 && w.eachStream != nil {
		w.eachStream(func(s *sendState) { over = over || s.win+delta > 1<<31-1 })
	}
	return over
}
