package gateway

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// deadlineStatus corrects the status of a call answered after its deadline: a
// gRPC backend whose grpc-timeout fires resets the stream with CANCEL, which
// reads as CANCELLED, but the client is owed DEADLINE_EXCEEDED (what it would
// have got from the backend directly). deadline and now are on the gateway's
// clock; deadline 0 means none.
func deadlineStatus(err error, deadline, now int64) error {
	if deadline == 0 || now < deadline || status.Code(err) != codes.Canceled {
		return err
	}
	return status.Errorf(codes.DeadlineExceeded, "deadline exceeded (%s)", status.Convert(err).Message())
}
