package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/h2"
	"github.com/vig-edge/vig/wire"
)

// Cut-through: a large ModelInfer request is governed and forwarded while it
// arrives, not once it is all in.
//
// Store-and-forward costs a large request the time its bytes take to cross
// the client's leg before any of them crosses the backend's: at 6 MB on
// loopback, about a millisecond that a proxy streaming the bytes does not
// add. So once the head of a request of at least cutThroughMin bytes has
// arrived (every field before raw_input_contents, which protobuf encoders
// write last: wire.ParseInferHead), vig submits its Call from the head. If
// the scheduler starts it while the tensor bytes still arrive, the backend
// stream opens with the message's final length (vig's own parameters taken
// out of the head) and the bytes follow as they arrive, a read's worth at a
// time; if it waits, the bytes gather meanwhile and follow it when it starts.
//
// What is forwarded has been checked first, so the backend is never sent a
// whole request vig would refuse: the bytes after the head must be
// raw_input_contents entries, one per input not in shared memory
// (wire.RawScan, Triton's rule). A request that is
// not is answered INVALID_ARGUMENT, and a backend stream that had started is
// reset before its last byte. If the client leaves or ends the stream inside
// the message, the call is cancelled and the backend stream reset, as for any
// started call. A call whose backend stream the backend did not process
// (GOAWAY) is not started again, since the bytes it was sent are gone: it is
// answered UNAVAILABLE, which a client may retry. A started call whose bytes
// stop arriving for bodyStall is answered DEADLINE_EXCEEDED: a client that
// stalls inside its request must not hold the backend's slot.
//
// Only uncompressed ModelInfer requests to a gRPC backend that vig does not
// compress for are taken this way; requests naming shared memory are small
// and take the usual path, as does a request whose rest vig has already read
// when its head is in (h2 does not offer it): it goes on whole, in one send.

// cutThroughMin is the smallest request forwarded as it arrives. Below it the
// whole request is normally in one read or two anyway.
var cutThroughMin = 128 << 10

// bodyStall: a started call whose request bytes stop arriving for this long
// is answered DEADLINE_EXCEEDED and its backend stream reset, so that a
// client that stalls inside a request cannot hold a backend slot with it
// (nanoseconds; atomic for the tests that shorten it).
var bodyStall atomic.Int64

func init() { bodyStall.Store(int64(2 * time.Second)) }

func stallBound() time.Duration { return time.Duration(bodyStall.Load()) }

// bodyPipe carries the tensor bytes of a request forwarded as it arrives,
// from the client connection's reader (an h2.Sink) to the call's backend
// stream once the call starts.
type bodyPipe struct {
	s    *sstream
	call *Call
	head int // where the head ends in the request as received
	size int // the request's length as forwarded (vig's parameters out)

	// Reader goroutine only.
	scan    wire.RawScan
	started bool // the head was handed over and the call submitted

	mu       sync.Mutex
	buf      mem.BufferSlice // arrived, not yet forwarded
	complete bool            // every byte has arrived (the last is in buf or sent)
	send     func(b mem.BufferSlice, end bool) bool
	closed   bool // the call was answered, or the message will not complete
	pieces   int  // pieces arrived after the first
	seen     int  // pieces when the stall watch last looked
}

// Early implements h2.Early: a large ModelInfer request may be taken while it
// arrives (the gateway sets h2.ServerConfig.EarlyMin only when its backend is
// one this works for).
func (s *sstream) Early(got mem.BufferSlice, total int, compressed bool) (h2.Sink, bool) {
	if s.kind != kindInfer || s.gotMsg || compressed {
		return nil, false
	}
	call := s.c.g.NewCall()
	head, ok := call.Header.ParseInferHead(got, total)
	if !ok || call.Header.Shm || s.c.g.batching(call.Header.Model) || s.c.g.logicalModel(call.Header.Model) {
		// A frame of a batching model arrives whole instead, so that it
		// can join a batch: what batching saves on the accelerator is
		// worth more than overlapping its transfers. A frame of a logical
		// model arrives whole too: it is sent renamed (wire.RenameModel),
		// which needs the message, not its head.
		call.release()
		return nil, !ok // the head may not be all there yet
	}
	s.gotMsg = true
	p := &bodyPipe{s: s, call: call, head: head}
	p.scan.Start(&call.Header, head)
	return p, false
}

// Data implements h2.Sink: the next bytes of the request, from the reader.
func (p *bodyPipe) Data(b mem.BufferSlice, last bool) {
	if !p.started {
		p.start(b, last)
		return
	}
	p.forward(b, last)
}

// start takes the head off the first bytes, as the call's message, and
// submits the call with the rest waiting for it.
func (p *bodyPipe) start(b mem.BufferSlice, last bool) {
	p.started = true
	s, call := p.s, p.call
	s.m.Received(call.Header.Size)
	head := wire.Span{Len: p.head}.Slice(b)
	rest := wire.Span{Off: p.head, Len: b.Len() - p.head}.Slice(b)
	b.Free()
	call.Msg = head
	if call.Header.HasVigParams() {
		stripped := call.Header.StripVig(head) // the header's views stay valid: the views hold the buffers
		head.Free()
		call.Msg = stripped
	}
	p.size = call.Header.Size - p.head + call.Msg.Len()
	if err := p.check(rest, last); err != nil {
		rest.Free()
		call.release()
		s.fail(err)
		return
	}
	p.buf, p.complete = rest, last
	call.body = p
	s.c.submit(s, call, nil, false)
}

// check scans the bytes about to be forwarded (reader goroutine).
func (p *bodyPipe) check(b mem.BufferSlice, last bool) error {
	for _, x := range b {
		if err := p.scan.Scan(x.ReadOnlyData()); err != nil {
			return status.Errorf(codes.InvalidArgument, "ModelInfer: %v (vig forwards requests of %d KiB and more as they arrive)", err, cutThroughMin>>10)
		}
	}
	if last {
		if err := p.scan.End(); err != nil {
			return status.Errorf(codes.InvalidArgument, "ModelInfer: %v", err)
		}
	}
	return nil
}

// forward passes more bytes on: to the backend stream once the call has
// started, else to wait with the others.
func (p *bodyPipe) forward(b mem.BufferSlice, last bool) {
	if err := p.check(b, last); err != nil {
		b.Free()
		p.mu.Lock()
		closed := p.closed
		p.close()
		p.mu.Unlock()
		if !closed {
			p.s.fail(err) // cancels the call: its backend stream, if any, is reset
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pieces++
	switch {
	case p.closed:
		b.Free()
	case p.send != nil:
		p.complete = last
		if !p.send(b, last) {
			p.send = nil // the stream has ended; the call is finished there
		}
	default:
		p.buf = append(p.buf, b...)
		p.complete = last
	}
}

// Drop implements h2.Sink: the request will not be complete. The stream's
// handler is told (Failed or Cancelled) and cancels the call.
func (p *bodyPipe) Drop() {
	p.mu.Lock()
	p.close()
	p.mu.Unlock()
	if !p.started {
		p.started = true
		p.call.release() // never submitted
	}
}

// take hands over the bytes that arrived so far, to go with the request's
// start, and whether they end it; ok is false when the request will not be
// complete (the call is being cancelled).
func (p *bodyPipe) take() (b mem.BufferSlice, end, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false, false
	}
	b, p.buf = p.buf, nil
	return b, p.complete, true
}

// attach is the call's start on a gRPC backend, after take: the bytes that
// arrived since go to send now, the rest as they arrive. It reports false
// when the request will not be complete (the call is being cancelled) or was
// attached before.
func (p *bodyPipe) attach(send func(b mem.BufferSlice, end bool) bool) bool {
	p.mu.Lock()
	if p.closed || p.send != nil {
		p.mu.Unlock()
		return false
	}
	buf := p.buf
	p.buf = nil
	if len(buf) > 0 || p.complete {
		if !send(buf, p.complete) || p.complete {
			p.mu.Unlock()
			return true
		}
	}
	p.send = send
	p.seen = p.pieces
	p.mu.Unlock()
	p.s.c.g.stalls.add(p) // outside mu: the watch takes it inside its own
	return true
}

// watched is the stall watch's look at a started call waiting for its
// bytes, once a bound after the last: keep says it goes on waiting (bytes
// arrived meanwhile), stalled that none did, and the pipe is closed.
func (p *bodyPipe) watched() (keep, stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed || p.complete:
		return false, false
	case p.pieces != p.seen:
		p.seen = p.pieces
		return true, false
	}
	p.close()
	return false, true
}

// stalled answers the client of a call whose bytes stopped arriving, and
// cancels the call.
func (p *bodyPipe) stalled() {
	p.s.fail(status.Errorf(codes.DeadlineExceeded, "the request's bytes stopped arriving for %v while its call held a backend slot (vig forwards requests of %d KiB and more as they arrive): send each request whole, without pausing inside it", stallBound(), cutThroughMin>>10))
}

// close frees what waits and stops the flow. Called with mu held.
func (p *bodyPipe) close() {
	p.closed = true
	p.send = nil
	p.buf.Free()
	p.buf = nil
}

// stallWatch looks at the started calls whose request bytes still arrive,
// with one timer for all of them as expiry does for calls: a pipe is watched
// from its attach, in order (the bound is the same for all, so a pipe
// attached later is due later). The timer is not stopped when a pipe ends;
// when it fires it looks at the pipes due: ended ones leave, ones that got
// bytes meanwhile go to the back, due a bound from now, the others fail. It
// then waits for the next one due, but never less than half a bound, so
// under steady traffic it fires twice a bound, not once per call, and a
// stalled call is answered between one and one and a half bounds after its
// last bytes. Starting a call costs an append and no timer operation (a timer
// armed per request woke an idle thread of the runtime, wakeNetPoller, on
// each one: a futex wake and two context switches), and an idle vig has no
// timer armed.
type stallWatch struct {
	mu    sync.Mutex
	due   []stallDue // by due time
	timer *time.Timer
	armed bool
	done  bool // stopped: the gateway is closing
	fires int  // how often the timer fired (a test counts them)
}

type stallDue struct {
	p  *bodyPipe
	at time.Time
}

// add watches p from now.
func (w *stallWatch) add(p *bodyPipe) {
	bound := stallBound()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.due = append(w.due, stallDue{p, time.Now().Add(bound)})
	if !w.armed {
		w.arm(bound)
	}
}

// arm sets the timer to fire in d. Called with mu held.
func (w *stallWatch) arm(d time.Duration) {
	w.armed = true
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.fire)
		return
	}
	w.timer.Reset(d)
}

// fire looks at the pipes due and re-arms at the next one, or goes idle.
func (w *stallWatch) fire() {
	var stalled []*bodyPipe
	w.mu.Lock()
	w.fires++
	now, bound := time.Now(), stallBound()
	n := len(w.due)
	i := 0
	for ; i < n && !w.due[i].at.After(now); i++ {
		p := w.due[i].p
		switch keep, stuck := p.watched(); {
		case keep:
			w.due = append(w.due, stallDue{p, now.Add(bound)})
		case stuck:
			stalled = append(stalled, p)
		}
	}
	rest := copy(w.due, w.due[i:])
	clear(w.due[rest:])
	w.due = w.due[:rest]
	w.armed = false
	if len(w.due) > 0 && !w.done {
		w.arm(max(w.due[0].at.Sub(now), bound/2))
	}
	w.mu.Unlock()
	for _, p := range stalled {
		p.stalled()
	}
}

// stop ends the watch (the gateway is closing; its calls end with it).
func (w *stallWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
	clear(w.due)
	w.due = nil
}

// release ends the pipe with its call (the call is answered).
func (p *bodyPipe) release() {
	p.mu.Lock()
	p.close()
	p.mu.Unlock()
}
