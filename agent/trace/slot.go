package trace

// idInline is the longest Triton request id the ring keeps; a longer one is
// cut to its first idInline bytes (a UUID takes 36).
const idInline = 64

// slot is one entry of the ring: an Event without its ID string, and the id
// inline. It holds no pointer, so the garbage collector never scans the ring,
// and recording never allocates.
type slot struct {
	Time      int64
	Token     uint64
	Batch     uint64
	Capture   int64
	Deadline  int64
	Stream    int32
	For       int32
	Waiting   int32
	Accel     int16
	Slot      int16
	Busy      int16
	BatchSize int16
	Variant   int16
	Kind      Kind
	Queued    bool
	Code      uint8
	Outcome   uint8
	Reason    uint8
	idLen     uint8
	id        [idInline]byte
}

// put fills s with e and id.
func (s *slot) put(e *Event, id []byte) {
	*s = slot{Time: e.Time, Token: e.Token, Batch: e.Batch, Capture: e.Capture, Deadline: e.Deadline,
		Stream: e.Stream, For: e.For, Waiting: e.Waiting, Accel: e.Accel, Slot: e.Slot, Busy: e.Busy,
		BatchSize: e.BatchSize, Variant: e.Variant, Kind: e.Kind, Queued: e.Queued, Code: e.Code,
		Outcome: e.Outcome, Reason: e.Reason}
	s.idLen = uint8(copy(s.id[:], id))
}

// event returns the Event s holds (its ID a new string).
func (s *slot) event() Event {
	e := Event{Time: s.Time, Token: s.Token, Batch: s.Batch, Capture: s.Capture, Deadline: s.Deadline,
		Stream: s.Stream, For: s.For, Waiting: s.Waiting, Accel: s.Accel, Slot: s.Slot, Busy: s.Busy,
		BatchSize: s.BatchSize, Variant: s.Variant, Kind: s.Kind, Queued: s.Queued, Code: s.Code,
		Outcome: s.Outcome, Reason: s.Reason}
	if s.idLen > 0 {
		e.ID = string(s.id[:s.idLen])
	}
	return e
}
