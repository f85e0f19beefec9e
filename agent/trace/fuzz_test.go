package trace

import (
	"bytes"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
)

// fuzzWindow builds a window from b: five bytes an event (kind, token,
// stream, accelerator and slot, time step and flags), events in any order
// the recorder could never produce included (a completion before its
// dispatch, a token reused unanswered, an answer twice).
func fuzzWindow(b []byte) *Window {
	w := &Window{
		Meta: Meta{Streams: []Stream{{Name: "a"}, {Name: "<b>"}, {Name: "c"}},
			Accels: []Accel{{"gpu", 2}, {"dla", 1}}, Models: []string{"m", "v"}},
		Start: t0,
	}
	now := t0
	for ; len(b) >= 5; b = b[5:] {
		now += int64(b[4]&0x1f) * ms / 4
		e := Event{Kind: Kind(b[0]%uint8(numKinds-1)) + 1, Time: now, Token: uint64(b[1] % 16),
			Stream: int32(b[2]%5) - 1, For: int32(b[2]>>4%4) - 1, Accel: int16(b[3]%4) - 1, Slot: int16(b[3] >> 4 % 3),
			Waiting: int32(b[2] >> 3), Busy: int16(b[3] >> 6), Variant: int16(b[4]>>5%3) - 1, Queued: b[4]&0x80 != 0,
			Code: b[1] >> 4, Outcome: b[2] % 8, Reason: b[3] % 16}
		switch e.Kind {
		case Arrive:
			e.Capture = now - int64(b[4]>>5)*ms
			e.Deadline = now + 10*ms
			e.ID = "id"
		case Dispatch:
			if b[4]&0x40 != 0 {
				e.Batch, e.BatchSize = uint64(b[1]>>4%16), int16(b[2]%4)+1
			}
		}
		w.Events = append(w.Events, e)
	}
	w.End = now + ms
	return w
}

// FuzzLayout: whatever the events, the file is JSON of the trace-event
// format with each track in time order, no overlap on a slot and proper
// nesting on a lane, and the SVG is drawn.
func FuzzLayout(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0, 4, 2, 1, 1, 0, 4, 3, 1, 1, 0, 8, 4, 1, 1, 0, 1})
	f.Add([]byte{0, 1, 0, 0, 4, 0, 2, 0, 0, 4, 2, 1, 0, 0, 0x44, 2, 2, 0, 0, 0x40, 3, 1, 0, 0, 8, 4, 1, 0, 0, 0, 4, 2, 0, 0, 0})
	f.Add([]byte{3, 5, 1, 1, 1, 4, 5, 1, 1, 1, 0, 5, 1, 1, 1, 0, 5, 2, 1, 1, 1, 5, 2, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		w := fuzzWindow(b)
		var out bytes.Buffer
		if err := WriteChrome(&out, w); err != nil {
			t.Fatal(err)
		}
		checkTracks(t, parseChrome(t, out.Bytes()))
		if err := WriteSVG(&out, w); err != nil {
			t.Fatal(err)
		}
	})
}
