package gateway_test

// A raw HTTP/2 backend written for the tests: what vig's backend leg does when
// the backend misbehaves (GOAWAY loops, GOAWAY before a call was processed).

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/gateway"
	pb "github.com/vig-edge/vig/proto/inference"
)

// rawBackend accepts connections and runs handle on each (its n-th, from 1).
type rawBackend struct {
	ln      net.Listener
	accepts atomic.Int32
	wg      sync.WaitGroup
}

// backendConn is the server side of one connection, its preface read.
type backendConn struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

func startRawBackend(t *testing.T, handle func(n int, bc *backendConn)) *rawBackend {
	t.Helper()
	return startRawBackendWith(t, nil, handle)
}

// startRawBackendWith is startRawBackend whose SETTINGS are settings.
func startRawBackendWith(t *testing.T, settings []http2.Setting, handle func(n int, bc *backendConn)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rawBackend{ln: ln}
	var conns sync.Map
	rb.wg.Add(1)
	go func() {
		defer rb.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(rb.accepts.Add(1))
			conns.Store(c, true)
			rb.wg.Add(1)
			go func() {
				defer rb.wg.Done()
				defer c.Close()
				bc := &backendConn{t: t, c: c}
				bc.fr = http2.NewFramer(c, c)
				bc.fr.AllowIllegalWrites = true
				bc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				bc.enc = hpack.NewEncoder(&bc.hbuf)
				pre := make([]byte, len(http2.ClientPreface))
				if _, err := io.ReadFull(c, pre); err != nil {
					return
				}
				if err := bc.fr.WriteSettings(settings...); err != nil {
					return
				}
				handle(n, bc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		rb.wg.Wait()
	})
	return rb
}

// request reads frames until a request is complete (HEADERS and DATA with
// END_STREAM) and returns its stream and message; it acknowledges SETTINGS
// and PINGs. ok is false once vig closed the connection.
// inferID is the request id of a ModelInfer message ("" for another RPC's).
func inferID(msg []byte) string {
	var in pb.ModelInferRequest
	proto.Unmarshal(msg, &in)
	return in.Id
}

func (bc *backendConn) request() (stream uint32, msg []byte, ok bool) {
	var body []byte
	for {
		f, err := bc.fr.ReadFrame()
		if err != nil {
			return 0, nil, false
		}
		if bc.ack(f) {
			continue
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			stream = f.StreamID
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				if len(body) < 5 {
					return f.StreamID, nil, true
				}
				return f.StreamID, body[5:], true
			}
		}
	}
}

// ack acknowledges a SETTINGS or PING frame, reporting whether f was one.
func (bc *backendConn) ack(f http2.Frame) bool {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			bc.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			bc.fr.WritePing(true, f.Data)
		}
	default:
		return false
	}
	return true
}

// answerInfer answers a ModelInfer request with its id.
func (bc *backendConn) answerInfer(stream uint32, req []byte) {
	var in pb.ModelInferRequest
	proto.Unmarshal(req, &in)
	out, _ := proto.Marshal(&pb.ModelInferResponse{ModelName: in.ModelName, Id: in.Id})
	bc.hbuf.Reset()
	bc.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	bc.enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: bc.hbuf.Bytes(), EndHeaders: true})
	msg := make([]byte, 5, 5+len(out))
	binary.BigEndian.PutUint32(msg[1:], uint32(len(out)))
	bc.fr.WriteData(stream, false, append(msg, out...))
	bc.hbuf.Reset()
	bc.enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
	bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: bc.hbuf.Bytes(), EndHeaders: true, EndStream: true})
}

// untilClosed reads until vig closes the connection, acknowledging what it must.
func (bc *backendConn) untilClosed() {
	for {
		if _, _, ok := bc.request(); !ok {
			return
		}
	}
}

// A backend that sends GOAWAY as soon as it is connected: vig redials with
// backoff, not in a loop (a connection that ends at once keeps the backoff
// growing). The bound is on dials within a sleep: timers never fire early, so
// a faster machine cannot dial more. vig used to redial at once or every 50 ms
// (11 dials in 600 ms here).
func TestBackendGoAwayLoopBacksOff(t *testing.T) {
	rb := startRawBackend(t, func(_ int, bc *backendConn) {
		bc.fr.WriteGoAway(0, http2.ErrCodeNo, []byte("restarting"))
		bc.untilClosed()
	})
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	e := startEnv(t, cfg, false)
	start := rb.accepts.Load()
	time.Sleep(600 * time.Millisecond)
	n := rb.accepts.Load() - start
	// 50 ms, then ×1.6 each: 50+80+128+205 = 463 ms, so at most 5 dials in 600 ms.
	t.Logf("backend sending GOAWAY at once: %d dials in 600 ms", n)
	if n > 6 {
		t.Errorf("%d dials in 600 ms to a backend that sends GOAWAY at once: no backoff", n)
	}
	_ = e
}

// GOAWAY naming a last stream below a call's: the backend did not process the
// call (RFC 9113 §6.8), so vig starts it again on a new connection instead of
// failing it, and closes the old connection once its own streams are done.
func TestBackendGoAwayRetriesUnprocessed(t *testing.T) {
	oldClosed := make(chan struct{})
	rb := startRawBackend(t, func(n int, bc *backendConn) {
		if n == 1 {
			if _, _, ok := bc.request(); !ok {
				return
			}
			bc.fr.WriteGoAway(0, http2.ErrCodeNo, nil) // stream 1 not processed
			bc.untilClosed()
			close(oldClosed)
			return
		}
		for {
			stream, msg, ok := bc.request()
			if !ok {
				return
			}
			bc.answerInfer(stream, msg)
		}
	})
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
	defer cancel()
	r, err := c.ModelInfer(ctx, inferRequest("detector", "retry#1", 10))
	if err != nil || r.Id != "retry#1" {
		t.Fatalf("a call the backend refused with GOAWAY before processing it: %v %v, want it served on the next connection", r, err)
	}
	select {
	case <-oldClosed:
	case <-ctx.Done():
		t.Errorf("vig kept the connection the backend sent GOAWAY on")
	}
	if n := rb.accepts.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// A call the backend left unprocessed (GOAWAY) waits for the next connection;
// when its client leaves meanwhile, vig drops it there and then: it is not
// sent once the redial succeeds, to compute an answer nobody waits for.
func TestBackendAbortWhileParked(t *testing.T) {
	var mu sync.Mutex
	var later []string // the request ids the connections after the first were sent
	rb := startRawBackend(t, func(n int, bc *backendConn) {
		if n == 1 {
			if _, _, ok := bc.request(); ok {
				bc.fr.WriteGoAway(0, http2.ErrCodeNo, nil) // not processed: vig redials and parks the call
			}
			bc.untilClosed()
			return
		}
		for {
			stream, msg, ok := bc.request()
			if !ok {
				return
			}
			mu.Lock()
			later = append(later, inferID(msg))
			mu.Unlock()
			bc.answerInfer(stream, msg)
		}
	})
	release := make(chan struct{})
	var releaseOnce sync.Once
	var dials atomic.Int32
	hang := func(dial dialFunc) dialFunc {
		return func(ctx context.Context, addr string) (net.Conn, error) {
			if dials.Add(1) > 1 {
				<-release // the redial waits for the test
			}
			return dial(ctx, addr)
		}
	}
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	e := startEnvDial(t, cfg, false, hang)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the gateway stops (last first)
	waitBackendReady(t, e)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(ctx, inferRequest("detector", "parked#1", 10))
		done <- err
	}()
	eventually(t, "the call parked for the redial after GOAWAY", func() bool {
		return dials.Load() >= 2 && gateway.ParkedCalls(e.gw) == 1
	})
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("the client's call: %v, want CANCELLED", err)
	}
	eventually(t, "the abandoned call no longer parked", func() bool { return gateway.ParkedCalls(e.gw) == 0 })
	releaseOnce.Do(func() { close(release) })
	eventually(t, "vig's next connection", func() bool { return gateway.BackendConnSeq(e.gw) != 0 })
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
	defer cancel2()
	if _, err := c.ModelInfer(ctx2, inferRequest("detector", "next#2", 10)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(later) != 1 || later[0] != "next#2" {
		t.Errorf("the next connection was sent %q, want only \"next#2\" (not the call its client had left)", later)
	}
}

// misbehave answers a ModelInfer by its request id: the backend's faults a
// careful client must survive.
func (bc *backendConn) misbehave(stream uint32, req []byte) {
	var in pb.ModelInferRequest
	proto.Unmarshal(req, &in)
	hdr := func(end bool, kv ...string) {
		bc.hbuf.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			bc.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: bc.hbuf.Bytes(), EndHeaders: true, EndStream: end})
	}
	switch in.Id {
	case "second-headers": // a second header block without END_STREAM (§8.1)
		hdr(false, ":status", "200", "content-type", "application/grpc")
		hdr(false, "x-more", "1")
	case "window-overflow": // a stream send window above 2^31-1 (§6.9.1)
		bc.fr.WriteWindowUpdate(stream, 1<<31-1)
		bc.fr.WriteWindowUpdate(stream, 1<<31-1)
	case "window-zero": // WINDOW_UPDATE of 0 on the stream (§6.9)
		bc.fr.WriteWindowUpdate(stream, 0)
	case "rst": // the backend resets the call
		bc.fr.WriteRSTStream(stream, http2.ErrCodeInternal)
	case "big-headers": // a header list above vig's 1 MiB, in a block below it
		kv := []string{":status", "200", "content-type", "application/grpc"}
		for i := range 20 {
			kv = append(kv, "x-big-"+string(rune('a'+i)), string(bytes.Repeat([]byte{'a' + byte(i)}, 60<<10)))
		}
		bc.hbuf.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			bc.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		blk := bc.hbuf.Bytes()
		first := true
		for len(blk) > 0 {
			n := min(len(blk), 16384)
			if first {
				bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: blk[:n], EndHeaders: n == len(blk)})
				first = false
			} else {
				bc.fr.WriteContinuation(stream, n == len(blk), blk[:n])
			}
			blk = blk[n:]
		}
	case "data-stream-0": // DATA on stream 0: a connection error (§6.1)
		bc.fr.WriteData(0, false, []byte("x"))
	case "unknown-stream": // HEADERS on a stream vig never opened (§5.1 idle)
		bc.hbuf.Reset()
		bc.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream + 100, BlockFragment: bc.hbuf.Bytes(), EndHeaders: true})
	case "undecodable": // a header block HPACK cannot decode (§4.3)
		bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
	default:
		bc.answerInfer(stream, req)
	}
}

// The misbehaving-backend suite: each fault of the backend fails exactly the
// call it concerns, with a clear status. A stream-level fault leaves the
// connection and its other calls alone (no redial); a connection-level fault
// resets the connection, vig redials (with backoff), and the next call is
// served. Nothing is answered twice (accepted == answered at the end).
func TestBackendMisbehaves(t *testing.T) {
	rb := startRawBackend(t, func(_ int, bc *backendConn) {
		for {
			stream, msg, ok := bc.request()
			if !ok {
				return
			}
			bc.misbehave(stream, msg)
		}
	})
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	call := func(id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
		defer cancel()
		r, err := c.ModelInfer(ctx, inferRequest("detector", id, 10))
		if err == nil && r.Id != id {
			return fmt.Errorf("answer for %q", r.Id)
		}
		return err
	}
	if err := call("ok#0"); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tc := range []struct {
		id   string
		code codes.Code
		conn bool // a connection error: vig redials
	}{
		{"second-headers", codes.Internal, false},
		{"window-overflow", codes.Internal, false},
		{"window-zero", codes.Internal, false},
		{"rst", codes.Internal, false},
		{"big-headers", codes.Internal, false},
		{"data-stream-0", codes.Unavailable, true},
		{"unknown-stream", codes.Unavailable, true},
		{"undecodable", codes.Unavailable, true},
	} {
		before, seq := rb.accepts.Load(), gateway.BackendConnSeq(e.gw)
		err := call(tc.id)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.id, err, tc.code)
		} else {
			t.Logf("%s: %v", tc.id, err)
		}
		if tc.conn {
			// The backend's accept comes before vig has the connection's
			// SETTINGS (and health may not yet say it was lost): wait for
			// vig's next connection to be usable.
			eventually(t, "vig redials", func() bool {
				n := gateway.BackendConnSeq(e.gw)
				return rb.accepts.Load() > before && n != 0 && n != seq
			})
		}
		n++
		if err := call(fmt.Sprintf("ok#%d", n)); err != nil {
			t.Errorf("the next call after %s: %v", tc.id, err)
		}
		if got := rb.accepts.Load(); !tc.conn && got != before {
			t.Errorf("%s, a stream error, made vig redial (%d connections, was %d)", tc.id, got, before)
		}
	}
	drained(t, e.gw)
}

// A connection error caused by the backend is announced to it with GOAWAY and
// the error code before vig closes the connection (RFC 9113 §5.4.1).
func TestBackendConnectionErrorGoAway(t *testing.T) {
	got := make(chan http2.ErrCode, 4)
	rb := startRawBackend(t, func(n int, bc *backendConn) {
		if n > 1 {
			bc.untilClosed()
			return
		}
		bc.fr.WriteData(0, false, []byte("x"))
		for {
			f, err := bc.fr.ReadFrame()
			if err != nil {
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				got <- g.ErrCode
			}
		}
	})
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	startEnv(t, cfg, false)
	select {
	case code := <-got:
		if code != http2.ErrCodeProtocol {
			t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no GOAWAY from vig after the backend's DATA on stream 0")
	}
}

// The backend's SETTINGS_MAX_CONCURRENT_STREAMS and SETTINGS_MAX_HEADER_LIST_SIZE
// are honoured (they were ignored): a call beyond the stream limit fails
// UNAVAILABLE at vig, a request whose headers exceed the list size fails
// INTERNAL naming the setting, and the backend never sees either.
func TestBackendSettingsHonoured(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	rb := startRawBackendWith(t, []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 1}, {ID: http2.SettingMaxHeaderListSize, Val: 600}},
		func(_ int, bc *backendConn) {
			var held []uint32
			for {
				stream, msg, ok := bc.request()
				if !ok {
					return
				}
				id := inferID(msg)
				if id == "" {
					bc.answerInfer(stream, msg) // not a ModelInfer (vig's own calls)
					continue
				}
				mu.Lock()
				seen = append(seen, id)
				mu.Unlock()
				if id == "hold" {
					held = append(held, stream)
					continue
				}
				bc.answerInfer(stream, msg)
			}
		})
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	cfg.Backend.StatsIntervalMs = -1 // no ModelStatistics calls of vig's own on the one stream
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
	defer cancel()
	if _, err := c.ModelInfer(metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("m", 700)), inferRequest("detector", "big-meta", 10)); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "MAX_HEADER_LIST_SIZE") {
		t.Errorf("headers above the backend's SETTINGS_MAX_HEADER_LIST_SIZE: %v, want INTERNAL naming it", err)
	}
	hctx, hcancel := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() { _, err := c.ModelInfer(hctx, inferRequest("detector", "hold", 10)); held <- err }()
	eventually(t, "the held call reaches the backend", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0
	})
	if _, err := c.ModelInfer(ctx, inferRequest("detector", "second", 10)); status.Code(err) != codes.Unavailable {
		t.Errorf("a second call with SETTINGS_MAX_CONCURRENT_STREAMS 1 and one running: %v, want UNAVAILABLE", err)
	}
	hcancel()
	<-held
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "hold" {
		t.Errorf("the backend saw %v, want only the held call", seen)
	}
}

// A backend that answers a call with a non-200 :status and leaves its stream
// open: the call fails with gRPC's mapping of the status (UNAVAILABLE for
// 503), and vig resets the backend stream (CANCEL) rather than leave it open
// there (it used to, the request being sent whole).
func TestBackendHTTPStatusResetsStream(t *testing.T) {
	rst := make(chan http2.ErrCode, 1)
	rb := startRawBackend(t, func(_ int, bc *backendConn) {
		for {
			stream, msg, ok := bc.request()
			if !ok {
				return
			}
			if inferID(msg) != "http-503" {
				bc.answerInfer(stream, msg)
				continue
			}
			bc.hbuf.Reset()
			bc.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "503"})
			bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: bc.hbuf.Bytes(), EndHeaders: true})
			for {
				f, err := bc.fr.ReadFrame()
				if err != nil {
					return
				}
				if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == stream {
					rst <- r.ErrCode
					break
				}
				if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
					bc.fr.WriteSettingsAck()
				}
			}
		}
	})
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
	defer cancel()
	if _, err := c.ModelInfer(ctx, inferRequest("detector", "http-503", 10)); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "503") {
		t.Errorf("a backend answering HTTP 503: %v, want UNAVAILABLE naming it", err)
	}
	select {
	case code := <-rst:
		if code != http2.ErrCodeCancel {
			t.Errorf("RST_STREAM %v, want CANCEL", code)
		}
	case <-ctx.Done():
		t.Error("vig left the backend stream of a 503 answer open (no RST_STREAM)")
	}
	if r, err := c.ModelInfer(ctx, inferRequest("detector", "after", 10)); err != nil || r.Id != "after" {
		t.Errorf("the next call: %v %v", r, err)
	}
	drained(t, e.gw)
}
