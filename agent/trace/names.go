package trace

import "strconv"

// The names of sched's outcomes, reasons and gRPC codes, kept here because
// sched reports to this package and cannot be imported by it;
// TestNamesMatchSched holds them to sched's own.

const outcomeForwarded = 1

var outcomeNames = [...]string{"none", "forwarded", "superseded", "late_dropped", "rejected", "backend_error", "cancelled"}

// outcomeCnames colour a frame's life in chrome://tracing by its outcome
// (Perfetto colours by name).
var outcomeCnames = [...]string{"grey", "good", "grey", "terrible", "bad", "bad", "yellow"}

var reasonTexts = [...]string{
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

var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func outcomeName(o uint8) string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome " + strconv.Itoa(int(o))
}

func outcomeCname(o uint8) string {
	if int(o) < len(outcomeCnames) {
		return outcomeCnames[o]
	}
	return "grey"
}

func reasonText(r uint8) string {
	if int(r) < len(reasonTexts) {
		return reasonTexts[r]
	}
	return "reason " + strconv.Itoa(int(r))
}

func codeName(c uint8) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE_" + strconv.Itoa(int(c))
}
