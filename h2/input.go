package h2

import (
	"encoding/binary"
	"io"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/mem"
)

// Input is a connection's receive buffer: what Reader and Assembler read the
// connection through. It is a buffered reader, with one thing more: a large
// message's DATA payloads are read from the socket into the message's own
// buffer, not copied there from the read buffer.
//
// That takes guessing, because a payload is followed by the next frame's
// header. When the Assembler reads the end of a DATA frame's payload and the
// buffer is empty, it tells Input where the bytes of the message would go
// next; Input then reads with one readv into: the rest of this payload, a
// 9-byte header slot, the next 16 KiB of the message's buffer, another header
// slot, and so on (up to maxGuess frames, as many as fit the message's current
// chunk and the read buffer, which grows to guessBuf the first time), then the
// read buffer. A peer sending a large message sends DATA frames of the same
// size one after another, so the guess is normally right: the header read
// from each slot is a DATA frame of the stream, of the payload's length,
// without padding, and the Assembler finds
// its bytes already in place. When a header is anything else, or anything
// other than that stream's Assembler reads the guessed bytes, or the Assembler
// drops its buffer, the bytes still in the message's buffer are moved into
// the read buffer first (rescue), and everything continues as plain buffered
// reading. What is read never depends on the guess, only how many copies it
// takes.
//
// What of a large message one read brought before the message is read (all
// of it, or its head: a 1.2 MB request's first MiB) is not copied out of the
// read buffer: the Assembler takes those payloads as views of the buffer
// (lend), reads the rest into its chunks, and the next read goes to another
// buffer of the same size (own). The lent buffer counts against the
// connection's Budget like a message's chunks until the last view of it is
// freed, and comes back as a spare.
type Input struct {
	src  io.Reader
	vr   vectorReader // src, when it reads into several buffers at once
	buf  []byte
	bufp *[]byte // buf's own header, what a lent buffer is given back as
	r    int     // buf[r:w] is unread, after the segments
	w    int

	// Lending (Assembler.Read): a large message whose bytes are all in buf
	// already is delivered as views of buf instead of being copied out of
	// it. root is Input's own reference to buf once part of it is lent (nil:
	// buf is Input's alone); before the next read into buf, Input lets go
	// of it and reads into another buffer of the same size, a spare given
	// back by lender once every view of it was freed, or a new one.
	root   mem.Buffer
	lender *lender
	lent   int // bytes lent (tests)

	// The guessed bytes, in stream order, before buf[r:w]: header slots
	// (hdrs) and payload segments in owner's buffer. r ≥ their total length
	// (rescue moves them to buf[r-total:r]).
	segs  []segment
	hdrs  [maxGuess][FrameHeaderLen]byte
	owner *Assembler // whose buffer the payload segments are in
	iov   [][]byte   // readv scratch

	inPlace int // bytes a guess read into a message's buffer (tests)

	offered mem.BufferSlice // Assembler.offer's scratch: the views Early is offered

	// The DATA frame being read (Reader.DataStart): a payload ending without
	// padding may be followed by another of the same stream and length.
	stream uint32
	length uint32
	padded bool
}

type vectorReader interface {
	ReadV(bufs [][]byte) (int, error)
}

// segment is bytes of the stream already read: a header slot (hdr) or part
// of a message's buffer.
type segment struct {
	b   []byte
	hdr bool
	// A header slot: the DATA frame it should hold (stream, payload length),
	// and whether its payload is the last one guessed (the frame may then be
	// longer: the rest is in the buffer).
	stream  uint32
	length  uint32
	lastPay bool
}

// maxGuess bounds the frames one readv guesses: a 1 MiB message chunk of
// 16 KiB frames (maxChunk, guessBuf).
const maxGuess = 64

// guessBuf is the read buffer of a connection once it carries a message
// large enough to guess into: room for maxGuess frames to be rescued. A
// connection that never does keeps the size it was made with
// (read_buffer_kib), so the memory is spent only where large frames flow,
// once per connection.
const guessBuf = maxGuess*(FrameHeaderLen+DefaultMaxFrame) + ownRoom

// ownRoom is what a guess leaves of the read buffer for the bytes after it.
const ownRoom = 4096

// NewInput reads r through a buffer of size bytes.
func NewInput(r io.Reader, size int) *Input {
	in := &Input{src: r}
	in.setBuf(make([]byte, max(size, 4096)))
	in.vr, _ = r.(vectorReader)
	return in
}

func (in *Input) setBuf(b []byte) {
	in.buf = b
	in.bufp = &b
}

// Buffered is how many bytes can be read without reading the connection.
func (in *Input) Buffered() int {
	n := in.w - in.r
	for _, s := range in.segs {
		n += len(s.b)
	}
	return n
}

// rescue moves the guessed payload bytes not yet read out of the message's
// buffer into the read buffer, before buf[r:w].
func (in *Input) rescue() {
	if len(in.segs) == 0 {
		return
	}
	total := 0
	for _, s := range in.segs {
		total += len(s.b)
	}
	dst := in.buf[in.r-total : in.r]
	for _, s := range in.segs {
		dst = dst[copy(dst, s.b):]
	}
	in.r -= total
	clear(in.segs)
	in.segs, in.owner = in.segs[:0], nil
}

// release: a's buffer is about to be dropped or handed on.
func (in *Input) release(a *Assembler) {
	if in.owner == a {
		in.rescue()
	}
}

// take reads buffered bytes into p. inPlace: p is where a message's bytes
// go; a guessed segment at p's address is taken without a copy. Any other
// read of a payload segment rescues first.
func (in *Input) take(p []byte, inPlace bool) int {
	n := 0
	for len(p) > 0 && len(in.segs) > 0 {
		s := &in.segs[0]
		k := min(len(p), len(s.b))
		switch {
		case s.hdr:
			copy(p, s.b[:k])
		case inPlace && &p[0] == &s.b[0]:
			in.inPlace += k
		default:
			in.rescue()
			continue
		}
		s.b, p, n = s.b[k:], p[k:], n+k
		if len(s.b) == 0 {
			in.segs = in.segs[:copy(in.segs, in.segs[1:])]
		}
	}
	if len(in.segs) == 0 {
		in.owner = nil
	}
	k := copy(p, in.buf[in.r:in.w])
	in.r += k
	return n + k
}

// fill reads the connection into the (empty) buffer.
func (in *Input) fill() error {
	in.own()
	in.r, in.w = 0, 0
	n, err := in.src.Read(in.buf)
	in.w = n
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	if n > 0 {
		err = nil // the next read reports it, once these bytes are taken
	}
	return err
}

// Read implements io.Reader.
func (in *Input) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if in.Buffered() == 0 {
		if len(p) >= len(in.buf) { // large: straight into p
			in.own() // a lent buffer is not kept (nor counted) meanwhile
			n, err := in.src.Read(p)
			if n == 0 && err == nil {
				err = io.ErrNoProgress
			}
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		if err := in.fill(); err != nil {
			return 0, err
		}
	}
	return in.take(p, false), nil
}

// ReadByte reads one byte.
func (in *Input) ReadByte() (byte, error) {
	var b [1]byte
	if err := in.readFull(b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

// readFull reads exactly len(p) bytes; as io.ReadFull, io.EOF only when it
// read none.
func (in *Input) readFull(p []byte) error {
	for read := 0; len(p) > 0; {
		if in.Buffered() == 0 {
			if err := in.fill(); err != nil {
				if read > 0 {
					return unexpected(err)
				}
				return err
			}
		}
		k := in.take(p, false)
		p, read = p[k:], read+k
	}
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Discard skips n bytes.
func (in *Input) Discard(n int) (int, error) {
	done := 0
	for done < n {
		if in.Buffered() == 0 {
			if err := in.fill(); err != nil {
				return done, err
			}
		}
		k := min(n-done, in.w-in.r)
		if len(in.segs) > 0 {
			in.rescue() // segments hold no more than buf[r:] then
			k = min(n-done, in.w-in.r)
		}
		in.r += k
		done += k
	}
	return done, nil
}

// readHeader reads a frame header into b, and judges the guess the header
// slot it came from made.
func (in *Input) readHeader(b []byte) error {
	var guess *segment
	if len(in.segs) > 0 && in.segs[0].hdr && len(in.segs[0].b) == FrameHeaderLen {
		s := in.segs[0]
		guess = &s
	}
	if err := in.readFull(b); err != nil {
		return err
	}
	if len(in.segs) == 0 || in.segs[0].hdr {
		return nil // no payload guessed after this header
	}
	length := uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
	stream := (uint32(b[5])<<24 | uint32(b[6])<<16 | uint32(b[7])<<8 | uint32(b[8])) & 0x7fffffff
	last := len(in.segs) == 1 // the payload after this header is the last segment
	ok := guess != nil && http2.FrameType(b[3]) == http2.FrameData && http2.Flags(b[4])&http2.FlagDataPadded == 0 &&
		stream == guess.stream && (length == guess.length || (last && guess.lastPay && length > guess.length))
	if !ok {
		in.rescue()
	}
	return nil
}

// dataStarted notes the DATA frame being read.
func (in *Input) dataStarted(h FrameHeader) {
	in.stream, in.length, in.padded = h.Stream, h.Length, h.Has(http2.FlagDataPadded)
}

// readInto reads exactly len(dst) bytes of a's message into dst, in a's
// buffer. last says dst ends the DATA frame's data; next is where the bytes
// of a's message would go after dst, in the same buffer (nil: nowhere);
// more, that the message goes on after next, in a buffer a has not taken
// yet.
//
// While more holds, a read takes no more than ownRoom past what goes in
// place: the bytes after a chunk's end are the next chunk's, and reading
// them into the read buffer would mean copying them from there (up to a
// MiB at each chunk's end: half of a 6.2 MB message), where the next read,
// once a has taken that chunk, puts them in place.
func (in *Input) readInto(a *Assembler, dst []byte, last bool, next []byte, more bool) error {
	dst = dst[in.take(dst, true):]
	for len(dst) > 0 {
		// The buffer is empty here.
		var n int
		var err error
		switch {
		case in.vr != nil && last && !in.padded && in.length == DefaultMaxFrame && len(next) > 0 && len(in.buf) >= minGuessBuf:
			n, err = in.guess(a, dst, next, more)
		case len(dst) >= len(in.buf)/2: // straight into dst
			in.own()
			n, err = in.src.Read(dst)
		case in.vr != nil && more && len(next) == 0: // dst ends a chunk
			n, err = in.guess(a, dst, nil, true)
		default:
			if err := in.fill(); err != nil {
				return unexpected(err)
			}
			n = in.take(dst, true)
		}
		if n == 0 {
			if err == nil {
				err = io.ErrNoProgress
			}
			return unexpected(err)
		}
		dst = dst[n:]
	}
	return nil
}

// minGuessBuf: a read buffer smaller than this is not worth guessing into.
const minGuessBuf = 64 << 10

// guess reads dst, then guessed frames of in.stream whose payloads go to
// next, then the read buffer (no more than ownRoom of it if more: see
// readInto), with one readv. It returns the bytes of dst read; those after
// it are registered as segments (the buffer was empty).
func (in *Input) guess(a *Assembler, dst, next []byte, more bool) (int, error) {
	in.own()
	if len(in.buf) < guessBuf && len(next) > len(in.buf)-ownRoom {
		in.setBuf(make([]byte, guessBuf)) // empty: nothing to carry over
	}
	room := len(in.buf) - ownRoom
	iov := append(in.iov[:0], dst)
	var pay [maxGuess][]byte
	k, total := 0, 0
	for k < maxGuess && len(next) > 0 && total+FrameHeaderLen+1 <= room {
		p := next[:min(len(next), int(in.length), room-total-FrameHeaderLen)]
		pay[k] = p
		iov = append(iov, in.hdrs[k][:], p)
		total += FrameHeaderLen + len(p)
		next = next[len(p):]
		k++
	}
	tail := in.buf[total:]
	if more {
		tail = tail[:min(len(tail), ownRoom)]
	}
	iov = append(iov, tail)
	n, err := in.vr.ReadV(iov)
	clear(iov)
	in.iov = iov[:0]
	in.inPlace += min(n, len(dst))
	if n <= len(dst) {
		in.r, in.w = 0, 0
		return n, err
	}
	// What the readv reached after dst, in stream order; the buffer's bytes
	// come after the segments, and r leaves room to rescue them before it.
	n -= len(dst)
	segs := in.segs[:0]
	for i := 0; i < k && n > 0; i++ {
		h := in.hdrs[i][:min(n, FrameHeaderLen)]
		n -= len(h)
		segs = append(segs, segment{b: h, hdr: true, stream: in.stream, length: uint32(len(pay[i])), lastPay: i == k-1})
		if n > 0 {
			p := pay[i][:min(n, len(pay[i]))]
			n -= len(p)
			segs = append(segs, segment{b: p})
		}
	}
	in.segs, in.owner, a.in = segs, a, in
	in.r, in.w = total, total+n
	return len(dst), nil
}

// Reset discards what is buffered and reads r from now on.
func (in *Input) Reset(r io.Reader) {
	in.rescue()
	in.src, in.r, in.w = r, 0, 0
	in.vr, _ = r.(vectorReader)
}

// lender is the pool a lent read buffer goes back to once the views of it
// and Input's own reference are all freed, on any goroutine: it stops
// counting against the connection's delivered messages (d) then, and waits
// as a spare for Input's next swap.
type lender struct {
	d     *delivered // nil: lent buffers are not counted
	spare chan *[]byte
}

// Get is never called: a lent buffer is made by Input.
func (l *lender) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// Put takes a lent buffer back.
func (l *lender) Put(b *[]byte) {
	if l.d != nil {
		l.d.held.Add(-int64(cap(*b)))
	}
	select {
	case l.spare <- b:
	default: // spares enough: left to the garbage collector
	}
}

// lendFrameMin: a message sent in shorter frames is copied, not lent, so
// that the views of a message stay few (a view is an object of its own, and
// a peer sending a large message in tiny frames would otherwise make vig hold
// one per frame).
const lendFrameMin = 4 << 10

// lendSpares is how many freed buffers a connection keeps to read into: one,
// enough while each request is forwarded before the next arrives, so that a
// connection that lends holds at most twice its read buffer besides what its
// Budget counts.
const lendSpares = 1

// lendable is how many of a message's next bytes — the n payload bytes at r,
// then the rest bytes after them — the read buffer holds in a form that can be
// lent: the DATA frames that carry them follow in buf, of the same stream,
// without padding, none ending the stream early, each at least lendFrameMin
// long unless it ends the message; the count stops at the first frame that is
// not, and at the end of what was read (a frame cut there counts with what of
// it arrived). Nothing is lendable while anything is guessed.
func (in *Input) lendable(n, rest int) int {
	if len(in.segs) > 0 || in.padded {
		return 0
	}
	if in.w-in.r < n {
		return in.w - in.r
	}
	got, pos := n, in.r+n
	for rest > 0 && pos+FrameHeaderLen <= in.w {
		h := in.buf[pos : pos+FrameHeaderLen]
		length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		flags := http2.Flags(h[4])
		if http2.FrameType(h[3]) != http2.FrameData || binary.BigEndian.Uint32(h[5:])&0x7fffffff != in.stream ||
			flags&http2.FlagDataPadded != 0 || (flags&http2.FlagDataEndStream != 0 && length < rest) ||
			(length < rest && length < lendFrameMin) {
			break
		}
		pos += FrameHeaderLen
		k := min(length, rest, in.w-pos)
		got, rest = got+k, rest-k
		if k < length {
			break // cut at the end of the read: the rest of it is to come
		}
		pos += length
	}
	return got
}

// startLend makes buf lendable, counted against b's delivered messages until
// it is given back; false when b cannot hold it (the message is then copied
// as usual).
func (in *Input) startLend(b *Budget) bool {
	if in.root != nil {
		return in.lender.d == b.out
	}
	c := cap(in.buf)
	if c > b.avail() {
		return false
	}
	if in.lender == nil || in.lender.d != b.out {
		in.lender = &lender{d: b.out, spare: make(chan *[]byte, lendSpares)}
	}
	if b.out != nil {
		b.out.held.Add(int64(c))
	}
	in.root = mem.NewBuffer(in.bufp, in.lender)
	return true
}

// lend takes the next k buffered bytes as a view of the read buffer
// (startLend first; lendable said they are there).
func (in *Input) lend(k int) mem.Buffer {
	v := in.root.Slice(in.r, in.r+k)
	in.r += k
	in.lent += k
	return v
}

// own lets go of a lent read buffer before the next read into it: the reads
// go to a spare of the same size, or a new one. The buffer is empty here.
func (in *Input) own() {
	if in.root == nil {
		return
	}
	in.root.Free()
	in.root = nil
	select {
	case b := <-in.lender.spare:
		if cap(*b) == len(in.buf) {
			*b = (*b)[:cap(*b)]
			in.buf, in.bufp = *b, b
			return
		}
	default:
	}
	in.setBuf(make([]byte, len(in.buf)))
}
