package h2

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/mem"
)

// stuckSocket takes nothing: Writev writes no byte, WriteAll waits until the
// connection is closed (a peer that never reads).
type stuckSocket struct {
	once   sync.Once
	closed chan struct{}
}

func (s *stuckSocket) Writev([][]byte) (int, error) { return 0, nil }
func (s *stuckSocket) WriteAll([][]byte) error      { <-s.closed; return net.ErrClosed }

type closeConn struct {
	net.Conn
	s *stuckSocket
}

func (c closeConn) Close() error { c.s.once.Do(func() { close(c.s.closed) }); return nil }

// A peer that floods PINGs (or SETTINGS) and never reads: the answers wait in
// the writer's queue, and past MaxQueuedControl of them vig refuses the
// connection (ENHANCE_YOUR_CALM), as x/net's server does. The queue used to
// grow without bound.
func TestWriterControlQueueBounded(t *testing.T) {
	for _, typ := range []http2.FrameType{http2.FramePing, http2.FrameSettings} {
		t.Run(typ.String(), func(t *testing.T) {
			sock := &stuckSocket{closed: make(chan struct{})}
			w := NewWriter(closeConn{s: sock}, sock)
			var in bytes.Buffer
			fr := http2.NewFramer(&in, nil)
			const n = 2 * MaxQueuedControl
			for i := range n {
				if typ == http2.FramePing {
					fr.WritePing(false, [8]byte{byte(i)})
				} else {
					fr.WriteSettings()
				}
			}
			r := NewReader(&in, 4096)
			var err error
			answered := 0
			for ; answered < n; answered++ {
				h, herr := r.ReadHeader()
				if herr != nil {
					t.Fatal(herr)
				}
				if typ == http2.FramePing {
					err = PingFrame(r, w, h)
				} else {
					err = SettingsFrame(r, w, h)
				}
				if err != nil {
					break
				}
			}
			var ce ConnError
			if !errors.As(err, &ce) || ce.Code != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("%d %vs to a peer that does not read: %d answered, error %v; want ENHANCE_YOUR_CALM past %d", n, typ, answered, err, MaxQueuedControl)
			}
			if answered > MaxQueuedControl+1 {
				t.Errorf("%d answers queued before the cut, want at most %d", answered, MaxQueuedControl+1)
			}
			w.Lock()
			w.Fail(ErrConnClosed)
			w.Unlock()
		})
	}
}

// fullSocket takes half of what Writev offers (a socket whose buffer fills) and
// the rest through WriteAll, the flusher's write, into out.
type fullSocket struct {
	mu  sync.Mutex
	out bytes.Buffer
}

func (s *fullSocket) Writev(bufs [][]byte) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	n := len(bufs[0]) / 2
	s.mu.Lock()
	s.out.Write(bufs[0][:n])
	s.mu.Unlock()
	return n, nil
}

func (s *fullSocket) WriteAll(bufs [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range bufs {
		s.out.Write(b)
	}
	return nil
}

// A large message that fills the socket goes out through the flusher; the
// batches it was cut into are reused by the next message, so what a message
// costs in allocations does not grow with its frames (a 6.2 MB message is 379
// frames), and the bytes on the wire are the message.
func TestWriterLargeMessageReusesBatch(t *testing.T) {
	const size = 6_200_000
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7)
	}
	sock := &fullSocket{}
	w := NewWriter(nil, sock)
	w.connWin = 1 << 30
	var msg mem.BufferSlice
	for off := 0; off < size; off += maxChunk {
		msg = append(msg, mem.SliceBuffer(body[off:min(off+maxChunk, size)]))
	}
	send := func(id uint32) {
		var s SendState
		w.Lock()
		s.Init(id, 1<<30)
		w.QueueMsg(&s, false, msg)
		w.Finish(&s, nil)
		w.Flush()
		w.Unlock()
		for { // until the flusher has written the rest
			w.Lock()
			done := !w.flushing
			w.Unlock()
			if done {
				break
			}
			runtime.Gosched()
		}
	}
	send(1)
	id := uint32(1)
	allocs := testing.AllocsPerRun(10, func() { id += 2; send(id) })
	t.Logf("%.1f allocations per message", allocs)
	if allocs > 6 {
		t.Errorf("%.0f allocations per 6.2 MB message through a full socket, want at most 6 (the batch is reused; 3 here: the flusher goroutine and its bookkeeping)", allocs)
	}
	fr := http2.NewFramer(nil, &sock.out)
	for range 12 {
		var got []byte
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			d := f.(*http2.DataFrame)
			got = append(got, d.Data()...)
			if d.StreamEnded() {
				break
			}
		}
		if len(got) != 5+size || !bytes.Equal(got[5:], body) {
			t.Fatalf("a message of %d bytes on the wire, want %d and equal", len(got), 5+size)
		}
	}
}

// Held counts the payload the writer owns and has not written, whatever way it
// leaves: written now, written by the flusher (a socket that takes half a
// write), dropped by a reset (part of it already in a batch), or waiting for a
// window that opens later. It is back at 0 once all of it has gone.
func TestWriterHeld(t *testing.T) {
	w := NewWriter(nil, &fullSocket{})
	w.connWin = 1 << 30
	msg := func(n int) mem.BufferSlice {
		return mem.BufferSlice{mem.SliceBuffer(make([]byte, n/2)), mem.SliceBuffer(make([]byte, n-n/2))}
	}
	idle := func() {
		for { // until the flusher has written what it took
			w.Lock()
			done := !w.flushing
			w.Unlock()
			if done {
				return
			}
			runtime.Gosched()
		}
	}
	var open, starved, reset, closed SendState
	w.Lock()
	open.Init(1, 1<<30)
	starved.Init(3, 0)     // no window: everything waits
	reset.Init(5, 100_000) // part goes out, the rest waits, then RST_STREAM
	closed.Init(7, 1<<30)
	closed.Closed = true
	w.QueueMsg(&open, false, msg(300_000))
	w.QueueMsg(&starved, false, msg(200_000))
	w.QueueMsg(&reset, false, msg(250_000))
	w.QueueMsg(&closed, false, msg(50_000)) // freed at once, never held
	w.Finish(&open, nil)
	w.Finish(&starved, nil)
	// The 5-byte prefixes travel in the frame buffer, not as payload.
	if got, want := w.Held(), int64(300_000+200_000+250_000); got != want {
		t.Errorf("held %d after queueing, want %d (the closed stream's message is freed, not held)", got, want)
	}
	w.Flush()
	w.Unlock()
	idle()
	w.Lock()
	w.Reset(&reset, http2.ErrCodeCancel)
	w.Flush()
	w.Unlock()
	idle()
	w.Lock()
	if got, want := w.Held(), int64(200_000); got != want {
		t.Errorf("held %d with one stream starved, want its %d bytes", got, want)
	}
	if err := w.WindowUpdate(&starved, 1<<20); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	w.Unlock()
	idle()
	if got := w.Held(); got != 0 {
		t.Errorf("held %d once everything was written or dropped, want 0", got)
	}
}

// wholeSocket is a socket that takes every write whole.
type wholeSocket struct{ out bytes.Buffer }

func (s *wholeSocket) Writev(bufs [][]byte) (int, error) {
	n := 0
	for _, b := range bufs {
		n += len(b)
		s.out.Write(b)
	}
	return n, nil
}

func (s *wholeSocket) WriteAll(bufs [][]byte) error { _, err := s.Writev(bufs); return err }

// dataFrames reads the DATA frames of one stream off out: their payload
// lengths, the bytes they carry, and whether the stream ended.
func dataFrames(t *testing.T, out *bytes.Buffer) (lens []int, got []byte, ended bool) {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(out.Bytes()))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return lens, got, ended
		}
		d, ok := f.(*http2.DataFrame)
		if !ok {
			t.Fatalf("a %v frame, want only DATA", f.Header().Type)
		}
		if d.StreamEnded() {
			ended = true
		}
		if len(d.Data()) > 0 {
			lens = append(lens, len(d.Data()))
			got = append(got, d.Data()...)
		}
	}
}

// A message that arrives in pieces of any size (cut-through: one piece per
// read of the sender's socket) leaves in full frames: a frame spans the
// buffers, and while more of the message is to come a tail too short for a
// frame waits for it. The last piece sends everything, without waiting for
// the stream's end; the bytes are the message's. A message queued whole in
// many small buffers goes as one frame.
func TestWriterFramesSpanBuffers(t *testing.T) {
	const size = 100_000
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 13)
	}
	pieces := []int{700, 300, 5000, 17, 20000, 1, 16384, 9000, 31000} // then the rest
	sock := &wholeSocket{}
	w := NewWriter(nil, sock)
	w.connWin = 1 << 30
	var s SendState
	w.Lock()
	s.Init(1, 1<<30)
	off := pieces[0]
	w.QueueMsgStart(&s, false, size, mem.BufferSlice{mem.SliceBuffer(body[:off])})
	w.Flush()
	for _, n := range append(pieces[1:], size) {
		end := min(off+n, size)
		w.QueueData(&s, mem.BufferSlice{mem.SliceBuffer(body[off:end])})
		w.Flush()
		if lens, _, _ := dataFrames(t, &sock.out); end < size {
			if want := (5 + end) / DefaultMaxFrame; len(lens) != want {
				t.Fatalf("after %d of %d bytes queued: %d frames %v on the wire, want the %d full ones", end, size, len(lens), lens, want)
			}
		}
		off = end
		if off == size {
			break
		}
	}
	w.Unlock()
	lens, got, ended := dataFrames(t, &sock.out)
	if ended {
		t.Fatal("the stream ended; Finish was not called")
	}
	if !bytes.Equal(got[5:], body) || len(got) != 5+size {
		t.Fatalf("%d bytes on the wire, want the %d of the message", len(got), 5+size)
	}
	for i, n := range lens {
		if i < len(lens)-1 && n != DefaultMaxFrame {
			t.Fatalf("frame lengths %v: all but the last should be %d", lens, DefaultMaxFrame)
		}
	}

	sock.out.Reset()
	var small mem.BufferSlice
	for i := 0; i < 10_000; i += 100 {
		small = append(small, mem.SliceBuffer(body[i:i+100]))
	}
	w.Lock()
	s.Init(3, 1<<30)
	w.QueueMsg(&s, false, small)
	w.Finish(&s, nil)
	w.Flush()
	w.Unlock()
	lens, got, ended = dataFrames(t, &sock.out)
	if len(lens) != 1 || lens[0] != 5+10_000 || !ended || !bytes.Equal(got[5:], body[:10_000]) {
		t.Fatalf("a 10 KB message in 100 buffers: frames %v (ended %v), want one of %d and the stream ended", lens, ended, 5+10_000)
	}
}

// Flow control still cuts frames: with a stream window smaller than a frame the
// writer sends what the window allows, even while the message is incomplete
// (holding it would stall a peer that waits for those bytes to grant more),
// and the rest once the peer opens the window.
func TestWriterFramesAtTheWindow(t *testing.T) {
	body := make([]byte, 30_000)
	for i := range body {
		body[i] = byte(i)
	}
	sock := &wholeSocket{}
	w := NewWriter(nil, sock)
	w.connWin = 1 << 30
	var s SendState
	w.Lock()
	defer w.Unlock()
	s.Init(1, 6_000)
	w.QueueMsgStart(&s, false, len(body), mem.BufferSlice{mem.SliceBuffer(body[:8_000])})
	w.Flush()
	if lens, _, _ := dataFrames(t, &sock.out); len(lens) != 1 || lens[0] != 6_000 {
		t.Fatalf("window 6000, 8005 bytes queued of 30005: frames %v, want one of 6000", lens)
	}
	if err := w.WindowUpdate(&s, 100_000); err != nil {
		t.Fatal(err)
	}
	w.QueueData(&s, mem.BufferSlice{mem.SliceBuffer(body[8_000:])})
	w.Finish(&s, nil)
	w.Flush()
	lens, got, ended := dataFrames(t, &sock.out)
	if !ended || !bytes.Equal(got[5:], body) {
		t.Fatalf("frames %v, ended %v: want the whole message and the stream ended", lens, ended)
	}
}

// Holding a short tail back costs no allocation: the buffers held move to
// the front of the stream's inline storage, where the next piece is appended
// (pump advances past what it sends, and appending there would grow a fresh
// array at every piece of a cut-through message). The pieces are as vig's
// cut-through hands them on: larger than a frame, ending anywhere in one.
func TestWriterHoldAllocatesNothing(t *testing.T) {
	const piece, pieces = 20_003, 16
	body := make([]byte, piece*pieces)
	var in [pieces]mem.BufferSlice
	for i := range in {
		in[i] = mem.BufferSlice{mem.SliceBuffer(body[i*piece : (i+1)*piece])}
	}
	head := mem.BufferSlice{mem.SliceBuffer(body[:0])}
	sock := &wholeSocket{}
	w := NewWriter(nil, sock)
	w.connWin = 1 << 40
	var s SendState
	id := uint32(1)
	send := func() {
		sock.out.Reset()
		w.Lock()
		s.Init(id, 1<<30)
		id += 2
		w.QueueMsgStart(&s, false, len(body), head)
		for _, p := range in {
			w.QueueData(&s, p)
			w.Flush()
		}
		w.Finish(&s, nil)
		w.Flush()
		w.Unlock()
	}
	send()
	if allocs := testing.AllocsPerRun(20, send); allocs > 0 {
		t.Errorf("%.1f allocations per message of %d pieces, want 0", allocs, pieces)
	}
	if _, got, ended := dataFrames(t, &sock.out); !ended || !bytes.Equal(got[5:], body) {
		t.Fatalf("%d bytes on the wire (ended %v), want the %d of the message", len(got), ended, 5+len(body))
	}
}
