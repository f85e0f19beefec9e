package gateway_test

// Fault injection on the backend side of the gateway (issue 15, item 1): a backend
// that accepts a call and never answers it, not even when vig cancels it.

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// hangingProbe makes the probe hang every call whose x-probe-id is "hang" until the
// test ends, whatever happens to its context (a wedged accelerator), and answer the
// others at once. It returns how many hung calls saw their context end (vig
// cancelled them on the backend).
func hangingProbe(t *testing.T, p *probe) *atomic.Int64 {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) }) // runs before the probe stops (cleanups are LIFO)
	var cancelled atomic.Int64
	p.setOnCall(func(ss grpc.ServerStream, method string, req []byte) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if first(md, "x-probe-id") == "hang" {
			select {
			case <-ss.Context().Done():
				cancelled.Add(1)
			case <-stuck:
			}
			<-stuck
			return status.Error(codes.Internal, "the wedged backend came back")
		}
		var in pb.ModelInferRequest
		if err := proto.Unmarshal(req, &in); err != nil {
			return status.Errorf(codes.InvalidArgument, "probe: %v", err)
		}
		b, _ := proto.Marshal(&pb.ModelInferResponse{ModelName: in.ModelName, Id: in.Id})
		return ss.SendMsg(rawBytes(b))
	})
	return &cancelled
}

// A backend hangs on the only slot. The call's deadline fires even for a client
// that never cancels (raw HTTP/2, grpc-timeout only): vig answers it
// DEADLINE_EXCEEDED itself, cancels the backend's call, frees the slot (the next
// request runs while the backend is still wedged on the first) and counts it.
// The same with a grpc-go client, which resets the stream at its deadline.
func TestBackendHangsDeadlineFreesSlot(t *testing.T) {
	e, _, p := governedProbe(t)
	cancelled := hangingProbe(t, p)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)

	h := dialH2(t, e.tcp)
	msg, err := proto.Marshal(streamRequest("a", "m", 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.call(1, wire.MethodInfer, msg, "grpc-timeout", "300m", "x-probe-id", "hang")
	if err != nil {
		t.Fatalf("raw client, hung backend: no answer (%v): vig did not fire the deadline", err)
	}
	if r.rst != nil || field(r.trailers, "grpc-status") != strconv.Itoa(int(codes.DeadlineExceeded)) {
		t.Errorf("raw client, hung backend: rst %v trailers %v, want grpc-status 4 (DEADLINE_EXCEEDED)", r.rst, r.trailers)
	}
	for i, s := range []string{"b", "c"} { // the slot is free although the backend still hangs
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.ModelInfer(probeCtx(bctx, "echo", s), streamRequest(s, "m", uint64(i+1), 0))
		cancel()
		if err != nil {
			t.Fatalf("stream %s after the deadline of a hung call: %v (slot not released?)", s, err)
		}
	}

	gctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.ModelInfer(probeCtx(gctx, "hang", "hang"), streamRequest("a", "m", 2, 0))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("grpc client, hung backend: %v, want DEADLINE_EXCEEDED", err)
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = c.ModelInfer(probeCtx(bctx, "echo", "b"), streamRequest("b", "m", 3, 0))
	cancel()
	if err != nil {
		t.Fatalf("after the second hung call: %v (slot not released?)", err)
	}

	eventually(t, "the backend sees both hung calls cancelled", func() bool { return cancelled.Load() == 2 })
	drained(t, e.gw)
	m := checkBalanced(t, e.reg)
	if m["a"]["running"]+m["a"]["waiting"] != 0 || m["b"]["forwarded"] != 2 || m["c"]["forwarded"] != 1 {
		t.Errorf("after the hangs: a %v b %v c %v", m["a"], m["b"], m["c"])
	}
	if busy := scrape(t, e.reg)["vig_backend_slots_busy"]; busy != 0 {
		t.Errorf("vig_backend_slots_busy = %v with the backend wedged on two abandoned calls", busy)
	}
	if got := grpcCodes(t, e.reg, "ModelInfer"); got["DeadlineExceeded"]+got["Canceled"] != 2 || got["OK"] != 3 {
		t.Errorf("vig_grpc_requests_total ModelInfer: %v, want 2 deadline/cancel and 3 OK", got)
	}
}
