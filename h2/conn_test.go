package h2

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
)

// sinkSocket takes every byte written (a peer that reads at once).
type sinkSocket struct {
	mu  sync.Mutex
	out bytes.Buffer
}

func (s *sinkSocket) Writev(bufs [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range bufs {
		s.out.Write(b)
		n += len(b)
	}
	return n, nil
}
func (s *sinkSocket) WriteAll(bufs [][]byte) error { _, err := s.Writev(bufs); return err }

type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }

// recStreams records what FrameLoop hands a role's stream table. Streams
// 1 and 3 are open; 5 and above are idle.
type recStreams struct {
	r     *Reader
	calls []string
	send  map[uint32]*SendState
}

func (s *recStreams) Idle(id uint32) bool { return id >= 5 }
func (s *recStreams) Headers(h FrameHeader) error {
	s.calls = append(s.calls, fmt.Sprintf("headers %d", h.Stream))
	return s.r.Discard(int(h.Length))
}
func (s *recStreams) Data(h FrameHeader, n int) error {
	s.calls = append(s.calls, fmt.Sprintf("data %d %d", h.Stream, n))
	return s.r.Discard(n)
}
func (s *recStreams) Reset(id uint32, code http2.ErrCode) error {
	s.calls = append(s.calls, fmt.Sprintf("reset %d %v", id, code))
	return nil
}
func (s *recStreams) SendState(id uint32) *SendState { return s.send[id] }
func (s *recStreams) StreamError(id uint32, code http2.ErrCode, why string) {
	s.calls = append(s.calls, fmt.Sprintf("stream error %d %v", id, code))
}
func (s *recStreams) GoAway(last uint32, code http2.ErrCode, debug []byte) error {
	s.calls = append(s.calls, fmt.Sprintf("goaway %d %v %s", last, code, debug))
	return nil
}
func (s *recStreams) Settings() { s.calls = append(s.calls, "settings") }
func (s *recStreams) PingAck(data [8]byte) {
	s.calls = append(s.calls, fmt.Sprintf("ping ack %s", data[:]))
}

// FrameLoop decides the connection's part of every frame (RFC 9113 §6) for both
// roles and hands the stream table only what concerns a stream, checked.
func TestFrameLoop(t *testing.T) {
	raw := func(typ http2.FrameType, flags http2.Flags, stream uint32, p ...byte) func(*http2.Framer) {
		return func(fr *http2.Framer) { fr.WriteRawFrame(typ, flags, stream, p) }
	}
	for _, tc := range []struct {
		name    string
		frames  []func(*http2.Framer)
		calls   []string
		errCode http2.ErrCode // 0: the loop ends at EOF
		errSub  string
	}{
		{"headers and data go to the table", []func(*http2.Framer){
			func(fr *http2.Framer) {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}, EndHeaders: true})
			},
			func(fr *http2.Framer) { fr.WriteData(1, false, []byte("x")) },
			func(fr *http2.Framer) { fr.WriteDataPadded(3, false, []byte("yz"), make([]byte, 7)) }},
			[]string{"headers 1", "data 1 1", "data 3 2"}, 0, ""},
		{"6.1 DATA on stream 0", []func(*http2.Framer){raw(http2.FrameData, 0, 0, 'x')}, nil, http2.ErrCodeProtocol, "DATA on stream 0 from the peer"},
		{"5.1 DATA on an idle stream", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WriteData(5, false, []byte("x")) }}, nil, http2.ErrCodeProtocol, "idle stream 5"},
		{"RST_STREAM checked, then handed over", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WriteRSTStream(3, http2.ErrCodeCancel) }},
			[]string{"reset 3 CANCEL"}, 0, ""},
		{"6.4 RST_STREAM on stream 0", []func(*http2.Framer){raw(http2.FrameRSTStream, 0, 0, 0, 0, 0, 8)}, nil, http2.ErrCodeProtocol, "stream 0"},
		{"6.4 RST_STREAM of 3 octets", []func(*http2.Framer){raw(http2.FrameRSTStream, 0, 1, 0, 0, 8)}, nil, http2.ErrCodeFrameSize, "wrong size"},
		{"5.1 RST_STREAM on an idle stream", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WriteRSTStream(7, http2.ErrCodeCancel) }}, nil, http2.ErrCodeProtocol, "idle stream 7"},
		{"5.1 WINDOW_UPDATE on an idle stream", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WriteWindowUpdate(9, 1) }}, nil, http2.ErrCodeProtocol, "idle stream 9"},
		{"6.9 stream WINDOW_UPDATE of 0 is a stream error", []func(*http2.Framer){raw(http2.FrameWindowUpdate, 0, 1, 0, 0, 0, 0)},
			[]string{"stream error 1 PROTOCOL_ERROR"}, 0, ""},
		{"6.9 connection WINDOW_UPDATE of 0", []func(*http2.Framer){raw(http2.FrameWindowUpdate, 0, 0, 0, 0, 0, 0)}, nil, http2.ErrCodeProtocol, "increment 0"},
		{"6.9.1 stream window above 2^31-1 is a stream error", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WriteWindowUpdate(1, 1<<31-1) }},
			[]string{"stream error 1 FLOW_CONTROL_ERROR"}, 0, ""},
		{"WINDOW_UPDATE on a closed stream is ignored", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WriteWindowUpdate(3, 1) }}, nil, 0, ""},
		{"6.3 PRIORITY on stream 0", []func(*http2.Framer){raw(http2.FramePriority, 0, 0, 0, 0, 0, 1, 16)}, nil, http2.ErrCodeProtocol, "PRIORITY on stream 0"},
		{"6.3 PRIORITY of 4 octets is a stream error", []func(*http2.Framer){raw(http2.FramePriority, 0, 1, 0, 0, 0, 3)},
			[]string{"stream error 1 FRAME_SIZE_ERROR"}, 0, ""},
		{"5.3.1 a stream depending on itself", []func(*http2.Framer){raw(http2.FramePriority, 0, 3, 0, 0, 0, 3, 16)},
			[]string{"stream error 3 PROTOCOL_ERROR"}, 0, ""},
		{"6.8 GOAWAY on a stream", []func(*http2.Framer){raw(http2.FrameGoAway, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)}, nil, http2.ErrCodeProtocol, "GOAWAY on stream 1"},
		{"6.8 GOAWAY too short", []func(*http2.Framer){raw(http2.FrameGoAway, 0, 0, 0, 0, 0, 1)}, nil, http2.ErrCodeFrameSize, "too short"},
		{"GOAWAY handed over", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WriteGoAway(3, http2.ErrCodeEnhanceYourCalm, []byte("bye")) }},
			[]string{"goaway 3 ENHANCE_YOUR_CALM bye"}, 0, ""},
		{"SETTINGS told, its ACK not", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WriteSettings() },
			func(fr *http2.Framer) { fr.WriteSettingsAck() }},
			[]string{"settings"}, 0, ""},
		{"PING ACK told", []func(*http2.Framer){
			func(fr *http2.Framer) { fr.WritePing(true, [8]byte{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}) }},
			[]string{"ping ack abcdefgh"}, 0, ""},
		{"8.4 PUSH_PROMISE names the peer", []func(*http2.Framer){raw(http2.FramePushPromise, http2.FlagPushPromiseEndHeaders, 1, 0, 0, 0, 2)},
			nil, http2.ErrCodeProtocol, "from the peer"},
		{"5.5 unknown frame ignored", []func(*http2.Framer){raw(0xfa, 0, 1, 1, 2, 3)}, nil, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in bytes.Buffer
			fr := http2.NewFramer(&in, nil)
			for _, f := range tc.frames {
				f(fr)
			}
			sock := &sinkSocket{}
			w := NewWriter(nopConn{}, sock)
			r := NewReader(&in, 4096)
			s := &recStreams{r: r, send: map[uint32]*SendState{1: {id: 1, win: InitialWindow}}}
			err := FrameLoop(r, w, "the peer", 1<<20, s)
			var ce ConnError
			switch {
			case tc.errCode == 0 && !errors.Is(err, io.EOF):
				t.Fatalf("loop ended with %v, want EOF", err)
			case tc.errCode != 0 && (!errors.As(err, &ce) || ce.Code != tc.errCode || !strings.Contains(ce.Msg, tc.errSub)):
				t.Fatalf("loop ended with %v, want a connection error %v with %q", err, tc.errCode, tc.errSub)
			}
			if fmt.Sprint(s.calls) != fmt.Sprint(tc.calls) {
				t.Errorf("table got %q, want %q", s.calls, tc.calls)
			}
		})
	}
}

func TestStreamStateNames(t *testing.T) {
	for st, want := range map[StreamState]string{StateIdle: "idle", StateOpen: "open", StateHalfClosedLocal: "half-closed (local)",
		StateHalfClosedRemote: "half-closed (remote)", StateClosed: "closed", StateClosed + 1: "invalid"} {
		if st.String() != want {
			t.Errorf("%d: %q, want %q", st, st.String(), want)
		}
	}
}

// A stream's window is given back in one WINDOW_UPDATE once a quarter of it is
// owed, and an overrun is seen.
func TestRecvWindow(t *testing.T) {
	w := NewRecvWindow(1000)
	if !w.Take(200) || !w.Fits(800) || w.Fits(801) {
		t.Fatal("window accounting")
	}
	w.Owe(200)
	if inc := w.Due(); inc != 0 {
		t.Fatalf("due %d with 200 of 1000 owed, want 0 (below 1/%d)", inc, StreamCreditDivisor)
	}
	w.Take(100)
	w.Owe(100)
	if inc := w.Due(); inc != 300 {
		t.Fatalf("due %d, want 300", inc)
	}
	if w.Due() != 0 || !w.Take(1000) || w.Take(1) {
		t.Fatal("after the update the peer may send the whole window again, and not a byte more")
	}
}

// The connection's window: DATA beyond it is a connection error
// FLOW_CONTROL_ERROR (§6.9.1), and what arrived is given back once half of the
// window is owed, dropped frames included.
func TestFrameLoopConnWindow(t *testing.T) {
	run := func(window uint32, sizes ...int) (*sinkSocket, error) {
		var in bytes.Buffer
		fr := http2.NewFramer(&in, nil)
		for _, n := range sizes {
			fr.WriteData(1, false, make([]byte, n))
		}
		sock := &sinkSocket{}
		r := NewReader(&in, 4096)
		return sock, FrameLoop(r, NewWriter(nopConn{}, sock), "the peer", window, &recStreams{r: r})
	}
	_, err := run(100, 40, 61) // 40 is below half the window: not yet given back
	var ce ConnError
	if !errors.As(err, &ce) || ce.Code != http2.ErrCodeFlowControl {
		t.Fatalf("101 bytes in a window of 100: %v, want FLOW_CONTROL_ERROR", err)
	}
	sock, err := run(100, 30, 30, 30, 30)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("120 bytes in a window of 100, credited at half: %v", err)
	}
	f, ferr := http2.NewFramer(nil, &sock.out).ReadFrame()
	if wu, ok := f.(*http2.WindowUpdateFrame); ferr != nil || !ok || wu.StreamID != 0 || wu.Increment != 60 {
		t.Fatalf("first frame written %v (%v), want a connection WINDOW_UPDATE of 60", f, ferr)
	}
}
