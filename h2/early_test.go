package h2

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/mem"
)

// earlyHandler is echoHandler whose streams take large messages as they
// arrive (Early): once want bytes are in, a sink records what it is handed.
type earlyHandler struct {
	*echoHandler
	want    int  // bytes to have arrived before the sink takes the message
	decline bool // never take one
	freeNow bool // the sinks free each piece at once
	sink    *recordSink
	sinks   []*recordSink
	asked   int
}

type earlyStream struct {
	echoStream
	eh *earlyHandler
}

func (h *earlyHandler) NewStream() (*ServerStream, StreamHandler) {
	s := &earlyStream{echoStream: echoStream{h: h.echoHandler}, eh: h}
	return &s.ServerStream, s
}

func (s *earlyStream) Early(got mem.BufferSlice, total int, compressed bool) (Sink, bool) {
	h := s.eh
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked++
	if h.decline {
		return nil, false
	}
	if got.Len() < h.want {
		return nil, true
	}
	h.sink = &recordSink{total: total, freeNow: h.freeNow}
	h.sinks = append(h.sinks, h.sink)
	return h.sink, false
}

type recordSink struct {
	mu      sync.Mutex
	total   int
	pieces  []mem.BufferSlice
	n       int
	last    int // Data calls with last
	dropped bool
	late    bool // Data after the end or a Drop
	freeNow bool // free each piece as it comes (its bytes kept in copied)
	copied  []byte
}

func (r *recordSink) Data(b mem.BufferSlice, last bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dropped || r.last > 0 {
		r.late = true
	}
	r.n += b.Len()
	if r.freeNow { // as a writer that took the bytes at once does
		r.copied = append(r.copied, b.Materialize()...)
		b.Free()
	} else {
		r.pieces = append(r.pieces, append(mem.BufferSlice(nil), b...)) // (b's slice is valid during the call only)
	}
	if last {
		r.last++
	}
}

func (r *recordSink) Drop() {
	r.mu.Lock()
	if r.dropped || r.last > 0 {
		r.late = true
	}
	r.dropped = true
	r.mu.Unlock()
}

func (r *recordSink) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *recordSink) free() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []byte
	for _, p := range r.pieces {
		all = append(all, p.Materialize()...)
		p.Free()
	}
	r.pieces = nil
	return all
}

func (h *earlyHandler) theSink(t *testing.T) *recordSink {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		h.mu.Lock()
		s := h.sink
		h.mu.Unlock()
		if s != nil {
			return s
		}
	}
	t.Fatal("no sink took the message")
	return nil
}

// patterned is a gRPC message of n bytes that differ from their neighbours.
func patterned(n int) []byte {
	b := make([]byte, 5+n)
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	for i := range n {
		b[5+i] = byte(i*7 + i>>8)
	}
	return b
}

// A large message is handed to its sink as it arrives: bytes before the last
// frame is even sent, all of them in order, the end once, nothing through
// Message; the budget holds them until freed.
func TestServerConnEarly(t *testing.T) {
	h := &earlyHandler{echoHandler: newEchoHandler(), want: 20 << 10}
	h.hold = true
	cfg := testConfig
	cfg.EarlyMin = 64 << 10
	c := newTestClientWith(t, cfg, h.echoHandler, h)
	msg := patterned(600 << 10)
	c.headers(1, false, grpcRequest...)
	body, lastFrame := msg[:len(msg)-1000], msg[len(msg)-1000:]
	for len(body) > 0 {
		n := min(len(body), DefaultMaxFrame)
		c.fr.WriteData(1, false, body[:n])
		body = body[n:]
	}
	sink := h.theSink(t)
	for deadline := time.Now().Add(10 * time.Second); sink.received() < len(msg)-5-1000; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sink has %d bytes before the last frame, want %d", sink.received(), len(msg)-5-1000)
		}
	}
	if sink.last != 0 {
		t.Fatal("the message ended before its last frame")
	}
	c.fr.WriteData(1, true, lastFrame)
	c.fr.WritePing(false, [8]byte{'e'})
	c.expect("PING ack=true")
	if sink.total != len(msg)-5 || sink.last != 1 || sink.dropped {
		t.Fatalf("sink: total %d last %d dropped %v", sink.total, sink.last, sink.dropped)
	}
	if h.has("message 1 614400") {
		t.Error("the message was also delivered whole")
	}
	if !h.has("half-closed 1") {
		t.Error("no half-close after the message")
	}
	if d := c.sc.budget.Delivered(); d < len(msg)-5 {
		t.Errorf("the budget counts %d bytes delivered while the sink holds %d", d, len(msg)-5)
	}
	if got := sink.free(); !bytes.Equal(got, msg[5:]) {
		t.Fatalf("the sink got %d bytes, not the message's %d", len(got), len(msg)-5)
	}
	if d := c.sc.budget.Delivered(); d != 0 {
		t.Errorf("after the sink freed its bytes the budget counts %d delivered, want 0", d)
	}
	if c.sc.budget.left != c.sc.budget.limit {
		t.Errorf("budget left %d of %d after the message", c.sc.budget.left, c.sc.budget.limit)
	}
	// The next message on another stream is offered afresh and declined.
	h.mu.Lock()
	h.decline, h.sink, h.keep = true, nil, true
	h.mu.Unlock()
	c.headers(3, false, grpcRequest...)
	c.data(3, grpcZeros(100<<10))
	c.fr.WritePing(false, [8]byte{'f'})
	c.expect("PING ack=true")
	if !h.has("message 3 102400") {
		t.Error("a declined message was not delivered whole")
	}
}

// A message its sink took and whose stream is reset before it is complete:
// the sink is told (Drop), and once it frees what it was handed the budget
// holds nothing.
func TestServerConnEarlyDrop(t *testing.T) {
	h := &earlyHandler{echoHandler: newEchoHandler(), want: 1}
	cfg := testConfig
	cfg.EarlyMin = 64 << 10
	c := newTestClientWith(t, cfg, h.echoHandler, h)
	msg := patterned(300 << 10)
	c.headers(1, false, grpcRequest...)
	for _, off := range []int{0, DefaultMaxFrame, 2 * DefaultMaxFrame} {
		c.fr.WriteData(1, false, msg[off:off+DefaultMaxFrame])
	}
	sink := h.theSink(t)
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	c.fr.WritePing(false, [8]byte{'d'})
	c.expect("PING ack=true")
	if !sink.dropped || sink.last != 0 {
		t.Fatalf("after the reset: dropped %v, last %d", sink.dropped, sink.last)
	}
	if got := sink.free(); !bytes.Equal(got, msg[5:3*DefaultMaxFrame]) {
		t.Errorf("the sink got %d bytes, want the %d sent", len(got), 3*DefaultMaxFrame-5)
	}
	if d, l := c.sc.budget.Delivered(), c.sc.budget.left; d != 0 || l != c.sc.budget.limit {
		t.Errorf("budget after the drop: %d delivered, %d of %d left", d, l, c.sc.budget.limit)
	}
	if !h.has("cancelled 1 Canceled") {
		t.Error("the stream's handler was not told it was cancelled")
	}
}

// checkSinks: each sink's message ended once with all its bytes, or was
// dropped, and was told nothing after either.
func (h *earlyHandler) checkSinks(t *testing.T) {
	t.Helper()
	for i, r := range h.sinks {
		switch {
		case r.late:
			t.Fatalf("sink %d was handed bytes or a drop after its end", i)
		case r.last > 1 || (r.last == 1 && r.dropped):
			t.Fatalf("sink %d: ended %d times, dropped %v", i, r.last, r.dropped)
		case r.last == 1 && r.n != r.total:
			t.Fatalf("sink %d ended with %d of its %d bytes", i, r.n, r.total)
		}
		r.free()
	}
}

// A message whose frames end exactly on its chunks' boundaries, taken by a
// sink that frees each piece at once (its chunk goes back to the pool), while
// another stream's messages draw from the pool in between: the next frame
// goes into a new chunk, not into the freed one (found in review: the
// assembler read the freed chunk's length, which the pool had changed).
func TestServerConnEarlyChunkBoundaries(t *testing.T) {
	h := &earlyHandler{echoHandler: newEchoHandler(), want: 1, freeNow: true}
	h.hold, h.keep = true, true
	cfg := testConfig
	cfg.EarlyMin = 64 << 10
	c := newTestClientWith(t, cfg, h.echoHandler, h)
	msg := patterned(200 << 10)
	c.headers(1, false, grpcRequest...)
	c.fr.WriteData(1, false, msg[:5]) // the prefix alone: the body's frames then align with the chunks
	body := msg[5:]
	for off, i := 0, 0; off < len(body); i++ {
		n := min(DefaultMaxFrame, len(body)-off)
		c.fr.WriteData(1, off+n == len(body), body[off:off+n])
		off += n
		if off == firstChunk || off == firstChunk+secondChunk {
			// Another stream's message takes buffers of both tiers from the
			// pool, its second one shorter than the chunk just freed.
			id := uint32(3 + 2*i)
			c.headers(id, false, grpcRequest...)
			c.data(id, grpcZeros(firstChunk+20000))
		}
	}
	c.fr.WritePing(false, [8]byte{'b'})
	c.expect("PING ack=true")
	sink := h.theSink(t)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.last != 1 || !bytes.Equal(sink.copied, body) {
		t.Fatalf("the sink got %d of %d bytes (ended %d), not the message", len(sink.copied), len(body), sink.last)
	}
}

// takeAll takes every message offered, into sink; got is how many bytes
// had arrived when it was.
type takeAll struct {
	sink *recordSink
	got  int
}

func (e *takeAll) Early(got mem.BufferSlice, total int, _ bool) (Sink, bool) {
	e.got = got.Len()
	e.sink = &recordSink{total: total, freeNow: true}
	return e.sink, false
}

// earlyHarness reads a connection's DATA frames, one message of stream 1,
// through an Assembler that offers its messages to a takeAll.
type earlyHarness struct {
	in     *Input
	e      takeAll
	a      Assembler
	r      Reader
	budget Budget
	recv   int64
}

// newEarlyHarness reads wire at most perRead bytes per read of the
// connection, through a read buffer of bufSize.
func newEarlyHarness(wire []byte, perRead, bufSize int) *earlyHarness {
	h := &earlyHarness{in: NewInput(&vecReader{b: wire, rng: rand.New(rand.NewPCG(1, 1)), max: perRead}, bufSize),
		budget: NewBudget(64 << 20), recv: 1 << 40}
	h.a.SetEarly(&h.e, 128<<10)
	h.r = Reader{Br: h.in}
	return h
}

// frame reads the next DATA frame into the Assembler; a message it delivers
// whole goes to deliver.
func (h *earlyHarness) frame(t *testing.T, deliver func(mem.BufferSlice, bool) error) {
	t.Helper()
	hd, err := h.r.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := h.r.DataStart(hd, &h.recv, "the test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.Read(h.in, n, 64<<20, &h.budget, deliver); err != nil {
		t.Fatal(err)
	}
}

// A sink's pieces grow: the first goes on at handOutAt, each later one may
// be twice the one before, up to handOutMax. A 6.2 MB message that is all
// there to read goes on in a few sends, not one per 256 KiB.
func TestSinkPiecesGrow(t *testing.T) {
	const size = 6_200_000
	wire, msg := oneMessage(size)
	h := newEarlyHarness(wire, 1<<30, 256<<10)
	e := &h.e
	var sizes []int
	for e.sink == nil || e.sink.last == 0 {
		before := 0
		if e.sink != nil {
			before = e.sink.n
		}
		h.frame(t, func(mem.BufferSlice, bool) error {
			t.Fatal("a message its sink took was delivered whole")
			return nil
		})
		if e.sink != nil && e.sink.n > before {
			sizes = append(sizes, e.sink.n-before)
		}
	}
	if !bytes.Equal(e.sink.copied, msg[5:]) {
		t.Fatalf("the sink got %d bytes, not the message's %d", len(e.sink.copied), size)
	}
	// After the bytes offered with the head, the pieces are at least
	// handOutAt, 2×, 4×… up to handOutMax, and none above it but by a frame.
	want := handOutAt
	for i, n := range sizes[1 : len(sizes)-1] {
		if n < want || n > handOutMax+DefaultMaxFrame {
			t.Errorf("piece %d: %d bytes, want %d to %d (pieces %v)", i+1, n, want, handOutMax+DefaultMaxFrame, sizes)
		}
		want = min(2*want, handOutMax)
	}
	if max := 2 + size/(1<<20) + 3; len(sizes) > max { // pieces of a MiB
		t.Errorf("%d pieces for %d bytes, want at most %d: %v", len(sizes), size, max, sizes)
	}
}

// A message whose rest the reader already holds is assembled whole, not
// offered: forwarded as it arrives it would overlap nothing and cost a send.
// One whose rest is still to come is offered, and the sink gets every byte.
func TestEarlySkipsMessageAlreadyRead(t *testing.T) {
	const size = 256_000
	for _, tc := range []struct {
		name    string
		perRead int // at most, bytes per read of the connection
		offered bool
	}{
		{"rest already read", 1 << 30, false},
		{"rest still to come", 16 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wire, msg := oneMessage(size)
			h := newEarlyHarness(wire, tc.perRead, 512<<10)
			e := &h.e
			var whole []byte
			for whole == nil && (e.sink == nil || e.sink.last == 0) {
				h.frame(t, func(m mem.BufferSlice, _ bool) error {
					whole = m.Materialize()
					m.Free()
					return nil
				})
			}
			got := whole
			if e.sink != nil {
				got = e.sink.copied
			}
			if (e.sink != nil) != tc.offered {
				t.Errorf("offered to Early: %v, want %v", e.sink != nil, tc.offered)
			}
			if !bytes.Equal(got, msg[5:]) {
				t.Fatalf("got %d bytes, not the message's %d", len(got), size)
			}
		})
	}
}

// A message is offered once the reader has taken what one read of the
// connection brought, not after its first frame: the call's first send then
// carries all of it, instead of the first frame and, a send later, the rest.
func TestEarlyOfferedWithWhatTheReadBrought(t *testing.T) {
	const size, perRead = 1_200_000, 200 << 10
	wire, msg := oneMessage(size)
	h := newEarlyHarness(wire, perRead, 512<<10)
	h.in.src.(*vecReader).rng = nil // every read brings perRead bytes
	for h.e.sink == nil || h.e.sink.last == 0 {
		h.frame(t, func(mem.BufferSlice, bool) error {
			t.Fatal("a message its sink took was delivered whole")
			return nil
		})
	}
	if !bytes.Equal(h.e.sink.copied, msg[5:]) {
		t.Fatalf("the sink got %d bytes, not the message's %d", len(h.e.sink.copied), size)
	}
	// The first read brought perRead bytes: a frame's payload fewer than
	// that, less the frame headers and the gRPC prefix, were in the message.
	if least := perRead - DefaultMaxFrame - (perRead/DefaultMaxFrame+1)*FrameHeaderLen - 5; h.e.got < least {
		t.Errorf("offered with %d bytes arrived; the first read brought %d, want at least %d offered", h.e.got, perRead, least)
	}
}

// declineAgain declines every message it is offered, asking to be asked again.
type declineAgain struct{ offers int }

func (e *declineAgain) Early(got mem.BufferSlice, total int, _ bool) (Sink, bool) {
	e.offers++
	return nil, true
}

// Offering a message costs nothing beyond boxing a view of each chunk it
// has: the slice holding the views is the connection's scratch (it was made
// anew for every offer).
func TestOfferAllocatesOnlyItsViews(t *testing.T) {
	in := NewInput(nil, 4096)
	budget := NewBudget(64 << 20)
	c1, c2 := make([]byte, 16<<10), make([]byte, 32<<10)
	e := &declineAgain{}
	a := Assembler{chunks: []*[]byte{&c1, &c2}, cur: 100, n: 16<<10 + 100, want: 1 << 20}
	a.SetEarly(e, 128<<10)
	declined := testing.AllocsPerRun(100, func() { a.offer(in, &budget) })
	if e.offers == 0 || a.declined {
		t.Fatalf("offers %d, declined %v: the offer was not made, or not left open for again", e.offers, a.declined)
	}
	if declined > 2 {
		t.Errorf("a declined offer of a 2-chunk message allocates %.0f objects, want at most 2 (a boxed view of each chunk)", declined)
	}
}
