package h2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/netopt"
)

// ErrConnClosed: the connection ended (peer, error, or vig).
var ErrConnClosed = errors.New("connection closed")

// SendState is the sending side of one stream: DATA waiting for flow-control
// window, and what ends the stream once it is sent. Guarded by its Writer's mu.
type SendState struct {
	id     uint32
	win    int64   // stream send window
	head   [5]byte // a gRPC message prefix sent before data (headN bytes of it left)
	headN  int
	data   mem.BufferSlice // queued DATA payload, owned
	inline [4]mem.Buffer   // data's storage for the usual few buffers
	off    int             // bytes of data[0] already sent
	end    bool            // end the stream once data is sent
	// msgLeft is how much of the message QueueMsgStart began is still to be
	// queued: while it is above zero, pump sends only full frames.
	msgLeft int
	trail   []hpack.HeaderField
	Closed  bool // END_STREAM or RST_STREAM sent
	Rst     bool // RST_STREAM sent
	queued  bool // in the writer's blocked list
}

// Writer is the sending half of a connection. Any goroutine may send: frames are
// assembled under mu and written at once with one writev, without parking the
// caller (netopt.TryWriter). What the socket does not take now is queued for a
// flusher goroutine that exists only while that queue is not empty.
type Writer struct {
	mu sync.Mutex
	nc net.Conn // closed through it
	sw SockWriter

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
	// at MaxQueuedControl (control).
	ctlQueued int
	closing   bool // close the connection once everything queued is written
	queue     [][]byte
	qrefs     []mem.Buffer
	qbuf      []byte // the frame buffer the queue's first batch was cut from
	// spare is the storage of a batch the flusher has written, taken by the
	// next newBatch: a large message that fills the socket does not grow a
	// fresh batch every time.
	spareBuf  []byte
	spareVec  [][]byte
	spareRefs []mem.Buffer
	err       error // the connection failed; nothing more is sent

	maxFrame int // peer's SETTINGS_MAX_FRAME_SIZE
	// The peer's SETTINGS_MAX_CONCURRENT_STREAMS and SETTINGS_MAX_HEADER_LIST_SIZE
	// (unlimited until announced, RFC 9113 §6.5.2).
	peerMaxStreams, peerMaxHeaderList uint32
	initWin                           int64 // peer's SETTINGS_INITIAL_WINDOW_SIZE
	connWin                           int64 // connection send window
	blocked                           []*SendState
	owedConn                          uint32 // WINDOW_UPDATE increment owed to the peer on stream 0
	// connGiven is the sum of those increments written so far: the frame
	// loop, which reads without the lock, sees from it how far the peer's
	// connection window reaches.
	connGiven atomic.Int64
	// held is the payload the writer owns and has not written: queued for
	// window, or in a batch the socket has not taken (Held). Added by
	// QueueData, taken off as each buffer is freed, written or dropped; the
	// flusher frees outside mu, so it is atomic.
	held atomic.Int64

	// eachStream visits the send state of every open stream, and onClosed is
	// told when a stream's last frame has been queued (both set by the
	// connection that owns the writer; called with mu held).
	EachStream func(func(*SendState))
	OnClosed   func(*SendState)
}

// SockWriter writes a connection: Writev never waits (it takes what the socket
// takes now), WriteAll waits as long as it must (the flusher's).
type SockWriter interface {
	Writev(bufs [][]byte) (int, error)
	WriteAll(bufs [][]byte) error
}

// ConnWriter is a SockWriter on a net.Conn.
type ConnWriter struct {
	tw *netopt.TryWriter
	c  net.Conn
}

// Writev implements SockWriter.
func (w ConnWriter) Writev(bufs [][]byte) (int, error) { return w.tw.Writev(bufs) }

// WriteAll implements SockWriter.
func (w ConnWriter) WriteAll(bufs [][]byte) error {
	if err := w.tw.WriteAll(bufs); err != netopt.ErrNotSocket {
		return err
	}
	b := net.Buffers(bufs) // not a socket (TLS): the connection's own blocking write
	_, err := b.WriteTo(w.c)
	return err
}

// Raw appends bytes (whole small frames) to the batch. Called with mu held.
func (w *Writer) Raw(b []byte) { w.buf = append(w.buf, b...) }

// cut closes the run of buf appended since the last cut into one vec entry.
func (w *Writer) cut() {
	if len(w.buf) > w.mark {
		w.vec = append(w.vec, w.buf[w.mark:len(w.buf):len(w.buf)])
		w.mark = len(w.buf)
	}
}

// Headers encodes fields as a header block on stream id (HEADERS, then
// CONTINUATION frames as the peer's frame size requires). Called with mu held;
// encoding under the lock keeps the HPACK state in the order blocks are sent.
func (w *Writer) Headers(id uint32, endStream bool, fields ...[]hpack.HeaderField) {
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
		w.buf = AppendFrameHeader(w.buf, n, typ, f, id)
		w.buf = append(w.buf, block[:n]...)
		block = block[n:]
		typ, flags = http2.FrameContinuation, 0
	}
}

// QueueData appends payload to s and sends what the windows allow. Ownership of
// payload passes to the writer. Called with mu held.
func (w *Writer) QueueData(s *SendState, payload mem.BufferSlice) {
	if s.Closed {
		payload.Free()
		return
	}
	if s.data == nil {
		s.data = s.inline[:0]
	}
	n := payload.Len()
	w.held.Add(int64(n))
	s.msgLeft = max(s.msgLeft-n, 0)
	s.data = append(s.data, payload...)
	w.pump(s)
}

// Held is the payload bytes queued and not yet written: data waiting for the
// peer's window, and batches its socket has not taken. A peer that does not
// read makes it grow.
func (w *Writer) Held() int64 { return w.held.Load() }

// free frees payload buffers the writer held, counting them off Held.
func (w *Writer) free(bufs []mem.Buffer) {
	n := 0
	for i, b := range bufs {
		n += b.Len()
		b.Free()
		bufs[i] = nil
	}
	w.held.Add(-int64(n))
}

// QueueMsg queues one gRPC message: its 5-byte prefix, then body (owned by the
// writer from here on). The prefix travels in the frame buffer, not as a buffer
// of its own. Only one message may wait per stream at a time for the prefix to
// stay in order: a second one while the first is still queued goes as buffers.
// Called with mu held.
func (w *Writer) QueueMsg(s *SendState, compressed bool, body mem.BufferSlice) {
	w.QueueMsgStart(s, compressed, body.Len(), body)
}

// QueueMsgStart queues the start of one gRPC message of size bytes: its
// prefix, then head, its first bytes (owned by the writer from here on); the
// rest follows with QueueData. Called with mu held.
func (w *Writer) QueueMsgStart(s *SendState, compressed bool, size int, body mem.BufferSlice) {
	var p [5]byte
	if compressed {
		p[0] = 1
	}
	binary.BigEndian.PutUint32(p[1:], uint32(size))
	if s.headN > 0 || len(s.data) > 0 {
		s.msgLeft += 5 + size // QueueData counts off the prefix and body
		// A copy: p itself stays on the stack for the usual branch below.
		pre := mem.SliceBuffer(slices.Clone(p[:]))
		w.QueueData(s, append(mem.BufferSlice{pre}, body...))
		return
	}
	if s.Closed {
		body.Free()
		return
	}
	s.head, s.headN = p, 5
	s.msgLeft += size // QueueData counts off body
	w.QueueData(s, body)
}

// Finish ends s after its queued data: with trailers, or with an empty END_STREAM
// DATA frame when trailers is nil. Called with mu held.
func (w *Writer) Finish(s *SendState, trailers []hpack.HeaderField) {
	if s.Closed {
		return
	}
	s.end, s.trail, s.msgLeft = true, trailers, 0 // nothing more comes: send all
	w.pump(s)
}

// pump sends as much of s's data as the stream and connection windows allow, and
// the stream's end once its data is out. A DATA frame spans buffers: it is cut
// at the frame size or the window, not where one buffer ends and the next
// begins. While more of the message being sent is still to come (msgLeft), a
// tail too short to fill a frame waits for it: the peer needs the whole message
// anyway, and a cut-through message arriving in reads of any size then leaves
// as full frames instead of one short frame per read (a gRPC peer allocates
// for each frame it reads, and for each one below 1 KiB twice). Called with mu
// held.
func (w *Writer) pump(s *SendState) {
	for {
		for len(s.data) > 0 && s.data[0].Len() == s.off { // nothing left of it to send
			w.refs = append(w.refs, s.data[0])
			s.data[0] = nil
			s.data = s.data[1:]
			s.off = 0
		}
		if s.headN == 0 && len(s.data) == 0 {
			break
		}
		avail := min(s.win, w.connWin)
		if avail <= 0 {
			if !s.queued {
				s.queued = true
				w.blocked = append(w.blocked, s)
			}
			return
		}
		limit := int(min(int64(w.maxFrame), avail))
		n := s.headN
		for i, off := 0, s.off; i < len(s.data) && n < limit; i, off = i+1, 0 {
			n += min(s.data[i].Len()-off, limit-n)
		}
		n = min(n, limit)
		if n < limit && s.msgLeft > 0 {
			s.keep()
			return // the rest of the message fills the frame when it comes
		}
		w.buf = AppendFrameHeader(w.buf, n, http2.FrameData, 0, s.id)
		k := min(s.headN, n)
		w.buf = append(w.buf, s.head[5-s.headN:5-s.headN+k]...)
		s.headN -= k
		for rest := n - k; rest > 0; {
			b := s.data[0]
			m := min(b.Len()-s.off, rest)
			if m > 0 {
				w.cut()
				w.vec = append(w.vec, b.ReadOnlyData()[s.off:s.off+m])
			}
			s.off += m
			rest -= m
			if s.off == b.Len() {
				w.refs = append(w.refs, b) // freed once written
				s.data[0] = nil
				s.data = s.data[1:]
				s.off = 0
			}
		}
		s.win -= int64(n)
		w.connWin -= int64(n)
	}
	s.data = nil
	if !s.end || s.Closed {
		return
	}
	s.Closed = true
	if s.trail != nil {
		w.Headers(s.id, true, s.trail)
		s.trail = nil
	} else {
		w.buf = AppendFrameHeader(w.buf, 0, http2.FrameData, http2.FlagDataEndStream, s.id)
	}
	if w.OnClosed != nil {
		w.OnClosed(s)
	}
}

// keep moves the buffers s holds back to the front of its inline storage, so
// that the next QueueData appends there instead of to a fresh array (pump
// advances data past the buffers it sends).
func (s *SendState) keep() {
	if len(s.data) > len(s.inline) || len(s.data) == 0 || &s.data[0] == &s.inline[0] {
		return
	}
	n := copy(s.inline[:], s.data)
	clear(s.inline[n:])
	s.data = s.inline[:n]
}

// Reset ends s with RST_STREAM and drops what it had queued. Called with mu held.
// A stream whose END_STREAM is sent (half-closed) is still reset: the peer may
// be working on it.
func (w *Writer) Reset(s *SendState, code http2.ErrCode) {
	if s.Rst {
		return
	}
	w.Drop(s)
	s.Closed, s.Rst = true, true
	w.buf = AppendRST(w.buf, s.id, code)
}

// Drop frees what s has queued, without sending anything. Called with mu held.
func (w *Writer) Drop(s *SendState) {
	if s.off > 0 && len(s.data) > 0 {
		// Part of data[0] is in a batch not yet written: it is freed with it.
		w.refs = append(w.refs, s.data[0])
		s.data = s.data[1:]
	}
	w.free(s.data)
	s.data, s.off, s.trail, s.headN, s.msgLeft = nil, 0, nil, 0, 0
}

// WindowUpdate applies a WINDOW_UPDATE from the peer (s nil: the connection's) and
// sends what it unblocks. Called with mu held.
func (w *Writer) WindowUpdate(s *SendState, inc uint32) error {
	if s != nil {
		if s.win+int64(inc) > 1<<31-1 {
			return ErrFlowControl
		}
		s.win += int64(inc)
		if !s.queued {
			w.pump(s)
		}
	} else {
		if w.connWin+int64(inc) > 1<<31-1 {
			return ErrFlowControl
		}
		w.connWin += int64(inc)
	}
	w.unblock()
	return nil
}

// ErrFlowControl is a window pushed above 2^31-1 (§6.9.1).
var ErrFlowControl = ConnError{Code: http2.ErrCodeFlowControl, Msg: "window exceeds 2^31-1"}

// unblock retries the streams waiting for window. Called with mu held.
func (w *Writer) unblock() {
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

// Forget removes a finished stream from the blocked list. Called with mu held.
func (w *Writer) Forget(s *SendState) {
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

// Credit owes the peer n bytes of connection window; the WINDOW_UPDATE rides with
// the next batch, or goes now once half the window is owed.
func (w *Writer) Credit(n int, window uint32) (sendNow bool) {
	w.owedConn += uint32(n)
	return w.owedConn >= window/ConnCreditDivisor
}

// CloseWhenFlushed closes the connection once what is queued now has been
// written. Called with mu held.
func (w *Writer) CloseWhenFlushed() {
	w.closing = true
	if !w.flushing && len(w.vec) == 0 && len(w.buf) == w.mark {
		w.Fail(ErrConnClosed)
	}
}

// Flush writes the batch. Called with mu held; never parks the caller.
func (w *Writer) Flush() {
	defer func() {
		if w.closing && !w.flushing {
			w.Fail(ErrConnClosed)
		}
	}()
	if w.owedConn > 0 {
		w.buf = AppendWindowUpdate(w.buf, 0, w.owedConn)
		w.connGiven.Add(int64(w.owedConn))
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
		return // the flusher takes the batch as a whole once it has written its own
	}
	n, err := w.sw.Writev(w.vec)
	if err != nil {
		w.Fail(err)
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
	w.queue, w.qrefs, w.qbuf = w.vec, w.refs, w.buf // the batch now belongs to the queue
	w.newBatch()
	w.flushing = true
	go w.flusher()
}

// freeBatch releases a written (or abandoned) batch and reuses its storage.
func (w *Writer) freeBatch() {
	w.free(w.refs)
	clear(w.vec)
	w.buf, w.vec, w.refs, w.mark = w.buf[:0], w.vec[:0], w.refs[:0], 0
}

// newBatch starts a batch in storage of its own (the spare one, if the flusher
// has given one back): the old batch now belongs to the queue.
func (w *Writer) newBatch() {
	buf := w.spareBuf
	if buf == nil {
		buf = make([]byte, 0, 512)
	}
	w.buf, w.vec, w.refs, w.mark = buf[:0], w.spareVec[:0], w.spareRefs[:0], 0
	w.spareBuf, w.spareVec, w.spareRefs = nil, nil, nil
}

// flusher writes the queue, blocking on its own goroutine, then each batch
// Flush left meanwhile, swapped in whole: the two batches' storage alternate,
// so a writer that keeps the socket full allocates nothing.
func (w *Writer) flusher() {
	for {
		w.mu.Lock()
		q, refs, qb := w.queue, w.qrefs, w.qbuf
		if len(q) == 0 && w.err == nil {
			w.cut()
			if len(w.vec) > 0 {
				q, refs, qb = w.vec, w.refs, w.buf
				w.newBatch()
			}
		}
		if len(q) == 0 || w.err != nil {
			w.free(refs)
			w.queue, w.qrefs, w.qbuf, w.flushing = nil, nil, nil, false
			if w.err != nil {
				w.freeBatch()
			}
			if w.closing {
				w.Fail(ErrConnClosed)
			}
			w.mu.Unlock()
			return
		}
		w.queue, w.qrefs, w.qbuf = nil, nil, nil
		w.mu.Unlock()
		err := w.sw.WriteAll(q)
		w.free(refs)
		clear(q)
		w.mu.Lock()
		if err != nil {
			w.Fail(err)
		}
		if qb != nil && w.spareBuf == nil {
			w.spareBuf, w.spareVec, w.spareRefs = qb[:0], q[:0], refs[:0]
		}
		w.ctlQueued = 0 // the peer reads
		w.mu.Unlock()
	}
}

// MaxQueuedControl is how many control frames answering the peer may wait
// while the socket does not take them (x/net's server has the same bound).
const MaxQueuedControl = 10000

// Control accounts for one control frame vig is about to queue in answer to
// the peer, and refuses it (ENHANCE_YOUR_CALM) past MaxQueuedControl while the
// socket is full. Called with mu held.
func (w *Writer) Control() error {
	if !w.flushing {
		return nil
	}
	if w.ctlQueued++; w.ctlQueued > MaxQueuedControl {
		return ConnError{Code: http2.ErrCodeEnhanceYourCalm, Msg: fmt.Sprintf("more than %d control frames wait for a peer that does not read", MaxQueuedControl)}
	}
	return nil
}

// Fail marks the connection dead and closes it, so its reader ends too. Called
// with mu held.
func (w *Writer) Fail(err error) {
	if w.err == nil {
		w.err = err
		w.nc.Close()
	}
}

// GoAway sends GOAWAY and, for an error, closes the connection once it is out.
func (w *Writer) GoAway(last uint32, code http2.ErrCode, debug string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = AppendGoAway(w.buf, last, code, debug)
	w.Flush()
}

// initWindowChanged applies a new SETTINGS_INITIAL_WINDOW_SIZE of the peer: every
// open stream's send window moves by the difference (RFC 9113 §6.9.2). Called with
// mu held.
func (w *Writer) initWindowChanged(v int64) {
	delta := v - w.initWin
	w.initWin = v
	if w.EachStream != nil {
		w.EachStream(func(s *SendState) { s.win += delta })
	}
	w.unblock()
}

// initWindowOverflows reports whether SETTINGS_INITIAL_WINDOW_SIZE v would push
// a stream's send window above 2^31-1, a connection error (§6.9.2). Called
// with mu held.
func (w *Writer) initWindowOverflows(v int64) bool {
	delta := v - w.initWin
	over := false
	if delta > 0 && w.EachStream != nil {
		w.EachStream(func(s *SendState) { over = over || s.win+delta > 1<<31-1 })
	}
	return over
}

// MaxSettings bounds the entries of one SETTINGS frame (x/net's limit).
const MaxSettings = 100

// SettingsFrame applies a peer's SETTINGS and acknowledges them.
func SettingsFrame(r *Reader, w *Writer, h FrameHeader) error {
	if h.Stream != 0 {
		return ProtocolError("SETTINGS on stream %d", h.Stream)
	}
	p, err := r.Payload(h)
	if err != nil {
		return err
	}
	if h.Has(http2.FlagSettingsAck) {
		if len(p) != 0 {
			return ConnError{Code: http2.ErrCodeFrameSize, Msg: "SETTINGS ACK with a payload"}
		}
		return nil
	}
	if len(p)%6 != 0 {
		return ConnError{Code: http2.ErrCodeFrameSize, Msg: "SETTINGS payload not a multiple of 6"}
	}
	// More than MaxSettings entries is refused (x/net's bound), so that a
	// SETTINGS frame costs a bounded amount of work. A setting may appear twice:
	// the values are processed in order (§6.5.3).
	if len(p)/6 > MaxSettings {
		return ConnError{Code: http2.ErrCodeEnhanceYourCalm, Msg: fmt.Sprintf("SETTINGS with %d entries (at most %d)", len(p)/6, MaxSettings)}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Every value is checked before any is applied, and the ACK is queued
	// before the frames the new values unblock (DATA a larger window lets
	// out), so that the peer reads the ACK first.
	maxInit := int64(-1)
	for q := p; len(q) > 0; q = q[6:] {
		id, v := http2.SettingID(binary.BigEndian.Uint16(q)), binary.BigEndian.Uint32(q[2:])
		switch id {
		case http2.SettingMaxFrameSize:
			if v < DefaultMaxFrame || v > 1<<24-1 {
				return ProtocolError("SETTINGS_MAX_FRAME_SIZE %d out of range", v) // §6.5.2
			}
		case http2.SettingInitialWindowSize:
			if v > 1<<31-1 {
				return ErrFlowControl // §6.5.2
			}
			maxInit = max(maxInit, int64(v))
		case http2.SettingEnablePush:
			if v > 1 {
				return ProtocolError("SETTINGS_ENABLE_PUSH %d", v) // §6.5.2
			}
		}
	}
	if maxInit >= 0 && w.initWindowOverflows(maxInit) {
		return ConnError{Code: http2.ErrCodeFlowControl, Msg: "SETTINGS_INITIAL_WINDOW_SIZE takes a stream window above 2^31-1"} // §6.9.2
	}
	if err := w.Control(); err != nil {
		return err
	}
	w.buf = AppendFrameHeader(w.buf, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	for ; len(p) > 0; p = p[6:] {
		id, v := http2.SettingID(binary.BigEndian.Uint16(p)), binary.BigEndian.Uint32(p[2:])
		switch id {
		case http2.SettingMaxFrameSize:
			// vig's frames stay at the default size: larger ones save nothing on
			// a socket written with writev.
		case http2.SettingInitialWindowSize:
			w.initWindowChanged(int64(v))
		case http2.SettingHeaderTableSize:
			w.enc.SetMaxDynamicTableSizeLimit(min(v, 4096))
		case http2.SettingMaxConcurrentStreams:
			w.peerMaxStreams = v
		case http2.SettingMaxHeaderListSize:
			w.peerMaxHeaderList = v
		}
	}
	w.Flush()
	return nil
}

// PingFrame answers a PING.
func PingFrame(r *Reader, w *Writer, h FrameHeader) error {
	p, err := r.Payload(h)
	if err != nil {
		return err
	}
	if h.Stream != 0 {
		return ProtocolError("PING on stream %d", h.Stream) // §6.7
	}
	if len(p) != 8 {
		return ConnError{Code: http2.ErrCodeFrameSize, Msg: "PING of the wrong size"} // §6.7
	}
	if h.Has(http2.FlagPingAck) {
		return nil
	}
	w.mu.Lock()
	if err := w.Control(); err != nil {
		w.mu.Unlock()
		return err
	}
	w.buf = AppendFrameHeader(w.buf, 8, http2.FramePing, http2.FlagPingAck, 0)
	w.buf = append(w.buf, p...)
	w.Flush()
	w.mu.Unlock()
	return nil
}

// NewWriter is the sending half of connection nc, writing through sw.
func NewWriter(nc net.Conn, sw SockWriter) *Writer {
	w := &Writer{nc: nc, sw: sw, maxFrame: DefaultMaxFrame, initWin: InitialWindow, connWin: InitialWindow,
		peerMaxStreams: 1<<32 - 1, peerMaxHeaderList: 1<<32 - 1}
	w.enc = hpack.NewEncoder(&w.hbuf)
	return w
}

// NewConnWriter is a SockWriter on a net.Conn the caller owns: tw for the writes
// that must not wait, c for the flusher's.
func NewConnWriter(tw *netopt.TryWriter, c net.Conn) SockWriter { return ConnWriter{tw, c} }

// Lock takes the writer's lock: every method below that queues or flushes
// frames, and what the connection guards with it (its stream table), need it.
func (w *Writer) Lock() { w.mu.Lock() }

// Unlock releases the writer's lock.
func (w *Writer) Unlock() { w.mu.Unlock() }

// Err is why the connection failed, nil while it works. Called with the lock held.
func (w *Writer) Err() error { return w.err }

// InitWin is the peer's SETTINGS_INITIAL_WINDOW_SIZE, a new stream's send
// window. Called with the lock held.
func (w *Writer) InitWin() int64 { return w.initWin }

// PeerMaxStreams is the peer's SETTINGS_MAX_CONCURRENT_STREAMS (unlimited until
// announced). Called with the lock held.
func (w *Writer) PeerMaxStreams() uint32 { return w.peerMaxStreams }

// PeerMaxHeaderList is the peer's SETTINGS_MAX_HEADER_LIST_SIZE (unlimited until
// announced). Called with the lock held.
func (w *Writer) PeerMaxHeaderList() uint32 { return w.peerMaxHeaderList }

// Init sets up the send state of a new stream id with window win.
func (s *SendState) Init(id uint32, win int64) { *s = SendState{id: id, win: win} }

// ID is the stream's id.
func (s *SendState) ID() uint32 { return s.id }

// QueueRST queues RST_STREAM on stream with code. Called with the lock held.
func (w *Writer) QueueRST(stream uint32, code http2.ErrCode) { w.buf = AppendRST(w.buf, stream, code) }

// QueueWindowUpdate queues a WINDOW_UPDATE. Called with the lock held.
func (w *Writer) QueueWindowUpdate(stream, inc uint32) {
	w.buf = AppendWindowUpdate(w.buf, stream, inc)
}

// QueueSettings queues a SETTINGS frame. Called with the lock held.
func (w *Writer) QueueSettings(settings ...http2.Setting) { w.buf = AppendSettings(w.buf, settings...) }

// QueueGoAway queues a GOAWAY frame. Called with the lock held.
func (w *Writer) QueueGoAway(last uint32, code http2.ErrCode, debug string) {
	w.buf = AppendGoAway(w.buf, last, code, debug)
}

// QueuePing queues a PING frame. Called with the lock held.
func (w *Writer) QueuePing(ack bool, data [8]byte) {
	flags := http2.Flags(0)
	if ack {
		flags = http2.FlagPingAck
	}
	w.buf = AppendFrameHeader(w.buf, 8, http2.FramePing, flags, 0)
	w.buf = append(w.buf, data[:]...)
}
