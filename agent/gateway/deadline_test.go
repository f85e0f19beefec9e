package gateway

import (
	"errors"
	"testing"

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
