package gateway_test

// One test per MUST of RFC 9113 that vig once broke (h2spec 2.2.1 found them:
// build/h2spec.sh). Each case drives a raw connection and names the section.
// Malformed requests are also checked never to reach the backend.

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/vig-edge/vig/agent/gateway"
)

// want is what vig must answer: RST_STREAM code on stream, or GOAWAY code (the
// connection error), or a response with DATA on stream.
type want struct {
	rst    http2.ErrCode
	goaway http2.ErrCode
	stream uint32
	data   bool
}

func rstOn(stream uint32, code http2.ErrCode) want {
	return want{rst: code, stream: stream, goaway: 0xff}
}
func goAway(code http2.ErrCode) want { return want{goaway: code, rst: 0xff} }

// expect reads until what w names arrives, and fails on a timeout.
func (h *h2conn) expect(t *testing.T, w want) {
	t.Helper()
	h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer h.c.SetReadDeadline(time.Time{})
	var seen []string
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || !errors.Is(err, io.EOF) {
				t.Fatalf("want %+v; read %v after %v", w, err, seen)
			}
			t.Fatalf("want %+v; connection closed after %v", w, seen)
		}
		seen = append(seen, f.Header().String())
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
				h.flush()
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == w.stream && f.ErrCode == w.rst {
				return
			}
		case *http2.GoAwayFrame:
			if f.ErrCode == w.goaway {
				return
			}
			t.Fatalf("want %+v; GOAWAY %v %q after %v", w, f.ErrCode, f.DebugData(), seen)
		case *http2.DataFrame:
			if w.data && f.StreamID == w.stream {
				return
			}
		}
	}
}

// rawBlock encodes name, value pairs as they are (no gRPC defaults).
func (h *h2conn) rawBlock(kv ...string) []byte {
	h.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		h.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), h.hbuf.Bytes()...)
}

func TestH2MUSTs(t *testing.T) {
	e, p := withProbe(t, "")
	stop := background(t, e.tcp)
	mc := "/" + gateway.Service + "/ModelConfig"
	get := []string{":method", "GET", ":scheme", "http", ":path", "/", ":authority", "vig"}
	grpcReq := func(extra ...string) []string {
		return append([]string{":method", "POST", ":scheme", "http", ":path", mc, ":authority", "vig",
			"content-type", "application/grpc"}, extra...)
	}
	// A content-length is checked against the DATA, after the request has been
	// relayed (its message is not): those go to another method.
	sized := func(n string) []string {
		return []string{":method", "POST", ":scheme", "http", ":path", "/" + gateway.Service + "/ModelMetadata", ":authority", "vig",
			"content-type", "application/grpc", "content-length", n}
	}
	window0 := http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}
	cases := []struct {
		name     string
		settings []http2.Setting
		run      func(h *h2conn)
		want     want
	}{
		{"5.1 idle: RST_STREAM is a connection error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
		}, goAway(http2.ErrCodeProtocol)},
		{"5.1 idle: WINDOW_UPDATE is a connection error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.fr.WriteWindowUpdate(1, 100)
		}, goAway(http2.ErrCodeProtocol)},
		{"5.1 half-closed (remote): DATA is a stream error STREAM_CLOSED", []http2.Setting{window0}, func(h *h2conn) {
			h.headers(1, h.rawBlock(get...), true)
			h.fr.WriteData(1, true, []byte("x"))
		}, rstOn(1, http2.ErrCodeStreamClosed)},
		{"5.1 half-closed (remote): HEADERS is a stream error STREAM_CLOSED", []http2.Setting{window0}, func(h *h2conn) {
			h.headers(1, h.rawBlock(get...), true)
			h.headers(1, h.rawBlock(get...), true)
		}, rstOn(1, http2.ErrCodeStreamClosed)},
		{"5.1 closed: DATA after RST_STREAM is a stream error STREAM_CLOSED", nil, func(h *h2conn) {
			h.headers(1, h.rawBlock(get...), false)
			h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			h.fr.WriteData(1, true, []byte("x"))
		}, rstOn(1, http2.ErrCodeStreamClosed)},
		{"5.1 closed: HEADERS after RST_STREAM is STREAM_CLOSED", nil, func(h *h2conn) {
			h.headers(1, h.rawBlock(get...), false)
			h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			h.headers(1, h.rawBlock(get...), true)
		}, goAway(http2.ErrCodeStreamClosed)},
		{"5.1.1 a stream id below the last one is a connection error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.headers(5, h.rawBlock(get...), true)
			h.headers(3, h.rawBlock(get...), true)
		}, goAway(http2.ErrCodeProtocol)},
		{"5.1.2 streams beyond SETTINGS_MAX_CONCURRENT_STREAMS are refused", []http2.Setting{window0}, func(h *h2conn) {
			blk := h.rawBlock(get...)
			for i := range 1001 {
				h.headers(uint32(2*i+1), blk, true)
			}
		}, rstOn(2001, http2.ErrCodeRefusedStream)},
		{"5.3.1 HEADERS depending on its own stream is a stream error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.rawBlock(get...), EndStream: true, EndHeaders: true,
				Priority: http2.PriorityParam{StreamDep: 1, Weight: 10}})
		}, rstOn(1, http2.ErrCodeProtocol)},
		{"5.3.1 PRIORITY depending on its own stream is a stream error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.fr.WritePriority(3, http2.PriorityParam{StreamDep: 3, Weight: 10})
		}, rstOn(3, http2.ErrCodeProtocol)},
		{"6.3 PRIORITY on stream 0 is a connection error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.fr.WriteRawFrame(http2.FramePriority, 0, 0, []byte{0, 0, 0, 1, 10})
		}, goAway(http2.ErrCodeProtocol)},
		{"6.3 PRIORITY of 4 octets is a stream error FRAME_SIZE_ERROR", nil, func(h *h2conn) {
			h.fr.WriteRawFrame(http2.FramePriority, 0, 1, []byte{0, 0, 0, 3})
		}, rstOn(1, http2.ErrCodeFrameSize)},
		{"6.8 GOAWAY on a stream is a connection error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.fr.WriteRawFrame(http2.FrameGoAway, 0, 1, make([]byte, 8))
		}, goAway(http2.ErrCodeProtocol)},
		{"6.9.1 a stream window above 2^31-1 is a stream error FLOW_CONTROL_ERROR", []http2.Setting{window0}, func(h *h2conn) {
			h.headers(1, h.rawBlock(get...), false)
			h.fr.WriteWindowUpdate(1, 1<<31-1)
			h.fr.WriteWindowUpdate(1, 1<<31-1)
		}, rstOn(1, http2.ErrCodeFlowControl)},
		{"6.9.2 SETTINGS_INITIAL_WINDOW_SIZE taking a window above 2^31-1 is a connection error FLOW_CONTROL_ERROR", []http2.Setting{window0}, func(h *h2conn) {
			h.headers(1, h.rawBlock(get...), false)
			h.fr.WriteWindowUpdate(1, 1<<31-1)
			h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
		}, goAway(http2.ErrCodeFlowControl)},
		{"6.5 (x/net's bound) SETTINGS with more than 100 entries is refused ENHANCE_YOUR_CALM", nil, func(h *h2conn) {
			s := make([]http2.Setting, 101)
			for i := range s {
				s[i] = http2.Setting{ID: http2.SettingHeaderTableSize, Val: 4096}
			}
			h.fr.WriteSettings(s...)
		}, goAway(http2.ErrCodeEnhanceYourCalm)},
		{"8.1 a non-gRPC request gets an HTTP answer with a body", nil, func(h *h2conn) {
			h.headers(1, h.rawBlock(get...), true)
		}, want{data: true, stream: 1, rst: 0xff, goaway: 0xff}},
		{"8.1.1 DATA short of content-length is a stream error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.headers(1, h.rawBlock(sized("10")...), false)
			h.fr.WriteData(1, true, grpcMessage(nil))
		}, rstOn(1, http2.ErrCodeProtocol)},
		{"8.1.1 DATA beyond content-length is a stream error PROTOCOL_ERROR", nil, func(h *h2conn) {
			h.headers(1, h.rawBlock(sized("1")...), false)
			h.fr.WriteData(1, true, grpcMessage(nil))
		}, rstOn(1, http2.ErrCodeProtocol)},
	}
	malformed := []struct {
		name   string
		fields []string
	}{
		{"8.2.1 uppercase field name", grpcReq("X-Probe", "1")},
		{"8.3 pseudo-header after a regular field", append(grpcReq(), ":authority", "vig2")},
		{"8.3.1 unknown pseudo-header", grpcReq()[:0:0]},
		{"8.3.1 response pseudo-header :status", []string{":method", "POST", ":scheme", "http", ":path", mc, ":status", "200", "content-type", "application/grpc"}},
		{"8.3.1 no :method", []string{":scheme", "http", ":path", mc, "content-type", "application/grpc"}},
		{"8.3.1 no :scheme", []string{":method", "POST", ":path", mc, "content-type", "application/grpc"}},
		{"8.3.1 no :path", []string{":method", "POST", ":scheme", "http", "content-type", "application/grpc"}},
		{"8.3.1 empty :path", []string{":method", "POST", ":scheme", "http", ":path", "", "content-type", "application/grpc"}},
		{"8.3.1 :path twice", []string{":method", "POST", ":scheme", "http", ":path", mc, ":path", mc, "content-type", "application/grpc"}},
		{"8.3.1 :method twice", []string{":method", "POST", ":method", "POST", ":scheme", "http", ":path", mc, "content-type", "application/grpc"}},
		{"8.2.2 connection-specific field", grpcReq("connection", "keep-alive")},
		{"8.2.2 te other than trailers", grpcReq("te", "trailers, deflate")},
		{"8.2.1 a value with a newline", grpcReq("x-meta", "a\nb")},
	}
	malformed[2].fields = append([]string{":method", "POST", ":scheme", "http", ":path", mc, ":foo", "bar"}, "content-type", "application/grpc")
	for _, m := range malformed {
		cases = append(cases, struct {
			name     string
			settings []http2.Setting
			run      func(h *h2conn)
			want     want
		}{"malformed: " + m.name, nil, func(h *h2conn) {
			h.headers(1, h.rawBlock(m.fields...), false)
			h.fr.WriteData(1, true, grpcMessage(nil))
		}, rstOn(1, http2.ErrCodeProtocol)})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := dialH2(t, e.tcp, tc.settings...)
			tc.run(h)
			h.flush()
			h.expect(t, tc.want)
		})
	}
	if n := len(p.recorded(mc)); n != 0 {
		t.Errorf("%d malformed or refused requests reached the backend", n)
	}
	checkBackground(t, stop)
	drained(t, e.gw)
}

// §3.4: an invalid preface is a connection error; vig says so (GOAWAY
// PROTOCOL_ERROR) and closes, rather than resetting the connection under
// the peer's unread bytes.
func TestH2InvalidPrefaceGoAway(t *testing.T) {
	e, _ := withProbe(t, "")
	h := dialRaw(t, e.tcp)
	h.c.Write([]byte("PRI * HTTP/2.0\r\n\r\nXM\r\n\r\n"))
	h.c.Write(make([]byte, 1024))
	g := h.expectClosed(t)
	if g == nil || g.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("invalid preface: GOAWAY %v, want PROTOCOL_ERROR before the close", g)
	}
}

// §6.9.2 with §6.5.3: the SETTINGS ACK precedes the DATA a larger initial
// window lets out, so that a peer waiting for its ACK does not take the DATA
// for an answer to something else.
func TestH2SettingsAckBeforeUnblockedData(t *testing.T) {
	e, _ := withProbe(t, "")
	h := dialH2(t, e.tcp, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	h.headers(1, h.rawBlock(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "vig"), true)
	h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
	h.flush()
	acks := 0
	h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				acks++
			}
		case *http2.DataFrame:
			if acks < 2 {
				t.Fatalf("DATA (%d bytes) before the ACK of the SETTINGS that let it out", len(f.Data()))
			}
			if len(f.Data()) != 1 {
				t.Fatalf("DATA of %d bytes with a window of 1", len(f.Data()))
			}
			return
		}
	}
}

var _ = binary.BigEndian

// Rapid reset of relayed RPCs (CVE-2023-44487 on the methods vig passes
// through): 500 × HEADERS + RST_STREAM of ModelConfig. vig opens a relayed
// RPC's backend stream with its first message, so none of them reaches the
// backend; it used to open one per HEADERS, amplifying the reset onto it.
func TestH2RapidResetRelayed(t *testing.T) {
	e, p := withProbe(t, "")
	h := dialH2(t, e.tcp)
	go io.Copy(io.Discard, h.c) // vig's answers
	mc := "/" + gateway.Service + "/ModelConfig"
	blk := h.block(mc)
	for i := range 500 {
		id := uint32(2*i + 1)
		h.headers(id, blk, false)
		h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	h.flush()
	drained(t, e.gw)
	if err := serves(t, e.tcp, "detector"); err != nil {
		t.Fatal(err)
	}
	if n := len(p.recorded(mc)); n != 0 {
		t.Errorf("%d of 500 reset relayed RPCs reached the backend", n)
	}
}
