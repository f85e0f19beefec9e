package h2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/netopt"
)

// ClientConn alone against a raw HTTP/2 server written for the tests: what
// the client role does when the peer answers well and when it misbehaves.

// rawPeer is the server side of a test connection, its preface read and its
// SETTINGS sent.
type rawPeer struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

// clientPair is a ClientConn connected to a rawPeer over TCP loopback.
type clientPair struct {
	cc     *ClientConn
	peer   *rawPeer
	ran    chan error // Run's result
	goAway chan uint32
}

func newClientPair(t *testing.T, settings ...http2.Setting) *clientPair {
	t.Helper()
	return newClientPairWith(t, nil, settings...)
}

// newClientPairWith is newClientPair with the ClientConn's socket writer
// wrapped by wrap (nil: as it is).
func newClientPairWith(t *testing.T, wrap func(SockWriter) SockWriter, settings ...http2.Setting) *clientPair {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	p := &rawPeer{t: t, c: sc, fr: http2.NewFramer(sc, sc)}
	p.fr.AllowIllegalWrites = true
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.hbuf)
	tw, err := netopt.NewTryWriter(nc)
	if err != nil {
		t.Fatal(err)
	}
	sw := NewConnWriter(tw, nc)
	if wrap != nil {
		sw = wrap(sw)
	}
	w := NewWriter(nc, sw)
	ready := make(chan error, 1)
	cp := &clientPair{peer: p, ran: make(chan error, 1), goAway: make(chan uint32, 1)}
	cp.cc = NewClientConn(w, NewReader(nc, 16<<10), ClientConfig{Peer: "backend", Window: 1 << 16, MaxMsg: 1 << 20,
		Ready:  func(err error) { ready <- err },
		GoAway: func(last uint32, _ http2.ErrCode, _ []byte) { cp.goAway <- last }})
	go func() { cp.ran <- cp.cc.Run() }()
	pre := make([]byte, len(ClientPreface))
	if _, err := io.ReadFull(sc, pre); err != nil || string(pre) != ClientPreface {
		t.Fatalf("preface %q, %v", pre, err)
	}
	if err := p.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cp.cc.Close(nil)
		sc.Close()
		<-cp.ran
	})
	return cp
}

// next is the peer's next frame other than SETTINGS, PING and WINDOW_UPDATE
// (acknowledged as they must be); nil once vig closed the connection.
func (p *rawPeer) next() http2.Frame {
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return nil
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				p.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				p.fr.WritePing(true, f.Data)
			}
		case *http2.WindowUpdateFrame:
		default:
			return f
		}
	}
}

// until reads frames until one that match accepts; it fails the test if vig
// closes the connection first.
func (p *rawPeer) until(what string, match func(http2.Frame) bool) http2.Frame {
	p.t.Helper()
	for {
		f := p.next()
		if f == nil {
			p.t.Fatalf("connection closed before %s", what)
		}
		if match(f) {
			return f
		}
	}
}

// request reads until stream's request is complete and returns its message.
func (p *rawPeer) request(stream uint32) []byte {
	p.t.Helper()
	var body []byte
	p.until("the request", func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == stream {
			body = append(body, d.Data()...)
			return d.StreamEnded()
		}
		return false
	})
	return body
}

// rst reads until a RST_STREAM on stream and returns its code.
func (p *rawPeer) rst(stream uint32) http2.ErrCode {
	p.t.Helper()
	f := p.until("RST_STREAM", func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == stream
	})
	return f.(*http2.RSTStreamFrame).ErrCode
}

// goAwayCode reads until vig's GOAWAY and returns its code; ok is false when
// the connection closed without one.
func (p *rawPeer) goAwayCode() (http2.ErrCode, bool) {
	for {
		f := p.next()
		if f == nil {
			return 0, false
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g.ErrCode, true
		}
	}
}

func (p *rawPeer) headers(stream uint32, end bool, kv ...string) {
	p.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		p.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: p.hbuf.Bytes(), EndHeaders: true, EndStream: end})
}

func grpcMsg(b []byte) []byte {
	m := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(m[1:], uint32(len(b)))
	return append(m, b...)
}

// answer sends a whole good answer to stream: headers, msg, grpc-status 0.
func (p *rawPeer) answer(stream uint32, msg string) {
	p.headers(stream, false, ":status", "200", "content-type", "application/grpc", "x-meta", "m")
	p.fr.WriteData(stream, false, grpcMsg([]byte(msg)))
	p.headers(stream, true, "grpc-status", "0", "x-trail", "t")
}

// recStream is a stream and what its handler was told.
type recStream struct {
	ClientStream
	mu    sync.Mutex
	hdr   []hpack.HeaderField
	msgs  []string
	trail []hpack.HeaderField
	err   error
	ends  int
	done  chan struct{}
}

func newRec() *recStream { return &recStream{done: make(chan struct{})} }

func (r *recStream) Headers(fields []hpack.HeaderField) {
	r.mu.Lock()
	r.hdr = append([]hpack.HeaderField(nil), fields...)
	r.mu.Unlock()
}
func (r *recStream) Message(msg mem.BufferSlice, _ bool) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, string(msg.Materialize()))
	r.mu.Unlock()
	msg.Free()
	return nil
}
func (r *recStream) End(trail []hpack.HeaderField, err error) {
	r.mu.Lock()
	r.trail, r.err = append([]hpack.HeaderField(nil), trail...), err
	r.ends++
	n := r.ends
	r.mu.Unlock()
	if n == 1 {
		close(r.done)
	}
}

// wait waits for the stream's end (liveness bound only) and returns its error.
func (r *recStream) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("stream %d never ended", r.id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ends != 1 {
		t.Errorf("stream %d ended %d times", r.id, r.ends)
	}
	return r.err
}

var reqFields = []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
	{Name: ":path", Value: "/x.Y/Z"}, {Name: ":authority", Value: "t"}, {Name: "content-type", Value: "application/grpc"}}

// call opens a stream and sends one whole request.
func (cp *clientPair) call(t *testing.T, end bool) *recStream {
	t.Helper()
	r := newRec()
	if err := cp.cc.Open(&r.ClientStream, r, nil, reqFields); err != nil {
		t.Fatal(err)
	}
	if !cp.cc.Send(&r.ClientStream, false, mem.BufferSlice{mem.SliceBuffer([]byte("req"))}, end) {
		t.Fatal("Send on a stream just opened failed")
	}
	return r
}

func wantCode(t *testing.T, what string, err error, code codes.Code, sub string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), sub) {
		t.Errorf("%s: %v, want %v mentioning %q", what, err, code, sub)
	}
}

// writeCount counts the writes of a connection's Writer.
type writeCount struct {
	SockWriter
	n atomic.Int32
}

func (w *writeCount) Writev(bufs [][]byte) (int, error) { w.n.Add(1); return w.SockWriter.Writev(bufs) }
func (w *writeCount) WriteAll(bufs [][]byte) error      { w.n.Add(1); return w.SockWriter.WriteAll(bufs) }

// A request forwarded as it arrives (cut-through) starts with its head and
// the bytes that arrived before its call started, in one write: the head
// alone was a write of its own (a 150 KB request went to the backend in
// three), and each write wakes the backend.
func TestClientConnSendStartOneWrite(t *testing.T) {
	var wc *writeCount
	cp := newClientPairWith(t, func(s SockWriter) SockWriter { wc = &writeCount{SockWriter: s}; return wc })
	r := newRec()
	if err := cp.cc.Open(&r.ClientStream, r, nil, reqFields); err != nil {
		t.Fatal(err)
	}
	head, arrived, rest := []byte("head"), bytes.Repeat([]byte{'a'}, 40<<10), []byte("rest")
	msg := slices.Concat(head, arrived, rest)
	before := wc.n.Load()
	if !cp.cc.SendStart(&r.ClientStream, len(msg), mem.BufferSlice{mem.SliceBuffer(head)}, mem.BufferSlice{mem.SliceBuffer(arrived)}, false) {
		t.Fatal("SendStart on a stream just opened failed")
	}
	if got := wc.n.Load() - before; got != 1 {
		t.Errorf("the start of a request with %d bytes arrived: %d writes, want 1", len(arrived), got)
	}
	if !cp.cc.SendMore(&r.ClientStream, mem.BufferSlice{mem.SliceBuffer(rest)}, true) {
		t.Fatal("SendMore failed")
	}
	if got := cp.peer.request(r.ID()); !bytes.Equal(got, grpcMsg(msg)) {
		t.Fatalf("peer received %d bytes, want the %d-byte message", len(got), len(msg))
	}
}

// A good answer: headers, the message and the trailers reach the handler, in
// order, once.
func TestClientConnUnary(t *testing.T) {
	cp := newClientPair(t)
	r := cp.call(t, true)
	if got := cp.peer.request(r.ID()); !bytes.Equal(got, grpcMsg([]byte("req"))) {
		t.Fatalf("peer received %q", got)
	}
	cp.peer.answer(r.ID(), "ok")
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	if len(r.msgs) != 1 || r.msgs[0] != "ok" || len(r.hdr) != 3 || r.hdr[2].Value != "m" || len(r.trail) != 2 || r.trail[1].Value != "t" {
		t.Errorf("headers %v, messages %q, trailers %v", r.hdr, r.msgs, r.trail)
	}
}

// A non-200 :status ends the stream with gRPC's mapping of it, and vig resets
// the stream rather than leave it open at the peer (it used to stay open).
func TestClientConnHTTPStatus(t *testing.T) {
	cp := newClientPair(t)
	r := cp.call(t, true)
	cp.peer.request(r.ID())
	cp.peer.headers(r.ID(), false, ":status", "503")
	wantCode(t, "a 503 answer", r.wait(t), codes.Unavailable, "HTTP status 503")
	if code := cp.peer.rst(r.ID()); code != http2.ErrCodeCancel {
		t.Errorf("RST_STREAM %v, want CANCEL", code)
	}
}

// Early trailers (a trailers-only answer before vig's request is sent whole)
// end the stream with their grpc-status and reset vig's unfinished side.
func TestClientConnEarlyTrailers(t *testing.T) {
	cp := newClientPair(t)
	r := cp.call(t, false) // the request is not complete
	cp.peer.until("HEADERS", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
	cp.peer.headers(r.ID(), true, ":status", "200", "grpc-status", "5", "grpc-message", "no%20such")
	wantCode(t, "early trailers", r.wait(t), codes.NotFound, "no such")
	if code := cp.peer.rst(r.ID()); code != http2.ErrCodeCancel {
		t.Errorf("RST_STREAM %v, want CANCEL", code)
	}
	if cp.cc.Send(&r.ClientStream, false, mem.BufferSlice{mem.SliceBuffer([]byte("late"))}, true) {
		t.Error("Send on an ended stream reported success")
	}
}

// Stream faults of the peer fail only that stream (RST_STREAM with the RFC's
// code); the next call on the same connection is served.
func TestClientConnStreamFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(p *rawPeer, id uint32)
		rst   http2.ErrCode
		code  codes.Code
		sub   string
	}{
		{"second headers", func(p *rawPeer, id uint32) {
			p.headers(id, false, ":status", "200")
			p.headers(id, false, "x", "1")
		}, http2.ErrCodeProtocol, codes.Internal, "second header block"},
		{"trailers with a pseudo-header", func(p *rawPeer, id uint32) {
			p.headers(id, false, ":status", "200")
			p.headers(id, true, ":status", "200", "grpc-status", "0")
		}, http2.ErrCodeProtocol, codes.Internal, "malformed trailers"},
		{"send window overflow", func(p *rawPeer, id uint32) {
			p.fr.WriteWindowUpdate(id, 1<<31-1)
			p.fr.WriteWindowUpdate(id, 1<<31-1)
		}, http2.ErrCodeFlowControl, codes.Internal, "2^31-1"},
		{"stream WINDOW_UPDATE of 0", func(p *rawPeer, id uint32) { p.fr.WriteWindowUpdate(id, 0) }, http2.ErrCodeProtocol, codes.Internal, "WINDOW_UPDATE of 0"},
		{"oversized header list", func(p *rawPeer, id uint32) {
			kv := []string{":status", "200"}
			for i := range 20 {
				kv = append(kv, "x-big-"+string(rune('a'+i)), strings.Repeat(string(rune('a'+i)), 60<<10))
			}
			p.hbuf.Reset()
			for i := 0; i+1 < len(kv); i += 2 {
				p.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
			}
			blk := p.hbuf.Bytes()
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:16384]})
			for blk = blk[16384:]; len(blk) > 0; {
				n := min(len(blk), 16384)
				p.fr.WriteContinuation(id, n == len(blk), blk[:n])
				blk = blk[n:]
			}
		}, http2.ErrCodeCancel, codes.Internal, "header list larger"},
		{"message above MaxMsg", func(p *rawPeer, id uint32) {
			p.headers(id, false, ":status", "200")
			p.fr.WriteData(id, false, []byte{0, 0, 0x20, 0, 0}) // 2 MiB declared
		}, http2.ErrCodeCancel, codes.ResourceExhausted, "backend answer"},
		{"reset by the peer", func(p *rawPeer, id uint32) { p.fr.WriteRSTStream(id, http2.ErrCodeInternal) }, 0, codes.Internal, "reset the stream"},
		{"DATA with END_STREAM, no trailers", func(p *rawPeer, id uint32) {
			p.headers(id, false, ":status", "200")
			p.fr.WriteData(id, true, grpcMsg([]byte("x")))
		}, 0, codes.Internal, "without trailers"},
		{"no grpc-status", func(p *rawPeer, id uint32) { p.headers(id, true, ":status", "200") }, 0, codes.Internal, "without grpc-status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := newClientPair(t)
			r := cp.call(t, true)
			cp.peer.request(r.ID())
			tc.fault(cp.peer, r.ID())
			wantCode(t, tc.name, r.wait(t), tc.code, tc.sub)
			if tc.rst != 0 {
				if code := cp.peer.rst(r.ID()); code != tc.rst {
					t.Errorf("RST_STREAM %v, want %v", code, tc.rst)
				}
			}
			next := cp.call(t, true) // the connection goes on
			cp.peer.request(next.ID())
			cp.peer.answer(next.ID(), "ok")
			if err := next.wait(t); err != nil {
				t.Errorf("the next call on the connection: %v", err)
			}
		})
	}
}

// Connection faults of the peer end every stream UNAVAILABLE, and the peer is
// told why with GOAWAY.
func TestClientConnConnectionFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(p *rawPeer, id uint32)
		code  http2.ErrCode
	}{
		{"DATA on stream 0", func(p *rawPeer, _ uint32) { p.fr.WriteData(0, false, []byte("x")) }, http2.ErrCodeProtocol},
		{"HEADERS on a stream vig never opened", func(p *rawPeer, id uint32) { p.headers(id+100, false, ":status", "200") }, http2.ErrCodeProtocol},
		{"RST_STREAM on an idle stream", func(p *rawPeer, id uint32) { p.fr.WriteRSTStream(id+100, http2.ErrCodeCancel) }, http2.ErrCodeProtocol},
		{"undecodable header block", func(p *rawPeer, id uint32) {
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, http2.ErrCodeCompression},
		{"header block above MaxHeaderBlock", func(p *rawPeer, id uint32) {
			junk := make([]byte, 16384) // never decoded: the block's size refuses it first
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: junk})
			for i := 0; i <= MaxHeaderBlock/len(junk); i++ {
				if p.fr.WriteContinuation(id, false, junk) != nil {
					return // vig closed the connection
				}
			}
		}, http2.ErrCodeEnhanceYourCalm},
		{"connection window overflow", func(p *rawPeer, _ uint32) {
			p.fr.WriteWindowUpdate(0, 1<<31-1)
			p.fr.WriteWindowUpdate(0, 1<<31-1)
		}, http2.ErrCodeFlowControl},
		{"PUSH_PROMISE", func(p *rawPeer, id uint32) {
			p.fr.WritePushPromise(http2.PushPromiseParam{StreamID: id, PromiseID: 2, BlockFragment: []byte{0x88}, EndHeaders: true})
		}, http2.ErrCodeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := newClientPair(t)
			a, b := cp.call(t, true), cp.call(t, true)
			cp.peer.request(a.ID())
			cp.peer.request(b.ID())
			tc.fault(cp.peer, a.ID())
			if code, ok := cp.peer.goAwayCode(); !ok || code != tc.code {
				t.Errorf("GOAWAY %v (sent: %v), want %v", code, ok, tc.code)
			}
			wantCode(t, "the faulty stream", a.wait(t), codes.Unavailable, "connection lost")
			wantCode(t, "its neighbour", b.wait(t), codes.Unavailable, "connection lost")
			var ce ConnError
			if err := <-cp.ran; !errors.As(err, &ce) || ce.Code != tc.code {
				t.Errorf("Run: %v, want a connection error %v", err, tc.code)
			}
			cp.ran <- nil // for the cleanup
			if err := cp.cc.Open(&newRec().ClientStream, newRec(), nil, reqFields); err != ErrConnClosed {
				t.Errorf("Open on a failed connection: %v, want ErrConnClosed", err)
			}
		})
	}
}

// GOAWAY in the middle of calls: the streams above its last-stream-id end
// UnprocessedError (retryable), those below are answered, no stream opens,
// and the connection closes after the last.
func TestClientConnGoAwayMidCalls(t *testing.T) {
	cp := newClientPair(t)
	rs := []*recStream{cp.call(t, true), cp.call(t, true), cp.call(t, true)}
	for _, r := range rs {
		cp.peer.request(r.ID())
	}
	cp.peer.fr.WriteGoAway(rs[1].ID(), http2.ErrCodeNo, nil)
	if last := <-cp.goAway; last != rs[1].ID() {
		t.Errorf("GoAway told last %d", last)
	}
	err := rs[2].wait(t)
	if _, ok := err.(UnprocessedError); !ok || status.Code(err) != codes.Unavailable {
		t.Errorf("the stream above last-stream-id: %v (%T), want an UNAVAILABLE UnprocessedError", err, err)
	}
	if err := cp.cc.Open(&newRec().ClientStream, newRec(), nil, reqFields); err != ErrConnClosed {
		t.Errorf("Open after GOAWAY: %v, want ErrConnClosed", err)
	}
	cp.peer.answer(rs[0].ID(), "a")
	cp.peer.answer(rs[1].ID(), "b")
	for _, r := range rs[:2] {
		if err := r.wait(t); err != nil {
			t.Errorf("stream %d below last-stream-id: %v", r.ID(), err)
		}
	}
	if f := cp.peer.next(); f != nil { // vig closes once its streams are done
		t.Errorf("frame %v after the drained connection's last stream", f)
	}
	<-cp.ran
	cp.ran <- nil
}

// An RST_STREAM storm: every stream ends once, with the reset's status; the
// connection and the stream not reset are untouched.
func TestClientConnRSTStorm(t *testing.T) {
	cp := newClientPair(t)
	var rs []*recStream
	for range 200 {
		rs = append(rs, cp.call(t, true))
	}
	keep := cp.call(t, true)
	for _, r := range rs {
		cp.peer.request(r.ID())
	}
	cp.peer.request(keep.ID())
	for _, r := range rs {
		cp.peer.fr.WriteRSTStream(r.ID(), http2.ErrCodeRefusedStream)
		cp.peer.fr.WriteRSTStream(r.ID(), http2.ErrCodeCancel) // again: a closed stream's frame is ignored
	}
	for _, r := range rs {
		wantCode(t, "a reset stream", r.wait(t), codes.Unavailable, "refused")
	}
	cp.peer.answer(keep.ID(), "ok")
	if err := keep.wait(t); err != nil {
		t.Errorf("the stream not reset: %v", err)
	}
}

// The peer's SETTINGS_MAX_CONCURRENT_STREAMS is honoured (§5.1.2), its
// SETTINGS_MAX_HEADER_LIST_SIZE too (§6.5.2).
func TestClientConnPeerLimits(t *testing.T) {
	cp := newClientPair(t, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1}, http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: 300})
	r := cp.call(t, true)
	wantCode(t, "a second stream", cp.cc.Open(&newRec().ClientStream, newRec(), nil, reqFields), codes.Unavailable, "concurrent streams")
	cp.peer.request(r.ID())
	cp.peer.answer(r.ID(), "ok")
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	big := []hpack.HeaderField{{Name: "x-big", Value: strings.Repeat("m", 300)}}
	wantCode(t, "headers above the peer's list size", cp.cc.Open(&newRec().ClientStream, newRec(), nil, reqFields, big), codes.Internal, "MAX_HEADER_LIST_SIZE")
	r = cp.call(t, true) // the slot is free again
	cp.peer.request(r.ID())
	cp.peer.answer(r.ID(), "ok")
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
}

// Cancel resets the stream and takes its End: the handler is not told.
func TestClientConnCancel(t *testing.T) {
	cp := newClientPair(t)
	r := cp.call(t, false)
	if !cp.cc.Cancel(&r.ClientStream, http2.ErrCodeCancel) {
		t.Fatal("Cancel of an open stream reported it ended")
	}
	if cp.cc.Cancel(&r.ClientStream, http2.ErrCodeCancel) {
		t.Error("a second Cancel reported the stream open")
	}
	if code := cp.peer.rst(r.ID()); code != http2.ErrCodeCancel {
		t.Errorf("RST_STREAM %v", code)
	}
	cp.peer.answer(r.ID(), "late") // in flight: ignored
	next := cp.call(t, true)
	cp.peer.request(next.ID())
	cp.peer.answer(next.ID(), "ok")
	if err := next.wait(t); err != nil {
		t.Fatal(err)
	}
	if r.ends != 0 || cp.cc.Lookup(r.ID()) != nil {
		t.Errorf("a cancelled stream: %d ends, still in the table: %v", r.ends, cp.cc.Lookup(r.ID()) != nil)
	}
}

// An answer larger than the stream window (but within MaxMsg) is not stalled:
// every stream gets its window back as its data is consumed.
func TestClientConnLargeAnswer(t *testing.T) {
	cp := newClientPair(t)
	r := cp.call(t, true)
	cp.peer.request(r.ID())
	cp.peer.headers(r.ID(), false, ":status", "200")
	body := grpcMsg(bytes.Repeat([]byte{'x'}, 200<<10)) // three windows
	credit := int64(1 << 16)
	for len(body) > 0 {
		n := min(len(body), 16<<10)
		for credit < int64(n) { // the peer keeps within its window, as it must
			credit += cp.peer.streamCredit(r.ID())
		}
		cp.peer.fr.WriteData(r.ID(), false, body[:n])
		body = body[n:]
		credit -= int64(n)
	}
	cp.peer.headers(r.ID(), true, "grpc-status", "0")
	if err := r.wait(t); err != nil || len(r.msgs) != 1 || len(r.msgs[0]) != 200<<10 {
		t.Fatalf("a 200 KiB answer through a 64 KiB window: %v, %d messages", err, len(r.msgs))
	}
}

// streamCredit reads until a WINDOW_UPDATE on stream and returns its increment.
func (p *rawPeer) streamCredit(stream uint32) int64 {
	p.t.Helper()
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			p.t.Fatalf("no WINDOW_UPDATE for stream %d: %v", stream, err)
		}
		if w, ok := f.(*http2.WindowUpdateFrame); ok && w.StreamID == stream {
			return int64(w.Increment)
		}
	}
}
