package gateway

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestDeadlineStatus(t *testing.T) {
	cancelled := status.Error(codes.Canceled, "backend cancelled the stream")
	for _, tc := range []struct {
		name          string
		err           error
		deadline, now int64
		want          codes.Code
	}{
		{"cancelled after the deadline", cancelled, 100, 100, codes.DeadlineExceeded},
		{"cancelled before the deadline", cancelled, 100, 99, codes.Canceled},
		{"cancelled, no deadline", cancelled, 0, 1 << 40, codes.Canceled},
		{"other code after the deadline", status.Error(codes.Unavailable, "down"), 100, 200, codes.Unavailable},
		{"OK after the deadline", nil, 100, 200, codes.OK},
		{"plain error", errors.New("x"), 100, 200, codes.Unknown},
	} {
		if got := status.Code(deadlineStatus(tc.err, tc.deadline, tc.now)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// grpc-timeout: a value beyond a Duration is clamped as grpc-go clamps it (it
// used to overflow into an instant DEADLINE_EXCEEDED), and what vig sends on
// has at most 8 digits whatever the deadline.
func TestGRPCTimeoutClamp(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"99999999H", maxTimeout},
		{"99999999M", maxTimeout},
		{"1000000H", 1000000 * time.Hour},
		{"1S", time.Second},
		{"5m", 5 * time.Millisecond},
	} {
		d, ok := parseTimeout(tc.in)
		if !ok || d != tc.want {
			t.Errorf("parseTimeout(%q) = %v %v, want %v", tc.in, d, ok, tc.want)
		}
	}
	for _, d := range []time.Duration{1, time.Millisecond, 99 * time.Second, 3 * time.Hour, 1000 * time.Hour, maxTimeout} {
		v := formatTimeout(d)
		back, ok := parseTimeout(v)
		if !ok || len(v) > 9 || back < d {
			t.Errorf("formatTimeout(%v) = %q (read back %v %v): want at most 8 digits and no earlier deadline", d, v, back, ok)
		}
	}
}
