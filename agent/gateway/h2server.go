package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/h2"
)

// The client leg: one sconn per accepted connection, served by one goroutine that
// reads its frames (h2.ServerConn: the stream table, HTTP/2's rules and message
// assembly). A request is handled on that goroutine as soon as its message is
// complete; its answer is written by whichever goroutine has it (normally the
// backend connection's reader). Nothing else runs per connection or per stream.
// What follows is governance: which RPC a stream is (rpcKind), access, the Call,
// relays, and the answers.

// rpcKind says how vig treats an RPC.
type rpcKind uint8

const (
	kindRelay       rpcKind = iota // passed through to the backend, message by message
	kindInfer                      // ModelInfer: governed
	kindStreamInfer                // ModelStreamInfer: each message governed
	kindLocal                      // answered by vig itself (health; liveness for a ring backend)
)

const maxConcurrentStreams = 1000

// answerBudget bounds the answers one client connection holds unread
// (h2.ServerConfig.AnswerBudget) as its requests are bounded: h2.ConnMsgBudget,
// or max_message_mib + 1 MiB when that is larger. Without it a client that
// does not read would make vig hold up to maxConcurrentStreams answers.
func answerBudget(maxMsg int) int64 {
	if b := answerBudgetOverride.Load(); b > 0 {
		return b
	}
	return int64(max(h2.ConnMsgBudget, maxMsg+1<<20))
}

// answerBudgetOverride, when set, replaces answerBudget (tests).
var answerBudgetOverride atomic.Int64

// sconn is one client connection (the h2.Handler of its ServerConn).
type sconn struct {
	g      *Gateway
	nc     net.Conn
	h2     *h2.ServerConn
	uid    uint32 // the peer's uid (Unix sockets), for shared-memory regions
	hasUID bool
}

// sstream is one RPC on a client connection: its h2 stream, and what vig does
// with it (the stream's h2.StreamHandler).
type sstream struct {
	h2.ServerStream
	c      *sconn
	kind   rpcKind
	method string // full path
	m      *metrics.Method

	// Reader goroutine only (set when the stream opens, read-only after).
	gotMsg   bool
	meta     []string
	enc      [2]string // grpc-encoding, grpc-accept-encoding (relayed RPCs carry them on)
	deadline int64

	// mu guards what follows. It is taken before h2's lock (h2/doc.go), and
	// never held while calling g.Submit, g.Cancel or a relayTarget (each may
	// answer the stream at once).
	mu       sync.Mutex
	pending  int         // ModelStreamInfer: requests not yet answered
	halfSeen bool        // the client half-closed (copy for repliers)
	call     *Call       // ModelInfer: the request's call while it runs
	calls    []*Call     // ModelStreamInfer: the calls not yet answered
	relay    relayTarget // a relayed RPC's backend stream
	onOK     func()      // run when a relayed call succeeds (shared-memory mirror)
}

func (g *Gateway) serveConn(nc net.Conn) {
	defer g.conns.Done()
	peerUID, hasUID := uint32(0), false
	if a, ok := nc.RemoteAddr().(PeerUID); ok {
		peerUID, hasUID = a.PeerUID()
	}
	// The preface is read here, with a deadline: a connection that sends nothing
	// is dropped before it costs more.
	if !h2.ReadPreface(nc, g.handshakeTimeout) {
		return
	}
	c, ok := g.newSconn(nc, peerUID, hasUID)
	if !ok {
		return
	}
	defer g.untrack(c)
	c.h2.Serve()
}

// newSconn builds a client connection's state and tracks it.
func (g *Gateway) newSconn(nc net.Conn, peerUID uint32, hasUID bool) (*sconn, bool) {
	w, err := newH2Writer(nc)
	if err != nil {
		nc.Close()
		return nil, false
	}
	c := &sconn{g: g, nc: nc, uid: peerUID, hasUID: hasUID}
	c.h2 = h2.NewServerConn(h2.NewReader(connReader(nc), g.readBuf), w, h2.ServerConfig{
		Window: g.window, ConnWindow: g.connWindow, MaxMsg: g.maxMsg, MaxStreams: maxConcurrentStreams,
		Malformed: g.malformed, EarlyMin: g.earlyMin, AnswerBudget: answerBudget(g.maxMsg),
	}, c)
	if !g.track(c) {
		nc.Close()
		return nil, false
	}
	return c, true
}

// malformed logs a request h2 reset as malformed.
func (g *Gateway) malformed(id uint32, why string) {
	g.log.Debug("malformed request: stream reset", "stream", id, "why", why)
}

// NewStream: a client opened a stream (h2.Handler).
func (c *sconn) NewStream() (*h2.ServerStream, h2.StreamHandler) {
	s := &sstream{c: c}
	return &s.ServerStream, s
}

// drain shuts the connection down gracefully (h2.ServerConn.Drain).
func (c *sconn) drain() { c.h2.Drain() }

// Open reads the request's headers and decides what vig does with it.
func (s *sstream) Open(fields []hpack.HeaderField, err error) {
	c := s.c
	c.g.accepted.Add(1)
	if err != nil { // h2.ErrHeaderListTooBig
		s.m = c.g.m.Method("other")
		s.m.Start()
		s.fail(status.Errorf(codes.ResourceExhausted, "header list larger than %d bytes", h2.MaxHeaderList))
		return
	}
	if err := c.request(s, fields); err != nil {
		var hr httpRefusal
		if errors.As(err, &hr) {
			s.RefuseHTTP(hr.status, hr.msg)
			s.Flush()
		} else {
			s.fail(err)
		}
	}
}

// Message is one complete request message.
func (s *sstream) Message(msg mem.BufferSlice, compressed bool) { s.c.message(s, msg, compressed) }

// Failed: h2 cannot deliver the request; s is answered with the reason.
func (s *sstream) Failed(code codes.Code, msg string) { s.fail(status.Error(code, msg)) }

// Cancelled: the stream ended unanswered; what it started stops.
func (s *sstream) Cancelled(codes.Code) {
	s.mu.Lock()
	calls, bs := s.takeCalls(), s.relay
	s.relay = nil
	s.mu.Unlock()
	s.c.cancel(calls, bs)
}

// Answered counts the answer (called with h2's lock held: metrics only).
func (s *sstream) Answered(code codes.Code) {
	if s.m != nil {
		s.m.Done(code)
	}
	s.c.g.answered.Add(1)
}

// cancel stops calls (held, takeCalls) and a relay. No lock held.
func (c *sconn) cancel(calls []*Call, bs relayTarget) {
	for _, call := range calls {
		c.g.Cancel(call)
		call.Release()
	}
	if bs != nil {
		bs.cancel()
	}
}

// httpRefusal answers a request that is not gRPC with a plain HTTP response, so
// that a person or a generic HTTP/2 client sees what vig is.
type httpRefusal struct {
	status string
	msg    string
}

func (e httpRefusal) Error() string { return e.msg }

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
// be called with the client stream's lock (sstream.mu) held.
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
	s.mu.Lock()
	s.relay = bs
	s.mu.Unlock()
	return nil
}

// message handles one complete request message of s (on the reader goroutine).
func (c *sconn) message(s *sstream, msg mem.BufferSlice, compressed bool) {
	s.m.Received(msg.Len())
	switch s.kind {
	case kindInfer, kindStreamInfer:
		if compressed {
			msg.Free()
			s.fail(status.Error(codes.Unimplemented, "vig reads ModelInfer requests: send them uncompressed (no grpc-encoding on the channel)"))
			return
		}
		if s.kind == kindInfer {
			if s.gotMsg {
				msg.Free()
				s.fail(status.Error(codes.Internal, "ModelInfer is unary: a second request message"))
				return
			}
			s.gotMsg = true
		}
		c.infer(s, msg)
	case kindLocal:
		if s.gotMsg {
			msg.Free()
			return
		}
		s.gotMsg = true
		c.local(s, msg)
	default:
		if s.method == methodShmRegister || s.method == methodShmUnregister {
			if s.gotMsg {
				msg.Free()
				return
			}
			s.gotMsg = true
			hook, err := c.g.shmCheck(s.method, msg, c.uid, c.hasUID)
			if err == nil {
				err = c.openRelay(s)
			}
			if err != nil {
				msg.Free()
				s.fail(err)
				return
			}
			s.mu.Lock()
			s.onOK = hook
			s.mu.Unlock()
		}
		if !s.gotMsg && c.g.logical && logicalMethod(s.method) && msg.Len() <= maxLogicalRequest {
			req, ok := c.logicalRequest(s, msg, compressed)
			if variants, name := c.g.logicalVariants(s.method, req); ok && variants != nil {
				s.gotMsg = true
				msg.Free()
				c.relayLogical(s, req, name, variants)
				return
			}
		}
		if !s.gotMsg {
			s.gotMsg = true
			if err := c.openRelay(s); err != nil {
				msg.Free()
				s.fail(err)
				return
			}
		}
		s.mu.Lock()
		bs := s.relay
		s.mu.Unlock()
		if bs == nil {
			msg.Free()
			return
		}
		bs.forward(msg, compressed)
	}
}

// infer turns one ModelInfer request into a Call and submits it.
func (c *sconn) infer(s *sstream, msg mem.BufferSlice) {
	call := c.g.NewCall()
	err := c.g.prepare(call, msg, c.uid, c.hasUID)
	if errors.Is(err, errShmUnknown) {
		// The backend's region list is read on a goroutine of this request's own:
		// the connection's reader must not wait for it.
		s.mu.Lock()
		s.pending++ // keeps a ModelStreamInfer open meanwhile
		s.mu.Unlock()
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
			s.mu.Lock()
			s.pending--
			s.mu.Unlock()
		}
		call.release()
		s.fail(err)
		return
	}
	call.Meta = append(call.Meta[:0], s.meta...)
	call.Deadline = s.deadline
	call.Replier = s
	s.mu.Lock()
	if s.Done() {
		s.mu.Unlock()
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
	s.mu.Unlock()
	c.g.Submit(call)
}

// HalfClosed: the client sent END_STREAM on s, its messages complete.
func (s *sstream) HalfClosed() {
	switch s.kind {
	case kindInfer, kindLocal:
		if !s.gotMsg {
			s.fail(status.Error(codes.Internal, "no request message"))
		}
	case kindStreamInfer:
		s.mu.Lock()
		s.halfSeen = true
		if s.pending == 0 {
			s.Finish(nil)
		}
		s.mu.Unlock()
		s.Flush()
	default:
		s.mu.Lock()
		bs := s.relay
		s.mu.Unlock()
		if bs != nil {
			bs.closeSend()
		} else if !s.gotMsg {
			s.fail(status.Error(codes.Internal, "no request message"))
		}
	}
}

// Reply answers a ModelInfer (or one message of ModelStreamInfer) on its stream.
func (s *sstream) Reply(call *Call, resp mem.BufferSlice, err error) {
	if s.kind == kindStreamInfer {
		s.c.streamAnswer(s, call, resp, err)
		return
	}
	s.mu.Lock()
	s.call = nil
	s.pending--
	s.mu.Unlock()
	if err != nil {
		if len(call.RespMeta) > 0 {
			s.Head(metaFields(call.RespMeta)) // the backend sent headers before its error
		}
		s.answer(err, call.TrailMeta)
	} else {
		s.Head(metaFields(call.RespMeta))
		s.send(resp, false)
		s.Finish(metaFields(call.TrailMeta))
	}
	s.Flush()
}

// streamAnswer sends one ModelStreamInferResponse: the backend's ModelInferResponse
// spliced in as infer_response, or the error in-band (Triton's convention).
func (c *sconn) streamAnswer(s *sstream, call *Call, resp mem.BufferSlice, err error) {
	s.mu.Lock()
	for i, x := range s.calls {
		if x == call {
			s.calls[i] = s.calls[len(s.calls)-1]
			s.calls[len(s.calls)-1] = nil
			s.calls = s.calls[:len(s.calls)-1]
			break
		}
	}
	s.mu.Unlock()
	c.streamSend(s, call.Header.ID, resp, err, true)
}

// takeCalls returns the calls s has running, held (the caller cancels, then
// releases them), and forgets them. Called with s.mu held: a call still listed
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
	s.mu.Lock() // the last answer, and only it, ends the stream
	if counted {
		s.pending--
	}
	s.send(out, false)
	if s.halfSeen && s.pending == 0 {
		s.Finish(nil)
	}
	s.mu.Unlock()
	s.Flush()
}

// send queues one message (owned) on s, after the response headers, and counts
// it.
func (s *sstream) send(body mem.BufferSlice, compressed bool) {
	n := body.Len()
	if s.Send(body, compressed) {
		s.m.Sent(n)
	}
}

// answer ends s with an error status (h2.ServerStream.Fail), the deadline's if
// it has passed (deadline.go).
func (s *sstream) answer(err error, trailMeta []string) {
	err = deadlineStatus(err, s.deadline, s.c.g.clock())
	st := status.Convert(err)
	s.Fail(st.Code(), st.Message(), metaFields(trailMeta))
}

// fail answers s with err now (on any goroutine) and stops whatever it had
// started.
func (s *sstream) fail(err error) {
	s.mu.Lock()
	calls, bs := s.takeCalls(), s.relay
	s.relay = nil
	s.answer(err, nil)
	s.mu.Unlock()
	s.Flush()
	s.c.cancel(calls, bs)
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

// protowireBytesPrefix is the tag and length of a length-delimited field.
func protowireBytesPrefix(field int, n int) []byte {
	b := make([]byte, 0, 12)
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	return binary.AppendUvarint(b, uint64(n))
}
