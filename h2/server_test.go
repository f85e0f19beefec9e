package h2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/internal/fuzztest"
)

// A ServerConn alone, with a trivial handler (echoHandler), over net.Pipe: what
// the server role owns (stream states, the MUSTs of RFC 9113 §5.1, §8.1.1, the
// budget, the concurrency limit, the drain).

// pipeSocket writes a net.Pipe end: every write waits for the peer to read
// (the test's client reads all the time).
type pipeSocket struct{ c net.Conn }

func (p pipeSocket) Writev(bufs [][]byte) (int, error) {
	n := 0
	for _, b := range bufs { // (net.Buffers.WriteTo would empty bufs' slices)
		k, err := p.c.Write(b)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
func (p pipeSocket) WriteAll(bufs [][]byte) error { _, err := p.Writev(bufs); return err }

// echoHandler answers each stream with its messages echoed, then OK once the
// client half-closes; fail makes it answer a stream's first message with
// that status instead.
type echoHandler struct {
	mu       sync.Mutex
	opened   []uint32
	answered map[uint32][]codes.Code
	events   []string
	fail     codes.Code
	hold     bool // do not answer at half-close
	keep     bool // keep each message unanswered (a request waiting for a slow backend)
	kept     []mem.BufferSlice
	streams  map[uint32]*ServerStream
}

type echoStream struct {
	ServerStream
	h *echoHandler
}

func newEchoHandler() *echoHandler {
	return &echoHandler{answered: map[uint32][]codes.Code{}, streams: map[uint32]*ServerStream{}}
}

func (h *echoHandler) NewStream() (*ServerStream, StreamHandler) {
	s := &echoStream{h: h}
	return &s.ServerStream, s
}

func (h *echoHandler) event(format string, args ...any) {
	h.mu.Lock()
	h.events = append(h.events, fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

func (s *echoStream) Open(fields []hpack.HeaderField, err error) {
	s.h.mu.Lock()
	s.h.opened = append(s.h.opened, s.ID())
	s.h.streams[s.ID()] = &s.ServerStream
	s.h.mu.Unlock()
	if err != nil {
		s.Fail(codes.ResourceExhausted, err.Error(), nil)
		s.Flush()
	}
}

func (s *echoStream) Message(msg mem.BufferSlice, compressed bool) {
	s.h.event("message %d %d", s.ID(), msg.Len())
	if s.h.keep {
		s.h.mu.Lock()
		s.h.kept = append(s.h.kept, msg)
		s.h.mu.Unlock()
		return
	}
	if s.h.fail != codes.OK {
		msg.Free()
		s.Fail(s.h.fail, "refused", nil)
	} else {
		s.Send(msg, compressed)
	}
	s.Flush()
}

func (s *echoStream) HalfClosed() {
	s.h.event("half-closed %d", s.ID())
	if !s.h.hold {
		s.Finish([]hpack.HeaderField{{Name: "x-trailer", Value: "t"}})
		s.Flush()
	}
}

func (s *echoStream) Failed(code codes.Code, msg string) {
	s.h.event("failed %d %v", s.ID(), code)
	s.Fail(code, msg, nil)
	s.Flush()
}

func (s *echoStream) Cancelled(code codes.Code) {
	s.h.event("cancelled %d %v", s.ID(), code)
	if s.Send(mem.BufferSlice{mem.SliceBuffer("late")}, false) {
		s.h.event("sent on a cancelled stream %d", s.ID())
	}
}

// Answered runs with the ServerConn's lock held: it only records.
func (s *echoStream) Answered(code codes.Code) {
	s.h.mu.Lock()
	s.h.answered[s.ID()] = append(s.h.answered[s.ID()], code)
	s.h.mu.Unlock()
}

// testClient is the client end of a ServerConn under test.
type testClient struct {
	t      *testing.T
	nc     net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	frames chan string // what the server sent, one line a frame
	sc     *ServerConn
	h      *echoHandler
	served chan struct{}
}

var testConfig = ServerConfig{Window: 1 << 20, ConnWindow: 1 << 20, MaxMsg: 1 << 20, MaxStreams: 100}

func newTestClient(t *testing.T, cfg ServerConfig, h *echoHandler) *testClient {
	t.Helper()
	return newTestClientWith(t, cfg, h, h)
}

// newTestClientWith serves handler, whose streams record into h.
func newTestClientWith(t *testing.T, cfg ServerConfig, h *echoHandler, handler Handler) *testClient {
	t.Helper()
	cli, srv := net.Pipe()
	c := &testClient{t: t, nc: cli, frames: make(chan string, 1000), h: h, served: make(chan struct{})}
	c.fr = http2.NewFramer(cli, cli)
	c.fr.AllowIllegalWrites = true
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	w := NewWriter(srv, pipeSocket{srv})
	c.sc = NewServerConn(NewReader(srv, 4096), w, cfg, handler)
	go func() {
		defer close(c.frames)
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				return
			}
			c.frames <- describe(f)
		}
	}()
	go func() {
		defer close(c.served)
		c.sc.Serve()
	}()
	t.Cleanup(func() {
		cli.Close()
		<-c.served
		for range c.frames {
		}
	})
	c.expect("SETTINGS")
	c.fr.WriteSettings()
	return c
}

// describe is one line for frame f.
func describe(f http2.Frame) string {
	h := f.Header()
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		var kv []string
		for _, x := range f.Fields {
			kv = append(kv, x.Name+"="+x.Value)
		}
		return fmt.Sprintf("HEADERS %d end=%v %s", h.StreamID, f.StreamEnded(), strings.Join(kv, " "))
	case *http2.DataFrame:
		return fmt.Sprintf("DATA %d %d end=%v", h.StreamID, len(f.Data()), f.StreamEnded())
	case *http2.RSTStreamFrame:
		return fmt.Sprintf("RST_STREAM %d %v", h.StreamID, f.ErrCode)
	case *http2.GoAwayFrame:
		return fmt.Sprintf("GOAWAY %d %v", f.LastStreamID, f.ErrCode)
	case *http2.PingFrame:
		return fmt.Sprintf("PING ack=%v %s", f.IsAck(), f.Data[:])
	case *http2.SettingsFrame:
		if f.IsAck() {
			return "SETTINGS ACK"
		}
		return "SETTINGS"
	case *http2.WindowUpdateFrame:
		return fmt.Sprintf("WINDOW_UPDATE %d", h.StreamID)
	}
	return fmt.Sprintf("%v %d", h.Type, h.StreamID)
}

// expect waits for a frame whose line starts with prefix, skipping SETTINGS
// ACKs and WINDOW_UPDATEs, and fails on any other frame first.
func (c *testClient) expect(prefix string) string {
	c.t.Helper()
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection closed, want %q", prefix)
			}
			if strings.HasPrefix(f, prefix) {
				return f
			}
			if f == "SETTINGS ACK" || strings.HasPrefix(f, "WINDOW_UPDATE") {
				continue
			}
			c.t.Fatalf("got %q, want %q", f, prefix)
		case <-time.After(10 * time.Second): // a hang guard, not a timing claim
			c.t.Fatalf("no frame, want %q", prefix)
		}
	}
}

// expectClosed waits for the server to close the connection.
func (c *testClient) expectClosed() {
	c.t.Helper()
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return
			}
			if f == "SETTINGS ACK" || strings.HasPrefix(f, "WINDOW_UPDATE") {
				continue
			}
			c.t.Fatalf("got %q, want the connection closed", f)
		case <-time.After(10 * time.Second):
			c.t.Fatal("the connection stays open")
		}
	}
}

var grpcRequest = []string{":method", "POST", ":scheme", "http", ":path", "/s/m", ":authority", "a", "content-type", "application/grpc", "te", "trailers"}

func (c *testClient) headers(id uint32, end bool, kv ...string) {
	c.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: end, BlockFragment: c.hbuf.Bytes()})
}

// data sends b on stream id in DATA frames of the default maximum size, the
// last one ending the stream.
func (c *testClient) data(id uint32, b []byte) {
	for len(b) > DefaultMaxFrame {
		c.fr.WriteData(id, false, b[:DefaultMaxFrame])
		b = b[DefaultMaxFrame:]
	}
	c.fr.WriteData(id, true, b)
}

// grpcZeros is a gRPC message of n zero bytes.
func grpcZeros(n int) []byte {
	b := make([]byte, 5+n)
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	return b
}

func (h *echoHandler) answers(id uint32) []codes.Code {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.answered[id]
}

func (h *echoHandler) has(event string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if e == event {
			return true
		}
	}
	return false
}

// A unary request is opened, delivered and answered: headers, the message,
// trailers; the stream is answered once, OK.
func TestServerConnUnary(t *testing.T) {
	h := newEchoHandler()
	c := newTestClient(t, testConfig, h)
	c.headers(1, false, grpcRequest...)
	c.fr.WriteData(1, true, grpcZeros(10))
	c.expect("HEADERS 1 end=false :status=200 content-type=application/grpc")
	c.expect("DATA 1 15 end=false")
	c.expect("HEADERS 1 end=true grpc-status=0 x-trailer=t")
	if a := h.answers(1); len(a) != 1 || a[0] != codes.OK {
		t.Fatalf("stream 1 answered %v, want [OK]", a)
	}
}

// What the RFC makes a stream error or a connection error, ServerConn makes
// one, before the handler sees anything of the stream.
func TestServerConnMusts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		send   func(c *testClient)
		want   string
		opened int
	}{
		{"missing :path (§8.1.1)", func(c *testClient) {
			c.headers(1, true, ":method", "POST", ":scheme", "http", ":authority", "a", "content-type", "application/grpc")
		}, "RST_STREAM 1 PROTOCOL_ERROR", 0},
		{"uppercase field name (§8.2.1)", func(c *testClient) { c.headers(1, true, append(grpcRequest, "X-Big", "v")...) }, "RST_STREAM 1 PROTOCOL_ERROR", 0},
		{"content-length above the DATA (§8.1.1)", func(c *testClient) {
			c.headers(1, false, append(grpcRequest, "content-length", "100")...)
			c.fr.WriteData(1, true, grpcZeros(10))
		}, "RST_STREAM 1 PROTOCOL_ERROR", 1},
		{"a stream id below the last (§5.1.1)", func(c *testClient) {
			c.headers(5, false, grpcRequest...)
			c.headers(3, false, grpcRequest...)
		}, "GOAWAY 5 PROTOCOL_ERROR", 1},
		{"an even stream id (§5.1.1)", func(c *testClient) { c.headers(2, true, grpcRequest...) }, "GOAWAY 0 PROTOCOL_ERROR", 0},
		{"DATA on a half-closed (remote) stream (§5.1)", func(c *testClient) {
			c.h.hold = true
			c.headers(1, true, grpcRequest...)
			c.fr.WriteData(1, false, grpcZeros(1))
		}, "RST_STREAM 1 STREAM_CLOSED", 1},
		{"DATA on an idle stream (§5.1)", func(c *testClient) { c.fr.WriteData(3, false, grpcZeros(1)) }, "GOAWAY 0 PROTOCOL_ERROR", 0},
		{"HEADERS on a closed stream (§5.1)", func(c *testClient) {
			c.headers(1, true, grpcRequest...)
			c.expect("HEADERS 1 end=true")
			c.headers(1, true, grpcRequest...)
		}, "GOAWAY 1 STREAM_CLOSED", 1},
		{"DATA in flight on a stream vig reset is ignored (§5.1)", func(c *testClient) {
			c.headers(1, false, ":method", "GET")
			c.expect("RST_STREAM 1 PROTOCOL_ERROR")
			c.fr.WriteData(1, true, grpcZeros(1))
			c.fr.WritePing(false, [8]byte{'p'})
		}, "PING ack=true", 0},
		{"a second HEADERS without END_STREAM (§8.1)", func(c *testClient) {
			c.h.hold = true
			c.headers(1, false, grpcRequest...)
			c.headers(1, false, "x-trailer", "t")
		}, "RST_STREAM 1 PROTOCOL_ERROR", 1},
		{"a stream depending on itself (§5.3.1)", func(c *testClient) {
			c.hbuf.Reset()
			c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: c.hbuf.Bytes(), Priority: http2.PriorityParam{StreamDep: 1}})
		}, "RST_STREAM 1 PROTOCOL_ERROR", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newEchoHandler()
			c := newTestClient(t, testConfig, h)
			tc.send(c)
			c.expect(tc.want)
			h.mu.Lock()
			opened := len(h.opened)
			h.mu.Unlock()
			if opened != tc.opened {
				t.Errorf("%d streams opened for the handler, want %d", opened, tc.opened)
			}
			if tc.opened > 0 && strings.HasPrefix(tc.want, "RST_STREAM") {
				if a := h.answers(h.opened[0]); len(a) != 1 {
					t.Errorf("the reset stream answered %v, want once", a)
				}
			}
		})
	}
}

// The advertised SETTINGS_MAX_CONCURRENT_STREAMS is enforced (§5.1.2): a
// stream above it is refused, and one is admitted again once a stream closes.
func TestServerConnConcurrencyLimit(t *testing.T) {
	h := newEchoHandler()
	h.hold = true
	cfg := testConfig
	cfg.MaxStreams = 2
	c := newTestClient(t, cfg, h)
	c.headers(1, true, grpcRequest...)
	c.headers(3, true, grpcRequest...)
	c.headers(5, true, grpcRequest...)
	c.expect("RST_STREAM 5 REFUSED_STREAM")
	h.mu.Lock()
	s1 := h.streams[1]
	h.mu.Unlock()
	s1.Finish(nil)
	s1.Flush()
	c.expect("HEADERS 1 end=true :status=200 content-type=application/grpc grpc-status=0")
	c.headers(7, true, grpcRequest...)
	c.headers(9, true, grpcRequest...)
	c.expect("RST_STREAM 9 REFUSED_STREAM")
	h.mu.Lock()
	opened := fmt.Sprint(h.opened)
	h.mu.Unlock()
	if opened != "[1 3 7]" {
		t.Fatalf("streams opened %s, want [1 3 7]", opened)
	}
}

// A client's RST_STREAM cancels the stream: Cancelled once, Answered once
// (CANCELLED), and nothing more is sent on it.
func TestServerConnPeerReset(t *testing.T) {
	h := newEchoHandler()
	c := newTestClient(t, testConfig, h)
	c.headers(1, false, grpcRequest...)
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	c.headers(3, true, grpcRequest...) // ordered after the reset on the reader
	c.expect("HEADERS 3 end=true")
	if !h.has("cancelled 1 Canceled") || h.has("sent on a cancelled stream 1") {
		t.Fatalf("events %v: want stream 1 cancelled, nothing sent after", h.events)
	}
	if a := h.answers(1); len(a) != 1 || a[0] != codes.Canceled {
		t.Fatalf("stream 1 answered %v, want [Canceled]", a)
	}
}

// An error before the response headers is a trailers-only response.
func TestServerConnTrailersOnly(t *testing.T) {
	h := newEchoHandler()
	h.fail = codes.InvalidArgument
	c := newTestClient(t, testConfig, h)
	c.headers(1, false, grpcRequest...)
	c.fr.WriteData(1, true, grpcZeros(3))
	c.expect("HEADERS 1 end=true :status=200 content-type=application/grpc grpc-status=3 grpc-message=refused")
}

// A message above MaxMsg, and messages above the connection's Budget, fail
// their stream (RESOURCE_EXHAUSTED) without memory for what was only
// promised; the connection serves on.
func TestServerConnBudget(t *testing.T) {
	h := newEchoHandler()
	cfg := testConfig
	cfg.MaxMsg = 1000
	c := newTestClient(t, cfg, h)
	c.headers(1, false, grpcRequest...)
	c.fr.WriteData(1, false, grpcZeros(2000)[:5]) // declares 2000 bytes
	c.expect("HEADERS 1 end=true :status=200 content-type=application/grpc grpc-status=8")
	if !h.has("failed 1 ResourceExhausted") {
		t.Fatalf("events %v: want stream 1 failed RESOURCE_EXHAUSTED", h.events)
	}
	// Prefixes declaring the largest message on many streams take nothing.
	for id := uint32(3); id < 3+2*50; id += 2 {
		c.headers(id, false, grpcRequest...)
		c.fr.WriteData(id, false, grpcZeros(1000)[:5])
	}
	c.headers(201, false, grpcRequest...)
	c.fr.WriteData(201, true, grpcZeros(10))
	c.expect("HEADERS 201 end=false")
	c.sc.w.Lock()
	held := c.sc.budget.limit - c.sc.budget.left
	c.sc.w.Unlock()
	if held != 0 {
		t.Fatalf("50 prefixes without bodies hold %d bytes of the budget, want 0", held)
	}
}

// Messages delivered and still held (requests waiting in vig's queues, or
// relayed to a backend that reads slowly) count against their connection's
// budget until freed: a client cannot make vig hold more than the budget by
// sending faster than the other leg consumes. The message that would pass it
// fails RESOURCE_EXHAUSTED, saying why; once the held ones are freed, the
// connection's messages are received again.
func TestServerConnBudgetCountsDelivered(t *testing.T) {
	h := newEchoHandler()
	h.keep, h.hold = true, true
	cfg := testConfig
	cfg.MsgBudget = 200 << 10
	c := newTestClient(t, cfg, h)
	// 60 KB messages take 16 + 32 + 16 KiB of chunks each: three fit.
	for id := uint32(1); id <= 7; id += 2 {
		c.headers(id, false, grpcRequest...)
		c.data(id, grpcZeros(60<<10))
	}
	f := c.expect("HEADERS 7 end=true :status=200 content-type=application/grpc grpc-status=8")
	if !strings.Contains(f, "waiting+for+the+backend") && !strings.Contains(f, "waiting for the backend") && !strings.Contains(f, "waiting%20for") {
		t.Errorf("the refusal %q does not say the memory is held by requests waiting for the backend", f)
	}
	h.mu.Lock()
	kept := h.kept
	h.kept = nil
	h.mu.Unlock()
	if len(kept) != 3 {
		t.Fatalf("%d messages delivered, want the 3 that fit", len(kept))
	}
	if d := c.sc.budget.Delivered(); d != 3*64<<10 {
		t.Errorf("the budget counts %d bytes delivered, want %d", d, 3*64<<10)
	}
	for _, m := range kept {
		m.Free()
	}
	if d := c.sc.budget.Delivered(); d != 0 {
		t.Errorf("after the messages were freed the budget counts %d bytes delivered, want 0", d)
	}
	h.mu.Lock()
	h.keep = false
	h.mu.Unlock()
	c.headers(9, false, grpcRequest...)
	c.data(9, grpcZeros(60<<10))
	c.expect("HEADERS 9 end=false")
}

// A small message's buffer is not pooled (mem.NewBuffer keeps no pool below
// its threshold), so freeing it never reaches the budget's pool: it must not
// be counted as delivered, or a connection asking small questions (ModelReady,
// ServerLive) would one day be refused everything (found in review).
func TestServerConnBudgetSmallDelivered(t *testing.T) {
	h := newEchoHandler()
	h.keep, h.hold = true, true
	c := newTestClient(t, testConfig, h)
	c.headers(1, false, grpcRequest...)
	c.data(1, grpcZeros(100))
	c.headers(3, false, grpcRequest...)
	c.data(3, grpcZeros(2000))
	c.fr.WritePing(false, [8]byte{'s'}) // answered once all of the above was read
	c.expect("PING ack=true")
	h.mu.Lock()
	kept := h.kept
	h.mu.Unlock()
	if len(kept) != 2 {
		t.Fatalf("%d messages kept, want 2", len(kept))
	}
	for _, m := range kept {
		m.Free()
	}
	if d := c.sc.budget.Delivered(); d != 0 {
		t.Errorf("after the messages were freed the budget counts %d bytes delivered, want 0", d)
	}
}

// Drain: a GOAWAY that admits every stream and a PING; once the client acks
// it, a GOAWAY naming the last stream, new streams refused, and the
// connection closes when the open stream is answered.
func TestServerConnDrain(t *testing.T) {
	h := newEchoHandler()
	h.hold = true
	c := newTestClient(t, testConfig, h)
	c.headers(1, true, grpcRequest...)
	c.fr.WritePing(false, [8]byte{'x'})
	c.expect("PING ack=true")
	c.sc.Drain()
	c.expect(fmt.Sprintf("GOAWAY %d NO_ERROR", 1<<31-1))
	c.expect("PING ack=false vigdrain")
	c.headers(3, true, grpcRequest...) // sent before the client saw the GOAWAY: admitted
	c.fr.WritePing(true, drainPing)
	c.expect("GOAWAY 3 NO_ERROR")
	c.headers(5, true, grpcRequest...)
	c.expect("RST_STREAM 5 REFUSED_STREAM")
	h.mu.Lock()
	s1, s3 := h.streams[1], h.streams[3]
	h.mu.Unlock()
	for _, s := range []*ServerStream{s1, s3} {
		s.Finish(nil)
		s.Flush()
	}
	c.expect("HEADERS 1 end=true")
	c.expect("HEADERS 3 end=true")
	c.expectClosed()
}

// The connection's end cancels every stream still open, exactly once.
func TestServerConnEnd(t *testing.T) {
	h := newEchoHandler()
	h.hold = true
	c := newTestClient(t, testConfig, h)
	c.headers(1, false, grpcRequest...)
	c.headers(3, true, grpcRequest...)
	c.fr.WritePing(false, [8]byte{})
	c.expect("PING ack=true")
	c.nc.Close()
	<-c.served
	for _, id := range []uint32{1, 3} {
		if a := h.answers(id); len(a) != 1 || a[0] != codes.Canceled {
			t.Errorf("stream %d answered %v, want [Canceled]", id, a)
		}
		if !h.has(fmt.Sprintf("cancelled %d Canceled", id)) {
			t.Errorf("stream %d not cancelled: %v", id, h.events)
		}
	}
}

// Response headers above the client's SETTINGS_MAX_HEADER_LIST_SIZE are not
// sent: the stream is answered INTERNAL, naming the setting.
func TestServerConnHeadTooLarge(t *testing.T) {
	h := newEchoHandler()
	h.hold = true
	c := newTestClient(t, testConfig, h)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: 200})
	c.headers(1, true, grpcRequest...)
	c.fr.WritePing(false, [8]byte{})
	c.expect("PING ack=true")
	h.mu.Lock()
	s := h.streams[1]
	h.mu.Unlock()
	if s.Head([]hpack.HeaderField{{Name: "x-big", Value: strings.Repeat("b", 300)}}) {
		t.Fatal("Head sent headers above the client's limit")
	}
	s.Flush()
	f := c.expect("HEADERS 1 end=true :status=200 content-type=application/grpc grpc-status=13")
	if !strings.Contains(f, "SETTINGS_MAX_HEADER_LIST_SIZE of 200") {
		t.Fatalf("%s: want the setting named", f)
	}
	if a := h.answers(1); len(a) != 1 || a[0] != codes.Internal {
		t.Fatalf("answered %v, want [Internal]", a)
	}
}

// discardSocket takes every write and keeps nothing.
type discardSocket struct{}

func (discardSocket) Writev(bufs [][]byte) (int, error) {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n, nil
}
func (d discardSocket) WriteAll(bufs [][]byte) error { _, err := d.Writev(bufs); return err }

// serveBytes runs a ServerConn on in (what follows the preface) to its end.
func serveBytes(in []byte, cfg ServerConfig, h Handler) {
	w := NewWriter(nopConn{}, discardSocket{})
	NewServerConn(NewReader(bytes.NewReader(in), 4096), w, cfg, h).Serve()
}

// unaryRequests is n unary requests of a 100-byte message on one connection.
func unaryRequests(n int) []byte {
	var buf, hbuf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	enc := hpack.NewEncoder(&hbuf)
	fr.WriteSettings()
	msg := grpcZeros(100)
	for i := 0; i < n; i++ {
		hbuf.Reset()
		for j := 0; j+1 < len(grpcRequest); j += 2 {
			enc.WriteField(hpack.HeaderField{Name: grpcRequest[j], Value: grpcRequest[j+1]})
		}
		id := uint32(2*i + 1)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, BlockFragment: hbuf.Bytes()})
		fr.WriteData(id, true, msg)
		fr.WriteWindowUpdate(0, uint32(len(msg))) // the client reads the answer
	}
	return buf.Bytes()
}

// BenchmarkServerConnUnary is one unary request through a ServerConn alone:
// read, assembled, echoed, answered (allocs/op is the figure to watch).
func BenchmarkServerConnUnary(b *testing.B) {
	in := unaryRequests(b.N)
	var h benchHandler
	b.ReportAllocs()
	b.ResetTimer()
	serveBytes(in, ServerConfig{Window: 1 << 20, ConnWindow: 1 << 30, MaxMsg: 1 << 20, MaxStreams: 100}, &h)
	b.StopTimer()
	if h.answered != b.N {
		b.Fatalf("%d of %d requests answered", h.answered, b.N)
	}
}

// benchHandler echoes like echoHandler and counts the answers.
type benchHandler struct{ answered int }
type benchServerStream struct {
	ServerStream
	h *benchHandler
}

func (h *benchHandler) NewStream() (*ServerStream, StreamHandler) {
	s := &benchServerStream{h: h}
	return &s.ServerStream, s
}
func (s *benchServerStream) Open([]hpack.HeaderField, error)    {}
func (s *benchServerStream) Message(m mem.BufferSlice, c bool)  { s.Send(m, c) }
func (s *benchServerStream) HalfClosed()                        { s.Finish(nil); s.Flush() }
func (s *benchServerStream) Failed(code codes.Code, msg string) { s.Fail(code, msg, nil); s.Flush() }
func (s *benchServerStream) Cancelled(codes.Code)               {}
func (s *benchServerStream) Answered(codes.Code)                { s.h.answered++ } // on the reader goroutine here

// FuzzServerConn feeds a ServerConn whatever a client may send (after the
// preface) and checks what the server role promises its handler: every stream
// opened is answered exactly once (Answered), none other is, and nothing is
// sent on a stream after it was cancelled.
func FuzzServerConn(f *testing.F) {
	f.Add(byte(0), unaryRequests(3))
	var buf, hbuf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	fr.AllowIllegalWrites = true
	enc := hpack.NewEncoder(&hbuf)
	for j := 0; j+1 < len(grpcRequest); j += 2 {
		enc.WriteField(hpack.HeaderField{Name: grpcRequest[j], Value: grpcRequest[j+1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: hbuf.Bytes()})
	fr.WriteData(1, false, grpcZeros(10)[:7])
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, EndHeaders: true, BlockFragment: hbuf.Bytes()[:3]})
	fr.WriteData(5, true, grpcZeros(2000))
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, EndHeaders: true, EndStream: true, BlockFragment: hbuf.Bytes()})
	f.Add(byte(1), buf.Bytes())
	f.Add(byte(4|1<<3), buf.Bytes())
	// A 500-byte message in three frames, and one reset inside its message.
	buf.Reset()
	fr.WriteSettings()
	msg := grpcZeros(500)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: hbuf.Bytes()})
	fr.WriteData(1, false, msg[:50])
	fr.WriteData(1, false, msg[50:300])
	fr.WriteData(1, true, msg[300:])
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, EndHeaders: true, BlockFragment: hbuf.Bytes()})
	fr.WriteData(3, false, msg[:200])
	fr.WriteRSTStream(3, http2.ErrCodeCancel)
	f.Add(byte(4|20<<3), buf.Bytes())
	f.Fuzz(func(t *testing.T, mode byte, in []byte) {
		defer fuzztest.Bound(t)()
		h := newEchoHandler()
		h.hold = mode&1 != 0 // streams left open until the connection ends
		if mode&2 != 0 {
			h.fail = codes.InvalidArgument
		}
		cfg := ServerConfig{Window: 1 << 16, ConnWindow: 1 << 20, MaxMsg: 1000, MaxStreams: 4}
		if mode&4 != 0 { // messages of 100 bytes or more taken as they arrive, once mode>>3 bytes are in
			eh := &earlyHandler{echoHandler: h, want: int(mode >> 3)}
			cfg.EarlyMin = 100
			serveBytes(in, cfg, eh)
			eh.checkSinks(t)
		} else {
			serveBytes(in, cfg, h)
		}
		opened := map[uint32]bool{}
		for _, id := range h.opened {
			opened[id] = true
			if a := h.answered[id]; len(a) != 1 {
				t.Fatalf("stream %d answered %v, want exactly once", id, a)
			}
		}
		for id := range h.answered {
			if !opened[id] {
				t.Fatalf("stream %d answered, never opened", id)
			}
		}
		for _, e := range h.events {
			if strings.HasPrefix(e, "sent on a cancelled stream") {
				t.Fatal(e)
			}
		}
	})
}
