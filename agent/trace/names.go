package trace

import (
	"strconv"

	"github.com/vig-edge/vig/agent/sched"
)

// Outcomes and reasons are named as sched names them. gRPC codes by their
// names in the protocol (sched names only those it answers with);
// TestNamesMatchSched holds them to sched's.

const (
	outcomeForwarded   = uint8(sched.Forwarded)
	outcomeSuperseded  = uint8(sched.Superseded)
	outcomeLateDropped = uint8(sched.LateDropped)
)

// streamName is stream s's name in win, "" for no stream.
func streamName(win *Window, s int32) string {
	if s >= 0 && int(s) < len(win.Streams) {
		return win.Streams[s].Name
	}
	return ""
}

// appendFrameLabel appends "stream f<token>" ("f<token>" for no stream),
// the name escaped by esc.
func appendFrameLabel(b []byte, win *Window, stream int32, token uint64, esc func([]byte, string) []byte) []byte {
	if n := streamName(win, stream); n != "" {
		b = esc(b, n)
		b = append(b, ' ')
	}
	b = append(b, 'f')
	return strconv.AppendUint(b, token, 10)
}

// outcomeCnames colour a frame's life in chrome://tracing by its outcome
// (Perfetto colours by name), indexed by sched.Outcome.
var outcomeCnames = [...]string{"grey", "good", "grey", "terrible", "bad", "bad", "yellow"}

var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func outcomeName(o uint8) string { return sched.Outcome(o).String() }

func outcomeCname(o uint8) string {
	if int(o) < len(outcomeCnames) {
		return outcomeCnames[o]
	}
	return "grey"
}

func reasonText(r uint8) string { return sched.Reason(r).String() }

func codeName(c uint8) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE_" + strconv.Itoa(int(c))
}
