package h2

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/mem"
)

// Assembler collects one gRPC message (5-byte prefix + body) of a stream from
// its DATA frames, reading the body straight from the connection's buffer into
// pooled chunks.
//
// Memory follows the bytes that arrived, never the length the prefix declares
// (a peer that declares 64 MiB and sends nothing costs nothing): a chunk is taken
// only when body bytes arrive for it, and chunks grow with what has arrived
// (16 KiB, 32 KiB, then 1 MiB each, the default pool's tiers), so a message in
// progress holds at most 1 MiB more than it has received. What the chunks hold,
// by capacity, is charged to the connection's Budget while the message is
// incomplete; a message that would overdraw it fails (ErrBudget), not the
// connection.
type Assembler struct {
	prefix [5]byte
	pn     int
	chunks []*[]byte // filled chunks, then the one being filled
	inline [4]*[]byte
	cur    int    // bytes of the last chunk filled
	held   int    // capacity of chunks, charged to the budget
	n      int    // body bytes received
	want   int    // body size declared
	listed bool   // in its connection's Partials
	in     *Input // holds guessed bytes in this message's buffer (Input.guess)

	// The part of a message that is in the read buffer when its body
	// starts — all of it, or the head that one read brought — is taken as
	// views of that buffer (lent), not copied into chunks, when copying it
	// would hold at least as much (copyHeld) and, for a head, the budget
	// counts the buffer: its first lendTo bytes. The rest goes to chunks as
	// usual, after the views.
	lendTo int
	lent   mem.BufferSlice

	// Cut-through (Early): a message of at least earlyMin bytes is offered to
	// early while it arrives; once a Sink takes it, its bytes go there as they
	// arrive instead of being assembled.
	early    Early
	earlyMin int
	declined bool            // early said never, for the message in progress
	sink     Sink            // the message's taker
	rest     mem.Buffer      // sink mode: the current chunk from cur on, not yet handed on
	out      mem.BufferSlice // sink mode: bytes arrived, not yet handed on (pieceBound)
	pend     int             // their length
	unsplit  int             // bytes at rest's start that arrived, not yet in out
	handAt   int             // sink mode: hand out once pend reaches it (0: handOutAt)
}

// Early is a stream handler that may take a large message before it is
// complete, to forward its bytes as they arrive (cut-through) rather than
// once the whole message is in. It runs on the reader goroutine, without the
// connection's lock.
type Early interface {
	// Early is offered a message of total bytes of which got have arrived
	// (views valid during the call; not owned). It returns a Sink to take the
	// message from here on, or nil, with again when it wants to be asked
	// again once more has arrived (the head it needs is not all there yet).
	// It is asked until it answers or EarlyAsk bytes have arrived, each
	// time the message's next bytes need a read of the connection: not while
	// the reader holds its rest (taken then, it would overlap nothing and
	// cost a send) or its next frame.
	Early(got mem.BufferSlice, total int, compressed bool) (s Sink, again bool)
}

// EarlyAsk: a message is offered to Early only while its first EarlyAsk bytes
// arrive; after that it is assembled whole.
const EarlyAsk = 64 << 10

// Sink takes a message as it arrives (Early). Its methods run on the reader
// goroutine, without the connection's lock.
type Sink interface {
	// Data is the next bytes of the message, the arrived ones first: the
	// buffers are the sink's (views of the message's pooled chunks, counted
	// against the connection's Budget until freed), the slice holding them
	// is valid only during the call. last says they end the message. The
	// bytes come in pieces: what has arrived when the reader would otherwise
	// wait for more, or once a piece is handOutAt, twice that for the next
	// piece, and so on up to handOutMax.
	Data(b mem.BufferSlice, last bool)
	// Drop: the message will not be complete (its stream ended or was reset,
	// or it went over the budget); nothing more comes. The stream's handler
	// is told why as for any message (Failed, Cancelled).
	Drop()
}

// SetEarly offers the messages of at least min bytes to e (Early).
func (a *Assembler) SetEarly(e Early, min int) { a.early, a.earlyMin = e, min }

// Budget is what a connection may hold in incomplete messages, by buffer
// capacity. Used by the connection's reader goroutine only.
//
// A stream can end (answered, reset, its connection's table emptied) on another
// goroutine while its message is incomplete; its assembler belongs to the
// reader, so the memory is taken back by the reader: Reclaim (set by
// the connection) resets the assemblers of ended streams, all but skip, the one
// being read. It runs when the budget would be overdrawn, and as the list of
// assemblers to look at grows.
//
// A server role also counts the messages it has delivered until their
// buffers are freed (HoldDelivered): a request waiting in vig's queues, or
// relayed to a backend that reads slowly, holds its client's memory, so one
// connection holds at most its budget whatever the other leg does.
type Budget struct {
	left, limit int
	Reclaim     func(skip *Assembler)
	out         *delivered // nil: delivered messages leave the budget
}

// delivered is the buffer pool of a budget's delivered messages: what they
// hold is counted until each buffer is freed, on any goroutine.
type delivered struct{ held atomic.Int64 }

func (d *delivered) Get(n int) *[]byte { return msgPool.Get(n) }

func (d *delivered) Put(b *[]byte) {
	d.held.Add(-int64(cap(*b)))
	msgPool.Put(b)
}

// HoldDelivered makes the messages delivered count against b until their
// buffers are freed.
func (b *Budget) HoldDelivered() { b.out = &delivered{} }

// avail is what a message may still take.
func (b *Budget) avail() int {
	if b.out == nil {
		return b.left
	}
	return b.left - int(b.out.held.Load())
}

// Delivered is what the messages b delivered still hold (HoldDelivered).
func (b *Budget) Delivered() int {
	if b.out == nil {
		return 0
	}
	return int(b.out.held.Load())
}

// Partials is the list a connection's Budget.Reclaim walks: the assemblers that
// may hold memory, with their streams. Reader goroutine only.
type Partials struct {
	list  []partial
	swept int // len(list) after the last sweep
}

type partial struct {
	a  *Assembler
	id uint32
}

// Note lists a, stream id's assembler, once it holds memory. It reports whether
// the list has doubled since the last sweep: the caller should then sweep
// (Budget.Reclaim, sparing a), which keeps the list proportional to the streams
// that hold memory.
func (p *Partials) Note(a *Assembler, id uint32) (sweep bool) {
	if a.listed || !a.holds() {
		return false
	}
	a.listed = true
	p.list = append(p.list, partial{a, id})
	return len(p.list) >= 2*p.swept+16
}

// Sweep frees what the assemblers of ended streams hold (ended says which; the
// caller holds whatever guards its stream table), all but skip, the one being
// read, and forgets the assemblers that hold nothing.
func (p *Partials) Sweep(skip *Assembler, b *Budget, ended func(id uint32, a *Assembler) bool) {
	keep := p.list[:0]
	for _, e := range p.list {
		switch {
		case e.a == skip:
		case !e.a.holds():
			e.a.listed = false
			continue
		case ended(e.id, e.a):
			e.a.Reset(b)
			e.a.listed = false
			continue
		}
		keep = append(keep, e)
	}
	clear(p.list[len(keep):])
	p.list, p.swept = keep, len(keep)
}

// ConnMsgBudget is the bound on the memory a connection's messages may hold
// (buffer capacity): incomplete ones, and in a server role delivered ones
// until their buffers are freed (HoldDelivered; a client role's leave the
// budget once complete and handed on). A message above it cannot be received,
// so the effective bound is max(ConnMsgBudget, max_message_mib + 1 MiB): see
// NewBudget. Together with the read buffer (read_buffer_kib), the header
// block (MaxHeaderBlock) and the control frames' bound (MaxQueuedControl), it
// bounds what one connection makes vig hold.
const ConnMsgBudget = 128 << 20

// NewBudget is the budget of a connection whose messages are at most maxMsg bytes.
func NewBudget(maxMsg int) Budget {
	limit := max(ConnMsgBudget, maxMsg+maxChunk)
	return Budget{left: limit, limit: limit}
}

// copyHeld is the buffer capacity a message of size bytes takes when it is
// copied into chunks (chunkSize, msgPool's tiers). What of a message is in
// the read buffer when its body starts is taken as views of that buffer
// instead (Input.lendable; by `perf` the copy was 8 % of vig's CPU at 256 KB)
// only when the buffer and the chunks the rest then takes are no larger than
// this: lending never holds more memory than copying would, so a queue of
// small requests does not pin a read buffer each.
func copyHeld(size int) int { return copyHeldFrom(0, size) }

// copyHeldFrom is the buffer capacity the bytes of a message of size bytes
// from the offset from on take when they are copied into chunks.
func copyHeldFrom(from, size int) int {
	held := 0
	for n := from; n < size; {
		k := min(chunkSize(n), size-n)
		c := k
		if t := msgPool.(*dirtyPool).tier(k); t != nil {
			c = t.size
		}
		held += c
		n += k
	}
	return held
}

// Chunk sizes of a message body, by what has arrived so far.
const (
	firstChunk  = 16 << 10
	secondChunk = 32 << 10
	maxChunk    = 1 << 20
)

func chunkSize(received int) int {
	switch {
	case received == 0:
		return firstChunk
	case received <= firstChunk:
		return secondChunk
	}
	return maxChunk
}

// ErrMsgTooLarge is the sentinel for a message above the configured limit.
type ErrMsgTooLarge struct{ Size, Limit int }

// Error implements error.
func (e ErrMsgTooLarge) Error() string {
	return fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", e.Size, e.Limit)
}

// ErrBudget: a message would take the connection's incomplete messages above
// their bound.
type ErrBudget struct{ Limit, Delivered int }

// Error implements error.
func (e ErrBudget) Error() string {
	if e.Delivered > 0 {
		return fmt.Sprintf("this connection's messages would hold more than %d bytes in vig (%d of them in requests waiting for the backend): send fewer large messages at once on one connection, or spread them over several", e.Limit, e.Delivered)
	}
	return fmt.Sprintf("incomplete messages on this connection would hold more than %d bytes: send fewer large messages at once on one connection", e.Limit)
}

// Read consumes n bytes of DATA payload from r, calling deliver for every message
// it completes. A message above limit stops it with ErrMsgTooLarge, one that
// would overdraw budget with ErrBudget (the message is dropped), leaving the
// rest of the n bytes (left) unread.
func (a *Assembler) Read(r *Input, n, limit int, budget *Budget, deliver func(mem.BufferSlice, bool) error) (left int, err error) {
	for n > 0 {
		if a.pn < 5 {
			k := min(5-a.pn, n)
			if err := r.readFull(a.prefix[a.pn : a.pn+k]); err != nil {
				return n, err
			}
			a.pn += k
			n -= k
			if a.pn < 5 {
				return 0, nil
			}
			size := int(binary.BigEndian.Uint32(a.prefix[1:]))
			if size > limit {
				a.pn = 0
				return n, ErrMsgTooLarge{size, limit}
			}
			a.want, a.n = size, 0
		}
		if a.n == 0 && a.sink == nil && len(a.chunks) == 0 && n > 0 && a.want >= DefaultMaxFrame {
			// Only a budget that counts delivered messages counts a lent
			// buffer (startLend): elsewhere only a whole message is lent, so
			// that a head whose rest never comes cannot pin a buffer the
			// budget does not see.
			if copied := copyHeld(a.want); len(r.buf) <= copied {
				k := min(n, a.want)
				p := r.lendable(k, a.want-k)
				if p > 0 && (p == a.want || budget.out != nil) && len(r.buf)+copyHeldFrom(p, a.want) <= copied && r.startLend(budget) {
					a.lendTo = p
					a.lent = make(mem.BufferSlice, 0, p/DefaultMaxFrame+3) // its frames, and the chunks after them
				}
			}
		}
		if a.n < a.lendTo && n > 0 {
			k := min(n, a.lendTo-a.n)
			a.lent = append(a.lent, r.lend(k))
			a.n += k
			n -= k
		}
		for a.n < a.want && n > 0 {
			if len(a.chunks) == 0 || a.cur == len(*a.chunks[len(a.chunks)-1]) {
				size := min(chunkSize(a.n), a.want-a.n)
				buf := msgPool.Get(size)
				c := cap(*buf)
				if c > budget.avail() && budget.Reclaim != nil {
					budget.Reclaim(a)
				}
				if c > budget.avail() {
					msgPool.Put(buf)
					a.Reset(budget)
					return n, ErrBudget{budget.limit, budget.Delivered()}
				}
				if a.chunks == nil {
					a.chunks = a.inline[:0]
				}
				if a.sink != nil {
					// The chunk is handed on as it fills: it counts as delivered.
					a.chunks = append(a.chunks[:0], buf)
					a.rest = a.handOn(buf, budget)
				} else {
					budget.left -= c
					a.held += c
					a.chunks = append(a.chunks, buf)
				}
				a.cur = 0
			}
			last := *a.chunks[len(a.chunks)-1]
			k := min(len(last)-a.cur, n)
			end := a.cur + k
			after := a.want - a.n - k // the message's bytes after these
			next := last[end : end+min(len(last)-end, after)]
			if err := r.readInto(a, last[a.cur:end], k == n, next, after > len(next)); err != nil {
				return n, err
			}
			a.cur += k
			a.n += k
			n -= k
			if a.sink != nil {
				a.unsplit += k
				a.pend += k
				if a.cur == len(last) {
					a.splitOff()
				}
			}
		}
		if a.sink != nil {
			if a.n == a.want {
				a.endSink()
				continue
			}
			if a.pend >= a.pieceBound() || r.Buffered() == 0 {
				a.handOut(false)
			}
			continue
		}
		// A message is offered when its next bytes need a read of the
		// connection: not while its rest is already read (forwarded as it
		// arrives it would overlap nothing, and cost a send), and not while
		// the frames one read brought are still being taken (the call's
		// first send then carries them all, not the first frame alone).
		if a.n > 0 && a.n < a.want && a.n >= a.lendTo && a.early != nil && !a.declined && a.want >= a.earlyMin && r.Buffered() < min(a.want-a.n, FrameHeaderLen+int(r.length)) {
			a.offer(r, budget)
			continue
		}
		if a.n == a.want {
			if a.in != nil {
				a.in.release(a) // nothing guessed is left in the buffer by now; if it were, it moves
				a.in = nil
			}
			msg := mem.BufferSlice{} // an empty message is still a message
			if a.lendTo > 0 {
				msg, a.lent, a.lendTo = a.lent, nil, 0 // counted as lent (Input.startLend)
			}
			if len(a.chunks) > 0 {
				var pool mem.BufferPool = msgPool
				if budget.out != nil {
					pool = budget.out
				}
				held := 0
				if len(msg) == 0 {
					msg = make(mem.BufferSlice, 0, len(a.chunks))
				}
				for i, c := range a.chunks {
					// A buffer this small is not pooled (mem.NewBuffer): its
					// Free never reaches the pool, so it is not counted.
					if !mem.IsBelowBufferPoolingThreshold(cap(*c)) {
						held += cap(*c)
					}
					msg = append(msg, mem.NewBuffer(c, pool))
					a.chunks[i] = nil
				}
				if budget.out != nil {
					budget.out.held.Add(int64(held))
				}
			}
			compressed := a.prefix[0] != 0
			budget.left += a.held
			a.pn, a.chunks, a.cur, a.held, a.n, a.want, a.declined = 0, a.chunks[:0], 0, 0, 0, 0, false
			if err := deliver(msg, compressed); err != nil {
				return n, err
			}
		}
	}
	return 0, nil
}

// offer asks early to take the message in progress; the bytes arrived so
// far go to the sink it returns. The views early is offered are held in r's
// scratch (they are the call's only), and a sink's pieces in a slice sized
// for the usual few, so that neither grows anew for every request.
func (a *Assembler) offer(r *Input, budget *Budget) {
	got := append(r.offered[:0], a.lent...)
	for i, c := range a.chunks {
		b := *c
		if i == len(a.chunks)-1 {
			b = b[:a.cur]
		}
		got = append(got, mem.SliceBuffer(b))
	}
	sink, again := a.early.Early(got, a.want, a.prefix[0] != 0)
	clear(got)
	r.offered = got[:0]
	if sink == nil {
		a.declined = !again || a.n >= EarlyAsk
		return
	}
	a.sink = sink
	budget.left += a.held
	a.held = 0
	if a.out == nil {
		a.out = make(mem.BufferSlice, 0, sinkPieces)
	}
	// The lent views are the sink's now, counted as lent (Input.startLend).
	a.out = append(a.out, a.lent...)
	clear(a.lent)
	a.lent = nil
	for i, c := range a.chunks {
		b := a.handOn(c, budget)
		if i == len(a.chunks)-1 {
			b, a.rest = mem.SplitUnsafe(b, a.cur)
		}
		a.out = append(a.out, b)
	}
	// The chunk being filled stays where the reads go (owned by rest now);
	// a full one is the pieces' (splitOff). A message lent up to here has
	// none yet: the next bytes take one.
	if k := len(a.chunks); k > 0 {
		last := a.chunks[k-1]
		clear(a.chunks)
		a.chunks = append(a.chunks[:0], last)
	}
	a.splitOff()
	a.handOut(false)
}

// handOn wraps a chunk of a message in sink mode as a buffer that counts
// against budget (as delivered) until freed.
func (a *Assembler) handOn(c *[]byte, budget *Budget) mem.Buffer {
	var pool mem.BufferPool = msgPool
	if budget.out != nil {
		pool = budget.out
		if !mem.IsBelowBufferPoolingThreshold(cap(*c)) {
			budget.out.held.Add(int64(cap(*c)))
		}
	}
	return mem.NewBuffer(c, pool)
}

// endSink hands the message's last bytes on and readies a for the next.
func (a *Assembler) endSink() {
	if a.in != nil {
		a.in.release(a)
		a.in = nil
	}
	a.handOut(true)
	a.clearMsg()
}

// splitOff moves the bytes of the current chunk that arrived since the last
// split into out, as one view.
func (a *Assembler) splitOff() {
	if a.unsplit > 0 {
		var piece mem.Buffer
		piece, a.rest = mem.SplitUnsafe(a.rest, a.unsplit)
		a.out = append(a.out, piece)
		a.unsplit = 0
	}
	if a.rest != nil && a.rest.Len() == 0 {
		a.rest.Free() // the chunk is the pieces' now: it may be back in the pool soon
		a.rest = nil
		clear(a.chunks)
		a.chunks = a.chunks[:0]
	}
}

// handOut gives the sink the bytes gathered; the slice is reused.
func (a *Assembler) handOut(last bool) {
	a.splitOff()
	if a.pend >= a.pieceBound() {
		a.handAt = min(a.pieceBound()*2, handOutMax)
	}
	a.sink.Data(a.out, last)
	clear(a.out)
	a.out, a.pend = a.out[:0], 0
}

// A sink is handed what has arrived when the reader would wait for more, or
// once it is handOutAt; each piece that reached its bound doubles the next
// one's, up to handOutMax. (A read that fills the message's buffer in place
// brings the next frames with it, so the buffer is seldom empty.) The first
// piece goes on early, so that the backend's transfer overlaps the client's;
// the later ones are large, so that a 6.2 MB frame goes on in 9 sends instead
// of 24: each send wakes the backend, which on a small machine preempts vig
// (`vig bench datapath --quick` at 6.2 MB, medians of 5 alternating runs: 48
// syscalls and 12.0 context switches per request instead of 78 and 12.8, with
// Input's 1 MiB reads; see guessBuf).
const (
	handOutAt  = 256 << 10
	handOutMax = maxChunk
)

// sinkPieces is what a sink's slice of pieces starts with room for: the
// chunks a message has when it is taken (three at most before EarlyAsk) and
// the views split off before a hand-out.
const sinkPieces = 8

// pieceBound is the size at which the piece being gathered goes on.
func (a *Assembler) pieceBound() int { return max(a.handAt, handOutAt) }

// clearMsg readies a for the next message, keeping its settings.
func (a *Assembler) clearMsg() {
	clear(a.chunks)
	*a = Assembler{chunks: a.chunks[:0], inline: a.inline, out: a.out, early: a.early, earlyMin: a.earlyMin, listed: a.listed}
}

// holds reports whether a holds memory of a message in progress: chunks it
// assembles, views of a lent read buffer, or in sink mode the chunk being
// filled and pieces not handed on.
func (a *Assembler) holds() bool {
	return a.held > 0 || a.rest != nil || len(a.out) > 0 || len(a.lent) > 0
}

// Partial reports whether a message is half received.
func (a *Assembler) Partial() bool { return a.pn > 0 }

// Reset drops a half-received message and gives its memory back to budget.
func (a *Assembler) Reset(budget *Budget) {
	if a.in != nil {
		a.in.release(a)
	}
	if a.sink != nil {
		// The chunk being filled is the sink's (rest); the others are handed on.
		if a.rest != nil {
			a.rest.Free()
		}
		a.out.Free()
		clear(a.out)
		a.sink.Drop()
	} else {
		for _, c := range a.chunks {
			msgPool.Put(c)
		}
	}
	a.lent.Free()
	budget.left += a.held
	*a = Assembler{early: a.early, earlyMin: a.earlyMin, out: a.out[:0]}
}

// Held is the buffer capacity the message in progress holds (charged to its
// Budget).
func (a *Assembler) Held() int { return a.held }
