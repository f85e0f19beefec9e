package gateway_test

// Raw HTTP/2 against vig's listener: what a broken or hostile client can do, and
// what vig must do about it (RFC 9113; gRPC over HTTP/2). Each test also checks that
// vig keeps serving another, well-behaved client while the abuse goes on.
//
// Tests named ...Strict assert behaviour the RFC requires that grpc-go's server
// transport, which vig used before its own, did not have.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/gateway"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// h2conn is a hand-driven HTTP/2 client connection.
type h2conn struct {
	t    *testing.T
	c    net.Conn
	bw   *bufio.Writer
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder

	window int64 // connection send window (WINDOW_UPDATEs on stream 0 seen by read)
}

// dialH2 connects and sends the client preface and a SETTINGS frame.
func dialH2(t *testing.T, addr string, settings ...http2.Setting) *h2conn {
	t.Helper()
	h := dialRaw(t, addr)
	if _, err := io.WriteString(h.bw, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	h.flush()
	return h
}

// dialRaw connects and sends nothing.
func dialRaw(t *testing.T, addr string) *h2conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &h2conn{t: t, c: c, bw: bufio.NewWriterSize(c, 64<<10), window: 65535}
	h.fr = http2.NewFramer(h.bw, c)
	h.fr.AllowIllegalWrites = true
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 64 << 20
	h.enc = hpack.NewEncoder(&h.hbuf)
	return h
}

func (h *h2conn) flush() {
	if err := h.bw.Flush(); err != nil {
		h.t.Logf("flush: %v", err)
	}
}

// block encodes a gRPC request header block for method plus extra name, value pairs.
func (h *h2conn) block(method string, extra ...string) []byte {
	h.hbuf.Reset()
	fields := []string{":method", "POST", ":scheme", "http", ":path", method, ":authority", "vig",
		"content-type", "application/grpc", "te", "trailers"}
	fields = append(fields, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		h.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), h.hbuf.Bytes()...)
}

// headers writes a header block on stream as HEADERS + CONTINUATION frames of at
// most 16 KiB (the default SETTINGS_MAX_FRAME_SIZE).
func (h *h2conn) headers(stream uint32, block []byte, endStream bool) error {
	const max = 16384
	frag := block[:min(len(block), max)]
	rest := block[len(frag):]
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: frag, EndStream: endStream, EndHeaders: len(rest) == 0}); err != nil {
		return err
	}
	for len(rest) > 0 {
		frag, rest = rest[:min(len(rest), max)], rest[min(len(rest), max):]
		if err := h.fr.WriteContinuation(stream, len(rest) == 0, frag); err != nil {
			return err
		}
	}
	return nil
}

// grpcMessage is msg with gRPC's length prefix (uncompressed).
func grpcMessage(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// h2resp is what came back on one stream.
type h2resp struct {
	headers, trailers []hpack.HeaderField
	data              []byte
	dataFrames        int
	rst               *http2.RSTStreamFrame
	goaway            *http2.GoAwayFrame
}

func field(fs []hpack.HeaderField, name string) string {
	for _, f := range fs {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// call sends a complete unary request on stream and reads until the stream ends.
func (h *h2conn) call(stream uint32, method string, msg []byte, extra ...string) (*h2resp, error) {
	if err := h.headers(stream, h.block(method, extra...), false); err != nil {
		return nil, err
	}
	if err := h.fr.WriteData(stream, true, grpcMessage(msg)); err != nil {
		return nil, err
	}
	h.window -= int64(5 + len(msg))
	h.flush()
	return h.read(stream)
}

// read reads frames until stream ends (END_STREAM, RST_STREAM), a GOAWAY, or an
// error; it acknowledges SETTINGS and PING and replenishes windows for what it reads.
func (h *h2conn) read(stream uint32) (*h2resp, error) {
	r := &h2resp{}
	h.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	defer h.c.SetReadDeadline(time.Time{})
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return r, err
		}
		if h.ack(f) {
			continue
		}
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				h.window += int64(f.Increment)
			}
		case *http2.GoAwayFrame:
			r.goaway = f
			return r, nil
		case *http2.RSTStreamFrame:
			if f.StreamID == stream {
				r.rst = f
				return r, nil
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				h.fr.WriteWindowUpdate(0, uint32(n))
				h.fr.WriteWindowUpdate(f.StreamID, uint32(n))
				h.flush()
			}
			if f.StreamID == stream {
				r.data = append(r.data, f.Data()...)
				r.dataFrames++
				if f.StreamEnded() {
					return r, nil
				}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != stream {
				continue
			}
			if r.headers == nil {
				r.headers = f.Fields
			} else {
				r.trailers = f.Fields
			}
			if f.StreamEnded() {
				if r.trailers == nil { // trailers-only
					r.trailers = f.Fields
				}
				return r, nil
			}
		}
	}
}

// ack answers a SETTINGS or PING frame as a client must, reporting whether f
// was one.
func (h *h2conn) ack(f http2.Frame) bool {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			h.fr.WriteSettingsAck()
			h.flush()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			h.fr.WritePing(true, f.Data)
			h.flush()
		}
	default:
		return false
	}
	return true
}

// awaitWindow reads frames until the connection send window is at least n, or a
// GOAWAY arrives (returned), or 3 s pass.
func (h *h2conn) awaitWindow(n int64) (*http2.GoAwayFrame, error) {
	h.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	defer h.c.SetReadDeadline(time.Time{})
	for h.window < n {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				h.window += int64(f.Increment)
			}
		case *http2.GoAwayFrame:
			return f, nil
		default:
			h.ack(f)
		}
	}
	return nil, nil
}

// expectClosed reads until vig closes the connection (an EOF or reset, not a read
// timeout) and returns the last GOAWAY it sent, if any.
func (h *h2conn) expectClosed(t *testing.T) *http2.GoAwayFrame {
	t.Helper()
	h.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	var goaway *http2.GoAwayFrame
	var buf [4096]byte
	for {
		f, err := h.fr.ReadFrame()
		if err == nil {
			if g, ok := f.(*http2.GoAwayFrame); ok {
				goaway = g
			}
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection still open 3 s after the violation (GOAWAY %v)", goaway)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset") {
			return goaway
		}
		// A frame the framer refuses (e.g. vig answered a non-HTTP/2 peer in HTTP/1):
		// drain raw bytes until the close.
		for {
			if _, err := h.c.Read(buf[:]); err != nil {
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("connection still open 3 s after the violation")
				}
				return goaway
			}
		}
	}
}

// background runs well-behaved calls against vig until stop is called, which
// reports how many succeeded and the first failure.
func background(t *testing.T, addr string) (stop func() (ok int, err error)) {
	stop, _ = backgroundTimed(t, addr)
	return stop
}

// backgroundTimed is background that also reports the slowest call's latency.
func backgroundTimed(t *testing.T, addr string) (stop func() (ok int, err error), slowest func() time.Duration) {
	t.Helper()
	c := pb.NewGRPCInferenceServiceClient(plainClient(t, addr))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var n int
	var first error
	var worst time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		// At least one call, whenever stop comes: under load the test's abuse can end
		// before this goroutine first runs, which read as "0 calls served".
		for i := 0; ; i++ {
			if i > 0 {
				select {
				case <-quit:
					return
				default:
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
			start := time.Now()
			r, err := c.ModelInfer(ctx, inferRequest("detector", fmt.Sprintf("bg#%d", i), 20_000))
			worst = max(worst, time.Since(start))
			cancel()
			if err == nil && r.Id != fmt.Sprintf("bg#%d", i) {
				err = fmt.Errorf("answer for %q", r.Id)
			}
			if err != nil {
				first = err
				return
			}
			n++
		}
	}()
	var once sync.Once
	return func() (int, error) {
			once.Do(func() { close(quit) })
			wg.Wait()
			return n, first
		}, func() time.Duration {
			once.Do(func() { close(quit) })
			wg.Wait()
			return worst
		}
}

func checkBackground(t *testing.T, stop func() (int, error)) {
	t.Helper()
	n, err := stop()
	if err != nil || n == 0 {
		t.Errorf("a well-behaved client beside the abuse: %d calls served, failure %v", n, err)
	}
}

// The raw client itself, and the wire form of vig's answers: a unary call answers
// :status 200, content-type application/grpc, the message and grpc-status 0 in
// trailers; an error the backend sends trailers-only comes back with no DATA and
// the status and percent-encoded message in a HEADERS frame that ends the stream.
func TestH2RawUnary(t *testing.T) {
	e, p := withProbe(t, "")
	h := dialH2(t, e.tcp)
	r, err := h.call(1, "/"+gateway.Service+"/ServerLive", nil)
	if err != nil {
		t.Fatal(err)
	}
	live, _ := proto.Marshal(&pb.ServerLiveResponse{Live: true})
	if field(r.headers, ":status") != "200" || !strings.HasPrefix(field(r.headers, "content-type"), "application/grpc") ||
		!bytes.Equal(r.data, grpcMessage(live)) || field(r.trailers, "grpc-status") != "0" {
		t.Fatalf("ServerLive: headers %v data %x trailers %v", r.headers, r.data, r.trailers)
	}
	const msg = "refusé: 100% ✗"
	p.setOnCall(func(ss grpc.ServerStream, _ string, _ []byte) error {
		return status.Error(codes.PermissionDenied, msg)
	})
	r, err = h.call(3, "/"+gateway.Service+"/ModelConfig", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.dataFrames != 0 || field(r.trailers, "grpc-status") != "7" || field(r.headers, ":status") != "200" {
		t.Errorf("error answer: %d DATA frames, headers %v, trailers %v", r.dataFrames, r.headers, r.trailers)
	}
	if enc := field(r.trailers, "grpc-message"); enc != "refus%C3%A9: 100%25 %E2%9C%97" {
		t.Errorf("grpc-message %q, want the percent-encoded UTF-8 of %q", enc, msg)
	}
}

// Not HTTP/2 at all, or a broken preface: vig closes the connection, and serves
// others meanwhile.
func TestH2BadPreface(t *testing.T) {
	e, _ := withProbe(t, "")
	stop := background(t, e.tcp)
	for name, junk := range map[string][]byte{
		"http1":         []byte("GET / HTTP/1.1\r\nHost: vig\r\n\r\n"),
		"almost":        []byte("PRI * HTTP/2.0\r\n\r\nXM\r\n\r\n"),
		"binary":        pattern(4096, 9),
		"tls-handshake": {0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03},
	} {
		t.Run(name, func(t *testing.T) {
			h := dialRaw(t, e.tcp)
			h.c.Write(junk)
			if len(junk) < 24 { // a short greeting: say no more, vig must not wait for the rest forever
				h.c.Write(bytes.Repeat([]byte{'\n'}, 24))
			}
			h.expectClosed(t)
		})
	}
	checkBackground(t, stop)
	if err := serves(t, e.tcp, "detector"); err != nil {
		t.Error(err)
	}
}

// Illegal stream ids in HEADERS are connection errors: vig closes the connection
// (with GOAWAY PROTOCOL_ERROR when it sends one) and the other clients go on.
func TestH2IllegalStreamIDs(t *testing.T) {
	e, p := withProbe(t, "")
	stop := background(t, e.tcp)
	cases := []struct {
		name    string
		streams []uint32
	}{
		{"zero", []uint32{0}},
		{"even", []uint32{2}},
		{"decreasing", []uint32{5, 3}},
	}
	t.Run("group", func(t *testing.T) { // in parallel: vig lingers ~1 s after a GOAWAY before it closes
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				h := dialH2(t, e.tcp)
				for _, id := range tc.streams {
					h.headers(id, h.block("/"+gateway.Service+"/ModelConfig", probeMode, "hold"), false)
					h.fr.WriteData(id, true, grpcMessage(nil))
				}
				h.flush()
				g := h.expectClosed(t)
				if g != nil && g.ErrCode != http2.ErrCodeProtocol && g.ErrCode != http2.ErrCodeStreamClosed {
					t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", g.ErrCode)
				}
				if g != nil {
					t.Logf("streams %v: GOAWAY %v, then closed", tc.streams, g.ErrCode)
				} else {
					t.Logf("streams %v: closed without GOAWAY", tc.streams)
				}
			})
		}
	})
	// HEADERS again on a stream the client has half-closed is a stream error
	// STREAM_CLOSED (RFC 9113 §5.1 half-closed (remote)): that stream is reset,
	// the connection goes on.
	t.Run("reused", func(t *testing.T) {
		h := dialH2(t, e.tcp)
		for range 2 {
			h.headers(1, h.block("/"+gateway.Service+"/ModelConfig", probeMode, "hold"), false)
			h.fr.WriteData(1, true, grpcMessage(nil))
		}
		h.flush()
		r, err := h.read(1)
		if err != nil || r.rst == nil || r.rst.ErrCode != http2.ErrCodeStreamClosed {
			t.Fatalf("stream 1 reused: %+v %v, want RST_STREAM STREAM_CLOSED", r, err)
		}
		if r, err := h.call(3, "/"+gateway.Service+"/ServerLive", nil); err != nil || field(r.trailers, "grpc-status") != "0" {
			t.Errorf("the connection after the stream error: %+v %v", r, err)
		}
	})
	p.unhold()
	checkBackground(t, stop)
	drained(t, e.gw)
}

// The RFC's SHOULD: a connection error is announced with GOAWAY(PROTOCOL_ERROR)
// before the close, HEADERS on stream 0 included.
func TestH2GoAwayOnStreamZeroStrict(t *testing.T) {
	e, _ := withProbe(t, "")
	h := dialH2(t, e.tcp)
	h.headers(0, h.block("/"+gateway.Service+"/ServerLive"), true)
	h.flush()
	if g := h.expectClosed(t); g == nil || g.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("GOAWAY %v, want PROTOCOL_ERROR before the close", g)
	}
}

// DATA on a stream that is already closed, or was never opened: it is never
// delivered to another stream, it is credited to the connection window (so the
// connection does not starve: 2 MiB of it through a 1 MiB window), and afterwards a
// call on the same connection works — unless vig closed the connection with
// STREAM_CLOSED or PROTOCOL_ERROR, which the RFC allows.
func TestH2DataOnClosedStream(t *testing.T) {
	e, p := withProbe(t, "grpc: {window_mib: 1}\n")
	stop := background(t, e.tcp)
	h := dialH2(t, e.tcp)
	if r, err := h.call(1, "/"+gateway.Service+"/ModelConfig", []byte("one")); err != nil || !bytes.Equal(r.data, grpcMessage([]byte("one"))) {
		t.Fatalf("first call: %v %v", r, err)
	}
	// 2 MiB of DATA on closed stream 1 and idle stream 101, within the connection
	// window the server grants.
	chunk := grpcMessage(pattern(16000, 4))
	for sent := 0; sent < 2<<20; sent += len(chunk) {
		if h.window < int64(len(chunk)) {
			g, err := h.awaitWindow(int64(len(chunk)))
			if err != nil {
				t.Fatalf("after %d B of DATA on closed streams, the connection window never reopened: %v", sent, err)
			}
			if g != nil {
				if c := g.ErrCode; c != http2.ErrCodeStreamClosed && c != http2.ErrCodeProtocol {
					t.Fatalf("GOAWAY %v for DATA on a closed stream", c)
				}
				t.Logf("vig closes the connection on DATA for a closed stream (GOAWAY %v)", g.ErrCode)
				checkBackground(t, stop)
				return
			}
		}
		stream := uint32(1)
		if sent%(2*len(chunk)) != 0 {
			stream = 101
		}
		if err := h.fr.WriteData(stream, false, chunk); err != nil {
			t.Fatal(err)
		}
		h.window -= int64(len(chunk))
		h.flush()
	}
	r, err := h.call(3, "/"+gateway.Service+"/ModelConfig", []byte("three"))
	switch {
	case err != nil:
		t.Fatalf("call after DATA on closed streams: %v", err)
	case r.goaway != nil:
		if c := r.goaway.ErrCode; c != http2.ErrCodeStreamClosed && c != http2.ErrCodeProtocol {
			t.Errorf("GOAWAY %v for DATA on a closed stream", c)
		}
	case !bytes.Equal(r.data, grpcMessage([]byte("three"))) || field(r.trailers, "grpc-status") != "0":
		t.Errorf("call after DATA on closed streams: data %x trailers %v (stray DATA delivered?)", r.data, r.trailers)
	}
	if n := p.messages.Load(); n < 2 {
		t.Errorf("backend saw %d messages", n)
	}
	checkBackground(t, stop)
}

// The RFC's MUST (§5.1): DATA on an idle stream (never opened) is a connection error
// of type PROTOCOL_ERROR.
func TestH2DataOnIdleStreamStrict(t *testing.T) {
	e, _ := withProbe(t, "")
	h := dialH2(t, e.tcp)
	h.fr.WriteData(7, true, grpcMessage([]byte("stray")))
	h.flush()
	if g := h.expectClosed(t); g == nil || g.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", g)
	}
}

// Rapid reset (CVE-2023-44487): 1000 × HEADERS + RST_STREAM on one connection. vig
// survives, answers every RPC it accepted, lets none reach the backend whole, and
// serves other clients meanwhile; the connection is either still usable (PING
// answered) or closed with GOAWAY ENHANCE_YOUR_CALM / PROTOCOL_ERROR.
func TestH2RapidReset(t *testing.T) {
	e, p := withProbe(t, "")
	// The counts are taken before the background client starts: a call of its
	// in flight between the two reads counted at the backend and not among the
	// answers (1 reset request reached the backend, under load).
	before, beforeMsgs := e.gw.Accepted(), p.inferMessages.Load()
	bgBefore := grpcCodes(t, e.reg, "ModelInfer")["OK"]
	stop := background(t, e.tcp)
	h := dialH2(t, e.tcp)
	// Read everything vig sends, concurrently, so that its writes never block.
	type seen struct {
		goaway *http2.GoAwayFrame
		pings  int
		err    error
	}
	res := make(chan seen, 1)
	pong := make(chan struct{}, 1)
	go func() {
		var s seen
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				s.err = err
				res <- s
				return
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				s.goaway = f
			case *http2.PingFrame:
				if f.IsAck() && f.Data == [8]byte{'r', 'r'} {
					s.pings++
					pong <- struct{}{}
				}
			}
		}
	}()
	block := h.block(wire.MethodInfer) // identical blocks: hpack makes them a few bytes each
	var writeErr error
	for i := range 1000 {
		id := uint32(2*i + 1)
		if writeErr = h.headers(id, block, false); writeErr != nil {
			break
		}
		if writeErr = h.fr.WriteRSTStream(id, http2.ErrCodeCancel); writeErr != nil {
			break
		}
	}
	h.fr.WritePing(false, [8]byte{'r', 'r'})
	h.flush()
	var s seen
	select {
	case <-pong:
		t.Logf("rapid reset: connection alive after 1000 resets (PING answered)")
	case s = <-res:
		if s.goaway == nil || (s.goaway.ErrCode != http2.ErrCodeEnhanceYourCalm && s.goaway.ErrCode != http2.ErrCodeProtocol) {
			t.Errorf("connection ended (%v, write %v) with GOAWAY %v; want a usable connection or GOAWAY ENHANCE_YOUR_CALM", s.err, writeErr, s.goaway)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PING not answered 5 s after 1000 resets")
	}
	drained(t, e.gw)
	checkBackground(t, stop)
	accepted := e.gw.Accepted() - before - uint64(grpcCodes(t, e.reg, "ModelInfer")["OK"]-bgBefore)
	if accepted > 1000 {
		t.Errorf("vig accepted %d RPCs from 1000 streams", accepted)
	}
	if n := p.inferMessages.Load() - beforeMsgs - int64(grpcCodes(t, e.reg, "ModelInfer")["OK"]-bgBefore); n != 0 {
		t.Errorf("%d reset requests reached the backend with a message", n)
	}
	t.Logf("rapid reset: vig accepted %d of 1000 reset streams as RPCs; backend saw %d ModelInfer calls in all; GOAWAY %v",
		accepted, len(p.recorded(wire.MethodInfer)), s.goaway)
	if err := serves(t, e.tcp, "detector"); err != nil {
		t.Error(err)
	}
}

// More than 1 MiB of request metadata is refused (RST_STREAM, GOAWAY, a closed
// connection or an error status) and never reaches the backend.
func TestH2OversizedHeadersStrict(t *testing.T) {
	testOversizedHeaders(t)
}

func testOversizedHeaders(t *testing.T) {
	e, p := withProbe(t, "")
	stop := background(t, e.tcp)
	for name, extra := range map[string][]string{
		"one-value":   {"x-big", strings.Repeat("a", 1100<<10)},
		"many-values": manyHeaders(100, 11<<10),
	} {
		t.Run(name, func(t *testing.T) {
			n := len(p.recorded("/" + gateway.Service + "/ModelConfig"))
			h := dialH2(t, e.tcp)
			r, err := h.call(1, "/"+gateway.Service+"/ModelConfig", []byte("x"), extra...)
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				t.Errorf("no answer 3 s after %d B of metadata", len(strings.Join(extra, "")))
			case err != nil:
				t.Logf("refused: connection closed (%v)", err)
			case r.rst != nil:
				t.Logf("refused: RST_STREAM %v", r.rst.ErrCode)
			case r.goaway != nil:
				t.Logf("refused: GOAWAY %v", r.goaway.ErrCode)
			case field(r.trailers, "grpc-status") != "" && field(r.trailers, "grpc-status") != "0":
				t.Logf("refused: grpc-status %s %q", field(r.trailers, "grpc-status"), field(r.trailers, "grpc-message"))
			default:
				t.Errorf("%d B of metadata accepted: headers %v, grpc-status %q", len(strings.Join(extra, "")), r.headers, field(r.trailers, "grpc-status"))
			}
			if got := len(p.recorded("/" + gateway.Service + "/ModelConfig")); got != n {
				t.Errorf("the oversized request reached the backend")
			}
		})
	}
	checkBackground(t, stop)
}

func manyHeaders(n, size int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("x-h%03d", i), strings.Repeat(string(rune('a'+i%26)), size))
	}
	return out
}

// Clients that stop reading: one never opens its stream windows (flow-control
// starvation: 4 × 1.5 MB asked), one opens them wide and never reads its socket (4 × 3
// MB asked: more than the socket buffers hold). vig's own windows are 1 MiB. A third
// client is served meanwhile, 1 MB answers included: a starved client blocks only
// itself, never the shared backend connection. vig never sends the flow-starved
// client more than its window.
func TestH2WindowStarvation(t *testing.T) {
	e, p := withProbe(t, "grpc: {window_mib: 1}\n")
	req, _ := proto.Marshal(inferRequest("detector", "starved", 10))
	for _, n := range []int{1_500_000, 3_000_000, 1_000_000} {
		bigPattern(n) // the probe's answers, computed before anything is timed
	}
	starve := func(h *h2conn, tag string, size int) {
		for i := range 4 {
			id := uint32(2*i + 1)
			h.headers(id, h.block(wire.MethodInfer, probeMode, fmt.Sprintf("big:%d", size), "x-probe-id", fmt.Sprintf("%s%d", tag, i)), false)
			h.fr.WriteData(id, true, grpcMessage(req))
		}
		h.flush()
	}
	flowStarved := dialH2(t, e.tcp) // default 65535 windows, never updated
	starve(flowStarved, "flow", 1_500_000)
	sockStarved := dialH2(t, e.tcp, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	sockStarved.fr.WriteWindowUpdate(0, 1<<31-1-65535)
	starve(sockStarved, "sock", 3_000_000)
	p.waitStarted(t, 8)

	c := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))
	for i := range 4 {
		ctx, cancel := context.WithTimeout(probeCtx(context.Background(), "big:1000000", "ok"), 5*time.Second)
		r, err := c.ModelInfer(ctx, inferRequest("detector", fmt.Sprintf("ok#%d", i), 1000))
		cancel()
		if err != nil || len(r.RawOutputContents) != 1 || !bytes.Equal(r.RawOutputContents[0], bigPattern(1_000_000)) {
			t.Fatalf("call %d beside starved clients: %v", i, err)
		}
	}
	if err := serves(t, e.tcp, "detector"); err != nil {
		t.Error(err)
	}
	// What reached the flow-starved client: at most its 65535-byte connection
	// window, and no stream finished.
	var got, ended int
	flowStarved.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		f, err := flowStarved.fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			got += len(f.Data())
			if f.StreamEnded() {
				ended++
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				ended++
			}
		}
	}
	if got > 65535 || ended != 0 {
		t.Errorf("flow-starved client received %d B of DATA and %d finished streams; its window was 65535 B", got, ended)
	}
	t.Logf("flow-starved client: %d B of DATA within its 65535 B window", got)
	flowStarved.c.Close()
	sockStarved.c.Close()
	drained(t, e.gw)
}

// Slowloris: connections that send nothing, only the preface, or half a frame, stay
// open while vig serves others; none of them becomes an RPC.
func TestH2Slowloris(t *testing.T) {
	e, _ := withProbe(t, "")
	before := e.gw.Accepted()
	for i := range 24 {
		h := dialRaw(t, e.tcp)
		switch i % 3 {
		case 1:
			io.WriteString(h.c, http2.ClientPreface)
		case 2:
			io.WriteString(h.c, http2.ClientPreface)
			h.fr.WriteSettings()
			h.flush()
			// A HEADERS frame header announcing 1000 bytes, and 10 of them.
			h.c.Write([]byte{0, 0x03, 0xe8, byte(http2.FrameHeaders), 0x4, 0, 0, 0, 1})
			h.c.Write(make([]byte, 10))
		}
	}
	for range 3 {
		if err := serves(t, e.tcp, "detector"); err != nil {
			t.Fatalf("beside 24 slow connections: %v", err)
		}
	}
	if got := e.gw.Accepted() - before; got != 6 {
		t.Errorf("vig accepted %d RPCs, want 6 (3 × ServerLive + ModelInfer): a slow connection became an RPC", got)
	}
}

// Resets of calls vig has already forwarded: 200 calls the backend holds, then 200
// RST_STREAMs in one burst. Every backend call is cancelled (no backend stream is
// left behind), vig answers every RPC it accepted, and other clients are served
// meanwhile.
func TestH2ResetForwardedCalls(t *testing.T) {
	e, p := withProbe(t, "")
	stop := background(t, e.tcp)
	h := dialH2(t, e.tcp)
	go io.Copy(io.Discard, h.c) // whatever vig answers
	msg := grpcMessage(mustMarshal(t, inferRequest("detector", "reset", 100)))
	const n = 200
	for i := range n {
		id := uint32(2*i + 1)
		h.headers(id, h.block(wire.MethodInfer, probeMode, "hold", "x-probe-id", "reset"), false)
		h.fr.WriteData(id, true, msg)
	}
	h.flush()
	p.waitStartedID(t, "reset", n)
	for i := range n {
		h.fr.WriteRSTStream(uint32(2*i+1), http2.ErrCodeCancel)
	}
	h.flush()
	eventually(t, "every forwarded call cancelled at the backend", func() bool { return p.cancelled.Load() == n })
	drained(t, e.gw)
	if got := grpcCodes(t, e.reg, "ModelInfer")["Canceled"]; got != n {
		t.Errorf("vig counted %v cancelled ModelInfer, want %d", got, n)
	}
	checkBackground(t, stop)
	if err := serves(t, e.tcp, "detector"); err != nil {
		t.Error(err)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A PING flood (1000 PINGs, no streams): vig either answers them all or, as grpc-go's
// keepalive enforcement does, closes the connection with GOAWAY ENHANCE_YOUR_CALM;
// it never dies or stalls other clients.
func TestH2PingFlood(t *testing.T) {
	e, _ := withProbe(t, "")
	stop := background(t, e.tcp)
	h := dialH2(t, e.tcp)
	acks := make(chan int, 1)
	var goaway *http2.GoAwayFrame
	go func() {
		n := 0
		defer func() { acks <- n }()
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.PingFrame:
				if f.IsAck() {
					if n++; n == 1000 {
						return
					}
				}
			case *http2.GoAwayFrame:
				goaway = f
			}
		}
	}()
	for i := range 1000 {
		var data [8]byte
		binary.BigEndian.PutUint64(data[:], uint64(i))
		if err := h.fr.WritePing(false, data); err != nil {
			break
		}
	}
	h.flush()
	h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n := <-acks
	switch {
	case n == 1000:
		t.Logf("ping flood: all 1000 PINGs answered")
	case goaway != nil && goaway.ErrCode == http2.ErrCodeEnhanceYourCalm:
		t.Logf("ping flood: %d answered, then GOAWAY ENHANCE_YOUR_CALM %q", n, goaway.DebugData())
	default:
		t.Errorf("ping flood: %d PINGs answered, GOAWAY %v; want all answered or GOAWAY ENHANCE_YOUR_CALM", n, goaway)
	}
	checkBackground(t, stop)
}
