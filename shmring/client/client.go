// Package client is the sensor side of vig's shared-memory ring: a small API
// for programs that hand camera (or other sensor) frames to vig without
// copying them.
//
//	c, err := client.Dial("", client.Options{})
//	f, err := c.Loan()                   // a frame buffer inside shared memory
//	n := capture(f.Bytes())              // write the frame once, in place
//	tag, err := c.Submit(f, &client.Request{Stream: "detector", Model: "det",
//		Frame: seq, CaptureNs: t, Len: n})
//	var r client.Result
//	err = c.Next(&r)                     // the result (any submitted tag)
//	use(r.Status, r.Payload())
//	c.Release(&r)                        // hand the result buffer back
//
// Loan and Submit must be called from one goroutine at a time, and Next from
// one goroutine at a time; the two groups may run concurrently (a capture loop
// and a result loop). Release and Return may be called from any goroutine.
package client

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/vig-edge/vig/shmring"
)

// Options configures a client.
type Options struct {
	// Config sizes the rings; the zero value is shmring.DefaultConfig. Size the
	// request slots for the largest frame.
	Config shmring.Config
	// Backend picks memfd (default where available) or a /dev/shm file.
	// shmring.BackendShmKey keeps the /dev/shm file linked under a key so that
	// vig can hand the frames to a backend that maps Triton system shared memory
	// by reference: the frame is then read in place by the backend and crosses
	// no socket (vig logs which path the session takes).
	Backend shmring.Backend
	// Spin is how Loan and Next spin before sleeping on their doorbells.
	Spin shmring.Spin
	// Timeout bounds the handshake (2 s by default).
	Timeout time.Duration
	Logger  *slog.Logger
}

// ErrTooManyOutstanding is returned by Submit when as many requests are
// unanswered as the response ring has descriptors or payload slots: consume
// (and Release) results with Next first.
var ErrTooManyOutstanding = errors.New("shmring/client: too many requests awaiting results")

// Client is a connection to vig over a shared-memory ring.
type Client struct {
	s           *shmring.Session
	frames      []Frame
	nextTag     uint64
	outstanding atomic.Int64
	maxOut      int64
	d           shmring.Descriptor // Submit's scratch, reused to avoid allocation
}

// Dial connects to vig at addr (shmring.DefaultAddress when empty).
func Dial(addr string, opts Options) (*Client, error) {
	s, err := shmring.Dial(addr, shmring.DialOptions{
		Config: opts.Config, Backend: opts.Backend, Spin: opts.Spin, Timeout: opts.Timeout, Logger: opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	return newClient(s), nil
}

// FromSession wraps an established session.
func FromSession(s *shmring.Session) *Client { return newClient(s) }

func newClient(s *shmring.Session) *Client {
	l := s.Region().Layout()
	// vig answers without waiting, so a request may only be in flight while
	// its answer is sure to find a response descriptor and a payload slot.
	rl := l.Rings[shmring.ResponseRing]
	c := &Client{s: s, maxOut: int64(min(rl.Descriptors, rl.Slots))}
	c.frames = make([]Frame, l.Rings[shmring.RequestRing].Slots)
	for i := range c.frames {
		c.frames[i] = Frame{c: c, slot: uint32(i)}
	}
	return c
}

// Frame is a loaned payload slot in shared memory.
type Frame struct {
	c      *Client
	slot   uint32
	buf    []byte
	loaned atomic.Bool
}

// Bytes is the whole slot; write the frame here, then Submit with its length.
func (f *Frame) Bytes() []byte { return f.buf }

// Loan waits for a free frame buffer. Buffers come back when vig has answered
// (or released) the request that carried them.
func (c *Client) Loan() (*Frame, error) {
	var slot uint32
	var buf []byte
	err := c.s.Guard(func() (err error) { slot, buf, err = c.s.Requests.Loan(); return err })
	if err != nil {
		return nil, err
	}
	return c.loaned(slot, buf), nil
}

// TryLoan is Loan without waiting; it returns shmring.ErrFull when all frame
// buffers are in use.
func (c *Client) TryLoan() (*Frame, error) {
	var slot uint32
	var buf []byte
	err := c.s.Guard(func() (err error) { slot, buf, err = c.s.Requests.TryLoan(); return err })
	if err != nil {
		return nil, err
	}
	return c.loaned(slot, buf), nil
}

func (c *Client) loaned(slot uint32, buf []byte) *Frame {
	f := &c.frames[slot]
	f.buf = buf
	f.loaned.Store(true)
	return f
}

// Return gives back a loaned frame that will not be submitted.
func (c *Client) Return(f *Frame) {
	if f != nil && f.c == c && f.loaned.CompareAndSwap(true, false) {
		c.s.Guard(func() error { c.s.Requests.Unloan(f.slot); return nil })
	}
}

// Request describes a frame submitted for inference.
type Request struct {
	Stream    string // vig stream name (defaults to the model name in vig)
	Model     string
	Frame     uint64 // frame number
	CaptureNs int64  // capture time, in the clock vig is configured for
	Len       int    // bytes of the frame written at the start of Frame.Bytes()
	// Tensors describes the payload; with none, vig treats it as one raw input.
	NumTensors int
	Tensors    [shmring.MaxTensors]shmring.Tensor
}

// Submit posts a request, waiting for ring space if needed. f may be nil for a
// request without payload. It returns the tag that the result will carry.
func (c *Client) Submit(f *Frame, r *Request) (uint64, error) {
	if c.outstanding.Load() >= c.maxOut {
		return 0, ErrTooManyOutstanding
	}
	c.nextTag++
	d := &c.d
	*d = shmring.Descriptor{
		Tag: c.nextTag, Frame: r.Frame, CaptureNs: r.CaptureNs, Slot: shmring.NoSlot,
		Stream: r.Stream, Model: r.Model, NumTensors: r.NumTensors, Tensors: r.Tensors,
	}
	if f != nil {
		if f.c != c || !f.loaned.Load() {
			return 0, fmt.Errorf("shmring/client: frame %d is not loaned", f.slot)
		}
		if r.Len < 0 || r.Len > len(f.buf) {
			return 0, fmt.Errorf("shmring/client: frame length %d outside the %d-byte buffer", r.Len, len(f.buf))
		}
		d.Slot, d.PayloadLen = f.slot, uint64(r.Len)
	}
	c.outstanding.Add(1)
	if err := c.s.Guard(func() error { return c.s.Requests.Post(d) }); err != nil {
		c.outstanding.Add(-1)
		return 0, err
	}
	if f != nil {
		f.loaned.Store(false) // vig owns it until it answers
	}
	return d.Tag, nil
}

// Result is vig's answer to one request. Its payload is a view into shared
// memory, valid until Release.
type Result struct {
	shmring.Descriptor
	c *Client
}

// Payload is the result's bytes in place.
func (r *Result) Payload() []byte {
	if r.c == nil {
		return nil
	}
	return r.c.s.Responses.Payload(&r.Descriptor)
}

// NumOutputs is the number of output tensors the result carries (tensor
// records: name, datatype, shape and bytes each).
func (r *Result) NumOutputs() int { return r.NumTensors }

// Output returns the i-th output tensor's record and its bytes, in place in
// shared memory (valid until Release). vig writes one record per output of the
// model, in the order the backend answered them.
func (r *Result) Output(i int) (*shmring.Tensor, []byte) {
	if i < 0 || i >= r.NumTensors {
		return nil, nil
	}
	t := &r.Tensors[i]
	p := r.Payload()
	// Decoding checked offset+length against the payload; a result without a
	// payload (an error) has no tensors.
	if t.Offset > uint64(len(p)) || t.Length > uint64(len(p))-t.Offset {
		return t, nil
	}
	return t, p[t.Offset : t.Offset+t.Length : t.Offset+t.Length]
}

// Err is nil for StatusOK and describes any other status.
func (r *Result) Err() error {
	if r.Status == shmring.StatusOK {
		return nil
	}
	return fmt.Errorf("vig answered %v: %s", r.Status, r.Message)
}

// Next waits for the next result, whatever its tag (vig answers superseded
// frames early, so results may come out of order).
func (c *Client) Next(r *Result) error {
	for {
		err := c.s.Guard(func() error { return c.s.Responses.Next(&r.Descriptor) })
		if errors.Is(err, shmring.ErrBadDescriptor) {
			// A malformed answer still answered something; skip it rather
			// than wedge the loop.
			c.outstanding.Add(-1)
			continue
		}
		if err != nil {
			return err
		}
		c.outstanding.Add(-1)
		r.c = c
		return nil
	}
}

// Release hands a result's payload buffer back to vig.
func (c *Client) Release(r *Result) {
	if r.c == c && r.Slot != shmring.NoSlot {
		c.s.Guard(func() error { c.s.Responses.Release(r.Slot); return nil })
	}
	r.c = nil
}

// Outstanding is the number of submitted requests not yet answered.
func (c *Client) Outstanding() int { return int(c.outstanding.Load()) }

// Peer is vig's identity from SO_PEERCRED.
func (c *Client) Peer() shmring.PeerCred { return c.s.Peer() }

// Session is the underlying ring session.
func (c *Client) Session() *shmring.Session { return c.s }

// Done is closed when the session ends (vig went away or Close).
func (c *Client) Done() <-chan struct{} { return c.s.Done() }

// Close ends the session and unmaps the region.
func (c *Client) Close() error { return c.s.Close() }
