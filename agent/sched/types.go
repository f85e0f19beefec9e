package sched

import (
	"fmt"
	"math"
	"time"
)

// Time is a point on the caller's monotonic clock, in nanoseconds. The
// scheduler never reads a clock: every event carries the time at which it
// happened, so tests drive it with a fake clock and simulations run faster
// than real time.
type Time int64

// Never is a Time later than any real event; it marks "no deadline".
const Never Time = math.MaxInt64

// Add returns t+d, saturating at Never.
func (t Time) Add(d time.Duration) Time {
	if d > 0 && t > Never-Time(d) {
		return Never
	}
	return t + Time(d)
}

// Sub returns the duration t-u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Class orders streams: every waiting Protected request is considered before
// any High one, and every High one before any BestEffort one.
type Class uint8

const (
	Protected Class = iota
	High
	BestEffort
	numClasses
)

var classNames = [numClasses]string{"protected", "high", "best_effort"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// ParseClass parses the configuration spelling of a class
// ("protected", "high", "best_effort").
func ParseClass(s string) (Class, error) {
	for i, n := range classNames {
		if s == n {
			return Class(i), nil
		}
	}
	return 0, fmt.Errorf("unknown class %q (want protected, high or best_effort)", s)
}

// QueueKind is the shape of a stream's waiting queue.
type QueueKind uint8

const (
	// Latest holds at most one waiting request: a newer frame supersedes
	// the waiting older one, which is answered Aborted at once.
	Latest QueueKind = iota
	// FIFO holds up to StreamSpec.Capacity waiting requests in arrival
	// order; an arrival that finds it full is answered ResourceExhausted.
	FIFO
)

func (q QueueKind) String() string {
	switch q {
	case Latest:
		return "latest"
	case FIFO:
		return "fifo"
	}
	return fmt.Sprintf("QueueKind(%d)", uint8(q))
}

// ParseQueueKind parses "latest" or "fifo".
func ParseQueueKind(s string) (QueueKind, error) {
	switch s {
	case "latest":
		return Latest, nil
	case "fifo":
		return FIFO, nil
	}
	return 0, fmt.Errorf("unknown queue %q (want latest or fifo)", s)
}

// Code is the status an Answer carries. The values are the gRPC status code
// numbers, so a caller converts with codes.Code(a.Code) without this package
// importing gRPC.
type Code uint32

const (
	OK                Code = 0
	InvalidArgument   Code = 3
	DeadlineExceeded  Code = 4
	NotFound          Code = 5
	ResourceExhausted Code = 8
	Aborted           Code = 10
	Unavailable       Code = 14
)

func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case InvalidArgument:
		return "INVALID_ARGUMENT"
	case DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case NotFound:
		return "NOT_FOUND"
	case ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case Aborted:
		return "ABORTED"
	case Unavailable:
		return "UNAVAILABLE"
	}
	return fmt.Sprintf("Code(%d)", uint32(c))
}

// Outcome is the terminal outcome of a request, one per counter.
type Outcome uint8

const (
	NoOutcome    Outcome = iota
	Forwarded            // completed by the backend and answered with its result
	Superseded           // replaced in a Latest queue by a newer frame
	LateDropped          // predicted (or, for a queue timeout, certain) to miss its deadline
	Rejected             // queue full, draining, backend unavailable or bad input
	BackendError         // the backend answered with an error
	Cancelled            // the client went away
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"none", "forwarded", "superseded", "late_dropped", "rejected", "backend_error", "cancelled"}

// String returns the metric label spelling of o.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Reason says why a request was answered by the scheduler, precisely enough
// for a status message.
type Reason uint8

const (
	NoReason             Reason = iota
	ReasonSuperseded            // a newer frame of the same stream arrived
	ReasonLate                  // predicted completion is past the freshness deadline
	ReasonQueueTimeout          // Triton `timeout` expired before the request started
	ReasonQueueFull             // FIFO queue at capacity
	ReasonDraining              // the scheduler is draining
	ReasonBackendDown           // the backend is marked unavailable
	ReasonUnknownStream         // no stream of that name and unknown streams are rejected
	ReasonUnknownModel          // the model is not configured
	ReasonModelMismatch         // the stream is configured for another model
	ReasonBadTimeout            // negative Triton timeout
	ReasonCaptureFuture         // capture time ahead of the scheduler's clock
	ReasonCaptureTooOld         // capture time absurdly old (wrong clock domain?)
	ReasonDuplicateToken        // the token is already in flight
	ReasonTableFull             // no request slot left (cannot happen with a valid config)
	numReasons
)

var reasonText = [numReasons]string{
	"",
	"superseded by a newer frame of the same stream",
	"would complete after the stream's freshness deadline",
	"queue timeout expired before the request could start",
	"stream queue is full",
	"vig is draining",
	"backend unavailable",
	"unknown stream",
	"unknown model",
	"stream is configured for another model",
	"negative timeout",
	"capture time is in the future",
	"capture time is absurdly old (check the capture clock domain)",
	"request token already in flight",
	"request table full",
}

// String returns a human-readable explanation of r, suitable for a status
// message.
func (r Reason) String() string {
	if r < numReasons {
		return reasonText[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Request is one inference request as the scheduler sees it. The caller keeps
// the payload; the scheduler only keeps this metadata, keyed by Token.
type Request struct {
	// Token is the caller's handle for the request; it must be unique
	// among requests in flight (an incrementing counter will do).
	Token uint64
	// Stream is the vig_stream parameter; empty means the model name.
	Stream string
	// Model is the requested model name.
	Model string
	// Capture is the frame's capture time on the scheduler's clock; zero
	// means the arrival time.
	Capture Time
	// Priority and Timeout are Triton's own request parameters. They are
	// honoured only for requests without a stream contract (see doc.go).
	Priority    uint64
	HasPriority bool
	Timeout     time.Duration
	// BatchKey says which requests may run as one job (see doc.go,
	// Batching): requests of the same model with the same non-zero key
	// have tensors that the caller can merge along the first dimension
	// (same inputs, datatypes and non-batch dimensions, same requested
	// outputs, same parameters, no shared memory). 0: the request runs
	// alone.
	BatchKey uint64
	// Rows is the number of rows the request carries (its first
	// dimension); 0 means 1. A batch's rows never exceed the model's
	// MaxBatch.
	Rows int
	// SequenceID names the sequence the request belongs to (Triton's
	// sequence_id; a string id is hashed by the caller); 0: none.
	// SequenceStart and SequenceEnd are its sequence_start and
	// sequence_end flags (see Sequences in doc.go).
	SequenceID    uint64
	SequenceStart bool
	SequenceEnd   bool

	variant bool // set by the front on a frame of a logical model (variant.go)
}

// ActionKind says what the caller must do with an Action.
type ActionKind uint8

const (
	// Dispatch: send the request to the backend now. The caller must call
	// Complete when the backend answers (or fails).
	Dispatch ActionKind = iota + 1
	// Answer: reply to the client with Code now; the request is finished.
	Answer
)

func (k ActionKind) String() string {
	switch k {
	case Dispatch:
		return "dispatch"
	case Answer:
		return "answer"
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one decision for the caller to carry out.
type Action struct {
	Kind  ActionKind
	Token uint64
	// Stream is the index of the request's stream in Snapshot.Streams,
	// or -1 when the request matched no stream.
	Stream int
	// Slot is the backend slot assigned to a Dispatch.
	Slot int
	// Busy is the number of jobs already running when a Dispatch was
	// decided: the occupancy under which its execution time is learnt.
	Busy int
	// Capture is the capture time a Dispatch was scheduled with (the
	// request's, clamped to its arrival), and Waited its time in the
	// queue: with the delivery time they give the caller end-to-end
	// latency and age for its histograms.
	Capture Time
	Waited  time.Duration
	// Deadline is a Dispatch's freshness deadline (capture + max_age), or
	// Never under the default contract: what the caller hands on to the
	// backend as its timeout (see Deadlines handed on in doc.go).
	Deadline Time
	// Code, Outcome and Reason describe an Answer.
	Code    Code
	Outcome Outcome
	Reason  Reason
	// Probe marks a Dispatch started although its prediction missed, to
	// re-measure a model whose estimate starves a stream (see doc.go).
	Probe bool
	// Budget marks a Dispatch started on a min_rate_hz budget although it
	// blocks protected frames.
	Budget bool
	// Queued marks a pipelined Dispatch: the request is committed behind
	// the job running on Slot and waits in the backend's queue; Start is
	// its predicted start (the running job's predicted end). On more than
	// one slot the backend starts it on whichever slot frees first, and
	// the scheduler follows. For a Dispatch to a free slot Queued is false
	// and Start is now. The caller sends both kinds at once, never holds a
	// Queued one back, and calls Complete for each.
	Queued bool
	Start  Time
	// Batch is set on the Dispatches of a batch: the token of its first
	// request (its lead). A batch's Dispatches come together, the lead's
	// first, each with the same Batch, Slot, Start and Queued, and
	// BatchSize the number of requests in it. The caller sends them to
	// the backend as one request and calls Complete once, with the lead's
	// token, when that answers: every request of the batch is then
	// finished. Zero for a request dispatched alone.
	Batch     uint64
	BatchSize int
	// Model is the model a Dispatch runs when it is not the request's: the
	// variant of a logical model chosen for it (ModelSpec.Variants). The
	// caller sends the request under this name. Empty otherwise.
	Model string
}
