// Package trace records what vig's scheduler decides, frame by frame, while
// someone asks for it, and draws a window of it: as Chrome trace-event JSON
// (ui.perfetto.dev, chrome://tracing) and as an SVG timeline.
package trace

// Kind is what happened to a frame.
type Kind uint8

const (
	// Arrive: vig accepted the frame (Token, Stream, Capture, Deadline, ID).
	Arrive Kind = iota + 1
	// Defer: admission held the waiting frame back for another stream's
	// frame (For), recorded once per frame and stream it waits for.
	Defer
	// Dispatch: the frame was sent to the backend (Accel, Slot, Queued,
	// Batch, BatchSize, Variant).
	Dispatch
	// Complete: the backend answered the frame's job (Code: its status).
	Complete
	// Answer: vig answered the client; the frame's one terminal event
	// (Code, Outcome, Reason).
	Answer
	numKinds
)

var kindNames = [numKinds]string{"", "arrive", "defer", "dispatch", "complete", "answer"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "kind?"
}

// Event is one record of the ring: fixed-size, so that recording never
// allocates. Indexes refer to the Window's Meta.
type Event struct {
	Time    int64 // CLOCK_MONOTONIC, ns
	Token   uint64
	Batch   uint64 // Dispatch of a batch: its lead's token; 0 alone
	Capture int64  // Arrive: the frame's capture time (monotonic ns)
	// Deadline is Arrive's freshness deadline (capture + max_age), or
	// math.MaxInt64 under the default contract.
	Deadline int64
	ID       string // Arrive: Triton's request id, "" when the client gave none
	Stream   int32  // index in Meta.Streams; -1: the frame matched no stream
	For      int32  // Defer: the stream it was held back for; -1 unknown
	Waiting  int32  // frames waiting in vig after the event
	Accel    int16  // Dispatch, Complete: index in Meta.Accels; -1 none
	Slot     int16  // Dispatch, Complete: slot within the accelerator
	Busy     int16  // jobs running on Accel after the event (Dispatch, Complete)
	// BatchSize is a batch Dispatch's number of frames; 0 or 1 alone.
	BatchSize int16
	// Variant is a Dispatch's model when it is not the frame's own (a
	// logical model's variant): index in Meta.Models; -1 otherwise.
	Variant int16
	Kind    Kind
	Queued  bool  // Dispatch: committed behind the job running on Slot
	Code    uint8 // Complete, Answer: the gRPC status code
	Outcome uint8 // Answer: sched.Outcome
	Reason  uint8 // Answer: sched.Reason
}

// Meta names what Events index.
type Meta struct {
	Streams []Stream
	Accels  []Accel
	Models  []string
}

// Stream is one of vig's streams (Snapshot order).
type Stream struct {
	Name  string
	Model string
	Class string // protected, high, best_effort
}

// Accel is one accelerator and its slots.
type Accel struct {
	Name  string
	Slots int
}

// Window is the events of a span of time, in time order.
type Window struct {
	Meta
	Start, End int64 // CLOCK_MONOTONIC ns
	// WallStart is Start on the wall clock (Unix ns), for the file's name
	// and to match Triton's own trace.
	WallStart int64
	Events    []Event
	// Dropped counts the events of the span the ring no longer held.
	Dropped uint64
}
