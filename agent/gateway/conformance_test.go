package gateway_test

// Black-box conformance suite of the gateway: what a gRPC client and a Triton-protocol
// backend see of vig, whatever transport vig is built on. Every test talks to vig
// over real sockets and checks codes, bytes and counts.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// ---- 1. Flow control and sizes ----

// A 6.2 MB request and a 6.2 MB response cross vig between a client and a backend
// that both keep grpc-go's default 64 KiB windows and 16 KiB frames, unchanged.
func TestConfLargeMessagesDefaultWindows(t *testing.T) {
	const size = 6_200_000
	// Request direction: the mock backend digests the input; started with plain
	// options (default windows), only the receive limit raised.
	cfg := testConfig(t, "")
	mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mockbackend.FromConfig(cfg),
		[]grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Stop() })
	cfg.Backend.Address = mb.Addr()
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	ctx := ctxT(t)
	via := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))
	direct := pb.NewGRPCInferenceServiceClient(plainClient(t, mb.Addr()))
	id := mockbackend.FrameID("cam0", 5)
	got, err := via.ModelInfer(ctx, inferRequest("detector", id, size))
	if err != nil {
		t.Fatalf("6.2 MB request through vig: %v", err)
	}
	want, err := direct.ModelInfer(ctx, inferRequest("detector", id, size))
	if err != nil {
		t.Fatal(err)
	}
	if got.Id != id || len(got.RawOutputContents) != 1 || !bytes.Equal(got.RawOutputContents[0], want.RawOutputContents[0]) {
		t.Fatalf("6.2 MB request: via vig %x, direct %x", got.RawOutputContents, want.RawOutputContents)
	}
	if d := binary.LittleEndian.Uint64(got.RawOutputContents[0]); d != mockbackend.Digest([][]byte{inferRequest("detector", id, size).RawInputContents[0]}) {
		t.Errorf("backend digested other bytes than sent: %x", d)
	}

	// Response direction: the probe echoes the input as output.
	pe, p := withProbe(t, "")
	via = pb.NewGRPCInferenceServiceClient(plainClient(t, pe.tcp))
	direct = pb.NewGRPCInferenceServiceClient(plainClient(t, p.addr))
	req := inferRequest("detector", "big#1", size)
	req.RawInputContents[0] = pattern(size, 1)
	got, err = via.ModelInfer(ctx, req)
	if err != nil {
		t.Fatalf("6.2 MB response through vig: %v", err)
	}
	want, err = direct.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.RawOutputContents) != 1 || len(got.RawOutputContents[0]) != size ||
		!bytes.Equal(got.RawOutputContents[0], want.RawOutputContents[0]) || !bytes.Equal(got.RawOutputContents[0], req.RawInputContents[0]) {
		t.Fatalf("6.2 MB response differs from direct (%d B via vig)", len(got.GetRawOutputContents()))
	}
	// vig's ModelInfer byte counters saw exactly one request and one response of that size (±framing).
	m := scrape(t, pe.reg)
	if in, out := m[`vig_grpc_received_bytes_total{method="ModelInfer"}`], m[`vig_grpc_sent_bytes_total{method="ModelInfer"}`]; in < size || in > size+200 || out < size || out > size+200 {
		t.Errorf("vig counted %v B in, %v B out for one %d B exchange", in, out, size)
	}
}

// Eight 1.2 MB calls at once on one default-window connection, with a stream of four
// 300 kB requests beside them, and four more calls on a second connection: each answer carries
// its own request's bytes, none mixed.
func TestConfConcurrentLargeInterleaved(t *testing.T) {
	const size, n = 1_200_000, 12
	e, p := withProbe(t, "")
	conns := []pb.GRPCInferenceServiceClient{
		pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp)),
		pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp)),
	}
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := inferRequest("detector", fmt.Sprintf("cam0#%d", i), size)
			req.RawInputContents[0] = pattern(size, byte(10+i))
			r, err := conns[i*2/(n+4)].ModelInfer(ctx, req) // 8 on the first connection, 4 on the second
			switch {
			case err != nil:
				errs[i] = err
			case r.Id != req.Id || len(r.RawOutputContents) != 1 || !bytes.Equal(r.RawOutputContents[0], req.RawInputContents[0]):
				errs[i] = fmt.Errorf("answer of %s has other bytes (id %q, %d B)", req.Id, r.Id, len(r.GetRawOutputContents()))
			}
		}()
	}
	// A stream on the first connection carries four more at the same time.
	var streamErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		streamErr = func() error {
			s, err := conns[0].ModelStreamInfer(ctx)
			if err != nil {
				return err
			}
			sent := map[string][]byte{}
			for i := range 4 {
				req := inferRequest("detector", fmt.Sprintf("s#%d", i), size/4)
				req.RawInputContents[0] = pattern(size/4, byte(100+i))
				sent[req.Id] = req.RawInputContents[0]
				if err := s.Send(req); err != nil {
					return err
				}
			}
			s.CloseSend()
			for range 4 {
				r, err := s.Recv()
				if err != nil {
					return err
				}
				id := r.InferResponse.GetId()
				if r.ErrorMessage != "" || sent[id] == nil || len(r.InferResponse.RawOutputContents) != 1 || !bytes.Equal(r.InferResponse.RawOutputContents[0], sent[id]) {
					return fmt.Errorf("stream answer %q (%q) has other bytes", id, r.ErrorMessage)
				}
				delete(sent, id)
			}
			if _, err := s.Recv(); err != io.EOF {
				return fmt.Errorf("end of stream: %v", err)
			}
			return nil
		}()
	}()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	if streamErr != nil {
		t.Errorf("stream beside the unary calls: %v", streamErr)
	}
	if got := p.messages.Load(); got != n+4 {
		t.Errorf("backend received %d whole requests, want %d", got, n+4)
	}
	if got := grpcCodes(t, e.reg, "ModelInfer")["OK"]; got != n {
		t.Errorf("vig counted %v OK ModelInfer, want %d", got, n)
	}
}

// vig enforces grpc.max_message_mib in both directions: a message of exactly the limit
// passes, one byte more is RESOURCE_EXHAUSTED, and a refused request never reaches
// the backend.
func TestConfMessageSizeLimits(t *testing.T) {
	const limit = 1 << 20
	e, p := withProbe(t, "grpc: {max_message_mib: 1}\n")
	cc := plainClient(t, e.tcp)
	ctx := ctxT(t)
	const method = "/" + gateway.Service + "/ModelConfig" // raw pass-through; the probe echoes
	raw := grpc.ForceCodecV2(wire.RawCodec())

	var resp wire.Frame
	if err := cc.Invoke(ctx, method, rawBytes(pattern(limit, 1)), &resp, raw); err != nil || resp.Len() != limit {
		t.Fatalf("message of exactly %d B: %v (%d B back)", limit, err, resp.Len())
	}
	resp.Free()
	before := p.messages.Load()
	err := cc.Invoke(ctx, method, rawBytes(pattern(limit+1, 2)), &resp, raw)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("request of limit+1 B: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := p.messages.Load(); got != before {
		t.Errorf("an oversized request reached the backend (%d messages, was %d)", got, before)
	}
	// ModelInfer too: vig refuses it before scheduling.
	c := pb.NewGRPCInferenceServiceClient(cc)
	if _, err := c.ModelInfer(ctx, inferRequest("detector", "cam0#1", limit+10)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("ModelInfer above the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Response direction: the backend answers limit+1 B to a small request.
	if _, err := c.ModelInfer(probeCtx(ctx, fmt.Sprintf("big:%d", limit+1), "big"), inferRequest("detector", "cam0#2", 10)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("response above the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := c.ModelInfer(probeCtx(ctx, fmt.Sprintf("big:%d", limit-100), "big"), inferRequest("detector", "cam0#3", 10)); err != nil {
		t.Errorf("response just below the limit: %v", err)
	}
	if err := serves(t, e.tcp, "detector"); err != nil {
		t.Errorf("vig stopped serving after oversized messages: %v", err)
	}
}

// ---- 2. Cancellation and deadlines ----

// holdA puts a call of stream a on the only slot, held by the backend until
// released; it returns the call's result channel.
func holdA(t *testing.T, ctx context.Context, c pb.GRPCInferenceServiceClient, p *probe) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(probeCtx(ctx, "hold", "a"), streamRequest("a", "m", 0, 0))
		done <- err
	}()
	if ids := p.waitStarted(t, 1); ids[0] != "a" {
		t.Fatalf("backend started %v, want a", ids)
	}
	return done
}

// A client that cancels a request waiting in vig's queue gets CANCELLED; the request
// never reaches the backend, the scheduler counts it cancelled, its metrics stay
// balanced, and the next requests are served.
func TestConfCancelWhileQueued(t *testing.T) {
	e, _, p := governedProbe(t)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	holdDone := holdA(t, ctx, c, p)

	bctx, cancelB := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(probeCtx(bctx, "echo", "b"), streamRequest("b", "m", 1, 0))
		bDone <- err
	}()
	eventually(t, "b waiting in vig", func() bool { return streamCounters(t, e.reg)["b"]["waiting"] == 1 })
	cancelB()
	if err := <-bDone; status.Code(err) != codes.Canceled {
		t.Errorf("cancelled queued call: %v, want CANCELLED", err)
	}
	eventually(t, "b counted cancelled", func() bool { return streamCounters(t, e.reg)["b"]["cancelled"] == 1 })
	m := checkBalanced(t, e.reg)
	if m["b"]["waiting"] != 0 || m["b"]["forwarded"] != 0 || m["a"]["running"] != 1 {
		t.Errorf("after the cancel: %v", m)
	}
	if n := len(p.recorded(wire.MethodInfer)); n != 1 {
		t.Errorf("backend saw %d ModelInfer calls, want 1 (the cancelled one must not be forwarded)", n)
	}

	p.unhold()
	if err := <-holdDone; err != nil {
		t.Fatalf("held call: %v", err)
	}
	for i, s := range []string{"b", "c", "a"} {
		if _, err := c.ModelInfer(ctx, streamRequest(s, "m", uint64(10+i), 0)); err != nil {
			t.Errorf("request after the cancel on stream %s: %v", s, err)
		}
	}
	drained(t, e.gw)
	m = checkBalanced(t, e.reg)
	for s, want := range map[string]float64{"a": 2, "b": 1, "c": 1} {
		if m[s]["forwarded"] != want || m[s]["waiting"]+m[s]["running"] != 0 {
			t.Errorf("stream %s: %v, want forwarded %v and nothing in flight", s, m[s], want)
		}
	}
	if busy := scrape(t, e.reg)["vig_backend_slots_busy"]; busy != 0 {
		t.Errorf("vig_backend_slots_busy = %v after everything finished", busy)
	}
}

// A client that cancels while the backend runs its request: the backend's call is
// cancelled too, vig frees the slot at once (the next request runs while the
// cancelled one would still hold the backend), and counts it cancelled.
func TestConfCancelWhileRunning(t *testing.T) {
	e, _, p := governedProbe(t)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	actx, cancelA := context.WithCancel(ctx)
	holdDone := holdA(t, actx, c, p)
	cancelA()
	if err := <-holdDone; status.Code(err) != codes.Canceled {
		t.Errorf("cancelled running call: %v, want CANCELLED", err)
	}
	eventually(t, "the backend sees the cancellation", func() bool { return p.cancelled.Load() == 1 })
	if v, _ := p.ctxErrs.Load("a"); !errors.Is(v.(error), context.Canceled) {
		t.Errorf("backend's context ended with %v, want context.Canceled", v)
	}
	// The slot is free: b runs now (the probe answers it; the held call is gone).
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.ModelInfer(probeCtx(bctx, "echo", "b"), streamRequest("b", "m", 1, 0)); err != nil {
		t.Fatalf("request after a cancelled running one: %v", err)
	}
	drained(t, e.gw)
	m := checkBalanced(t, e.reg)
	if m["a"]["cancelled"] != 1 || m["a"]["running"] != 0 || m["b"]["forwarded"] != 1 {
		t.Errorf("after cancel while running: a %v, b %v", m["a"], m["b"])
	}
	if codes := grpcCodes(t, e.reg, "ModelInfer"); codes["Canceled"] != 1 || codes["OK"] != 1 {
		t.Errorf("vig_grpc_requests_total ModelInfer: %v, want 1 Canceled and 1 OK", codes)
	}
}

// The client's deadline reaches the backend (grpc-timeout) on every kind of call:
// the backend's deadline is the client's (it may only be earlier, or later by the
// transit time), never absent, never the client's timeout restarted.
func TestConfDeadlinePropagates(t *testing.T) {
	e, p := withProbe(t, "")
	cc := plainClient(t, e.tcp)
	c := pb.NewGRPCInferenceServiceClient(cc)
	const timeout = 3 * time.Second
	check := func(what, method string, call func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		clientDeadline, _ := ctx.Deadline()
		n := len(p.recorded(method))
		start := time.Now()
		if err := call(ctx); err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		calls := p.recorded(method)
		if len(calls) != n+1 {
			t.Errorf("%s: backend saw %d calls, want 1", what, len(calls)-n)
			return
		}
		// Each hop sends the time left and its receiver counts from when it
		// reads it, so the backend's deadline may be later than the client's by
		// the transit time, which is at most the time from the call's start to
		// the probe's handler (and by the grpc-timeouts' rounding, 1 µs a hop).
		d, transit := calls[n].deadline, calls[n].at.Sub(start)
		switch {
		case d.IsZero():
			t.Errorf("%s: no deadline at the backend", what)
		case d.After(clientDeadline.Add(transit + time.Millisecond)):
			t.Errorf("%s: backend deadline %v after the client's, more than the %v the call took to reach the backend", what, d.Sub(clientDeadline), transit)
		case d.Before(clientDeadline.Add(-timeout / 2)):
			t.Errorf("%s: backend deadline %v before the client's: vig shortened it", what, clientDeadline.Sub(d))
		}
	}
	check("ModelInfer", wire.MethodInfer, func(ctx context.Context) error {
		_, err := c.ModelInfer(ctx, inferRequest("detector", "cam0#1", 10))
		return err
	})
	check("ModelConfig (unary pass-through)", "/"+gateway.Service+"/ModelConfig", func(ctx context.Context) error {
		_, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "detector"})
		return err
	})
	check("ModelStreamInfer", wire.MethodInfer, func(ctx context.Context) error {
		s, err := c.ModelStreamInfer(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(inferRequest("detector", "cam0#2", 10)); err != nil {
			return err
		}
		r, err := s.Recv()
		if err != nil || r.ErrorMessage != "" {
			return fmt.Errorf("%v %v", r, err)
		}
		return s.CloseSend()
	})
	check("unknown streaming method", "/other.Service/Chat", func(ctx context.Context) error {
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/other.Service/Chat", grpc.ForceCodecV2(wire.RawCodec()))
		if err != nil {
			return err
		}
		if err := s.SendMsg(rawBytes("hi")); err != nil {
			return err
		}
		var f wire.Frame
		if err := s.RecvMsg(&f); err != nil || string(f.Bytes()) != "hi" {
			return fmt.Errorf("echo %q: %v", f.Bytes(), err)
		}
		f.Free()
		return s.CloseSend()
	})

	// A deadline that expires while the backend runs: DEADLINE_EXCEEDED at the client
	// within the deadline plus a bound, and the backend's call ends too.
	ctx, cancel := context.WithTimeout(probeCtx(context.Background(), "hold", "late"), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.ModelInfer(ctx, inferRequest("detector", "cam0#3", 10))
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 300*time.Millisecond+time.Second {
		t.Errorf("deadline expiring on the backend: %v after %v, want DEADLINE_EXCEEDED within 1.3 s", err, time.Since(start))
	}
	eventually(t, "the backend's held call ends", func() bool { return p.cancelled.Load() == 1 })
	drained(t, e.gw)
}

// A deadline that expires while the request waits in vig's queue: the client gets
// DEADLINE_EXCEEDED (or CANCELLED) within the deadline plus a bound, the request
// never reaches the backend, and vig counts it (outcome and status code).
func TestConfDeadlineWhileQueued(t *testing.T) {
	e, _, p := governedProbe(t)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	holdDone := holdA(t, ctx, c, p)

	bctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.ModelInfer(probeCtx(bctx, "echo", "b"), streamRequest("b", "m", 1, 0))
	if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Canceled || time.Since(start) > 300*time.Millisecond+time.Second {
		t.Errorf("deadline in the queue: %v after %v, want DEADLINE_EXCEEDED or CANCELLED within 1.3 s", err, time.Since(start))
	}
	eventually(t, "b finished in vig", func() bool {
		b := streamCounters(t, e.reg)["b"]
		return b["received"] == 1 && b["waiting"] == 0
	})
	m := checkBalanced(t, e.reg)
	if b := m["b"]; b["forwarded"] != 0 || b["cancelled"]+b["late_dropped"]+b["rejected"] != 1 {
		t.Errorf("stream b: %v, want one request counted cancelled, late_dropped or rejected", b)
	}
	if n := len(p.recorded(wire.MethodInfer)); n != 1 {
		t.Errorf("backend saw %d ModelInfer calls, want 1", n)
	}
	p.unhold()
	if err := <-holdDone; err != nil {
		t.Fatal(err)
	}
	drained(t, e.gw)
	if codes := grpcCodes(t, e.reg, "ModelInfer"); codes["DeadlineExceeded"]+codes["Canceled"] != 1 || codes["OK"] != 1 {
		t.Errorf("vig_grpc_requests_total ModelInfer: %v, want 1 DeadlineExceeded (or Canceled) and 1 OK", codes)
	}
}

// ---- 3. Metadata and status ----

// Request metadata (ASCII, several values of one key, -bin) reaches the backend
// unchanged; the backend's response headers and trailers (custom, -bin, several
// values) come back; reserved headers are not duplicated.
func TestConfMetadataRoundTrip(t *testing.T) {
	e, p := withProbe(t, "")
	binReq := string([]byte{0, 1, 0xfe, 0xff, '\n', 0x80})
	binHdr := string([]byte{0xff, 0, 0x7f})
	binTrl := string([]byte{0xde, 0xad, 0xbe, 0xef, 0})
	p.setOnCall(func(ss grpc.ServerStream, method string, req []byte) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		ss.SetHeader(metadata.MD{"x-hdr": {"h1", "h2"}, "x-hdr-bin": {binHdr}, "x-seen-multi": {fmt.Sprint(len(md.Get("x-multi")))}})
		ss.SetTrailer(metadata.MD{"x-trl": {"t1"}, "x-trl-bin": {binTrl}})
		if method == wire.MethodInfer {
			return ss.SendMsg(rawBytes{}) // an empty ModelInferResponse
		}
		return ss.SendMsg(rawBytes(req))
	})
	cc := plainClient(t, e.tcp)
	c := pb.NewGRPCInferenceServiceClient(cc)
	calls := []struct {
		name, method string
		call         func(ctx context.Context, opts ...grpc.CallOption) error
	}{
		{"ModelInfer", wire.MethodInfer, func(ctx context.Context, opts ...grpc.CallOption) error {
			_, err := c.ModelInfer(ctx, inferRequest("detector", "cam0#1", 10), opts...)
			return err
		}},
		{"ModelConfig", "/" + gateway.Service + "/ModelConfig", func(ctx context.Context, opts ...grpc.CallOption) error {
			_, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "x"}, opts...)
			return err
		}},
		{"unknown stream", "/other.Service/Chat", func(ctx context.Context, opts ...grpc.CallOption) error {
			s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/other.Service/Chat",
				append(opts, grpc.ForceCodecV2(wire.RawCodec()))...)
			if err != nil {
				return err
			}
			s.SendMsg(rawBytes("x"))
			s.CloseSend()
			var f wire.Frame
			if err := s.RecvMsg(&f); err != nil {
				return err
			}
			f.Free()
			if err := s.RecvMsg(&f); err != io.EOF {
				return fmt.Errorf("end of stream: %v", err)
			}
			return nil
		}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-trace", "abc", "x-multi", "1", "x-multi", "2", "x-multi", "3", "x-req-bin", binReq)
			var hdr, trl metadata.MD
			if err := tc.call(ctx, grpc.Header(&hdr), grpc.Trailer(&trl)); err != nil {
				t.Fatal(err)
			}
			rec := p.recorded(tc.method)
			if len(rec) == 0 {
				t.Fatal("no call reached the backend")
			}
			md := rec[len(rec)-1].md
			if got := md.Get("x-trace"); len(got) != 1 || got[0] != "abc" {
				t.Errorf("x-trace at the backend: %q", got)
			}
			if got := md.Get("x-multi"); len(got) != 3 || got[0] != "1" || got[1] != "2" || got[2] != "3" {
				t.Errorf("x-multi at the backend: %q, want [1 2 3] in order", got)
			}
			if got := md.Get("x-req-bin"); len(got) != 1 || got[0] != binReq {
				t.Errorf("x-req-bin at the backend: %q, want %q", got, binReq)
			}
			if got := md.Get("user-agent"); len(got) > 1 {
				t.Errorf("user-agent at the backend: %q (duplicated)", got)
			}
			if got := hdr.Get("x-hdr"); len(got) != 2 || got[0] != "h1" || got[1] != "h2" {
				t.Errorf("response header x-hdr: %q", got)
			}
			if got := hdr.Get("x-hdr-bin"); len(got) != 1 || got[0] != binHdr {
				t.Errorf("response header x-hdr-bin: %q", got)
			}
			if got := hdr.Get("x-seen-multi"); len(got) != 1 || got[0] != "3" {
				t.Errorf("backend saw x-multi %q times", got)
			}
			if got := trl.Get("x-trl"); len(got) != 1 || got[0] != "t1" {
				t.Errorf("trailer x-trl: %q", got)
			}
			if got := trl.Get("x-trl-bin"); len(got) != 1 || got[0] != binTrl {
				t.Errorf("trailer x-trl-bin: %q", got)
			}
		})
	}
}

// Backend status codes, messages (non-ASCII, '%', control characters: percent-encoded
// in grpc-message) and details reach the client unchanged: the status vig's client
// sees equals the one a direct client sees.
func TestConfStatusPropagation(t *testing.T) {
	e, p := withProbe(t, "")
	messages := []string{
		"résultat: 100% raté — ✓ 日本語",
		"line1\nline2\ttab %41 %zz",
		"",
		strings.Repeat("é%", 600),
	}
	p.setOnCall(func(ss grpc.ServerStream, _ string, req []byte) error {
		var code, msg int
		fmt.Sscanf(first(metadataOf(ss), "x-status"), "%d/%d", &code, &msg)
		st, err := status.New(codes.Code(code), messages[msg]).WithDetails(protoadapt.MessageV1Of(&pb.ModelReadyResponse{Ready: true}))
		if err != nil {
			return err
		}
		return st.Err()
	})
	via := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))
	direct := pb.NewGRPCInferenceServiceClient(plainClient(t, p.addr))
	type pair struct {
		code codes.Code
		msg  int
	}
	var pairs []pair // every code once, every message with INVALID_ARGUMENT
	for code := codes.Canceled; code <= codes.Unauthenticated; code++ {
		pairs = append(pairs, pair{code, int(code) % len(messages)})
	}
	for msg := range messages {
		pairs = append(pairs, pair{codes.InvalidArgument, msg})
	}
	for _, pc := range pairs {
		code, msg := pc.code, pc.msg
		ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-status", fmt.Sprintf("%d/%d", code, msg))
		for _, c := range []struct {
			name string
			call func(pb.GRPCInferenceServiceClient) error
		}{
			{"ModelInfer", func(c pb.GRPCInferenceServiceClient) error {
				_, err := c.ModelInfer(ctx, inferRequest("detector", "cam0#1", 10))
				return err
			}},
			{"ModelConfig", func(c pb.GRPCInferenceServiceClient) error {
				_, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "detector"})
				return err
			}},
		} {
			got, want := status.Convert(c.call(via)), status.Convert(c.call(direct))
			if want.Code() != code || want.Message() != messages[msg] {
				t.Fatalf("probe answered %v %q directly, want %v %q", want.Code(), want.Message(), code, messages[msg])
			}
			if !proto.Equal(got.Proto(), want.Proto()) {
				t.Errorf("%s %v/%d: via vig %v %q (%d details), direct %v %q", c.name, code, msg, got.Code(), got.Message(), len(got.Details()), want.Code(), want.Message())
			}
		}
	}
}

func metadataOf(ss grpc.ServerStream) metadata.MD {
	md, _ := metadata.FromIncomingContext(ss.Context())
	return md
}

// A trailers-only error answer of the backend (status, headers and trailers in one
// HEADERS frame, no message): the client gets the status and every metadata entry,
// each exactly once.
func TestConfTrailersOnlyError(t *testing.T) {
	e, p := withProbe(t, "")
	p.setOnCall(func(ss grpc.ServerStream, _ string, _ []byte) error {
		ss.SetHeader(metadata.Pairs("x-h", "1", "x-h-bin", "\x00\x01"))
		ss.SetTrailer(metadata.Pairs("x-t", "2"))
		return status.Error(codes.PermissionDenied, "trailers only ✗")
	})
	c := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))
	direct := pb.NewGRPCInferenceServiceClient(plainClient(t, p.addr))
	for _, name := range []string{"ModelInfer", "ModelConfig"} {
		t.Run(name, func(t *testing.T) {
			call := func(c pb.GRPCInferenceServiceClient, hdr, trl *metadata.MD) error {
				ctx := ctxT(t)
				if name == "ModelInfer" {
					_, err := c.ModelInfer(ctx, inferRequest("detector", "cam0#1", 10), grpc.Header(hdr), grpc.Trailer(trl))
					return err
				}
				_, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "detector"}, grpc.Header(hdr), grpc.Trailer(trl))
				return err
			}
			var hdr, trl, dhdr, dtrl metadata.MD
			err := call(c, &hdr, &trl)
			if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != "trailers only ✗" {
				t.Errorf("trailers-only answer: %v", err)
			}
			call(direct, &dhdr, &dtrl)
			all, dall := metadata.Join(hdr, trl), metadata.Join(dhdr, dtrl)
			for _, k := range []string{"x-h", "x-h-bin", "x-t"} {
				if len(all.Get(k)) != 1 || len(dall.Get(k)) != 1 || all.Get(k)[0] != dall.Get(k)[0] {
					t.Errorf("%s: via vig header %v trailer %v; direct header %v trailer %v", k, hdr.Get(k), trl.Get(k), dhdr.Get(k), dtrl.Get(k))
				}
			}
		})
	}
}

// ---- 4. Streams and pass-through ----

// ModelStreamInfer: 50 requests pipelined with one bad one among them; after the
// client half-closes, all 51 answers arrive (ids matched, the bad one in-band with
// its id) and then the stream ends OK.
func TestConfStreamInferPipelined(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	c := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))
	ctx := ctxT(t)
	s, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 50 {
		if i == 25 {
			if err := s.Send(inferRequest("nope", "bad#1", 10)); err != nil {
				t.Fatal(err)
			}
		}
		id := mockbackend.FrameID("cam0", uint64(i))
		want[id] = true
		if err := s.Send(inferRequest("pose", id, 100+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var answers, inBand int
	for {
		r, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d answers: %v", answers, err)
		}
		answers++
		if r.ErrorMessage != "" {
			inBand++
			if r.InferResponse.GetId() != "bad#1" || !strings.Contains(r.ErrorMessage, "NotFound") || !strings.Contains(r.ErrorMessage, "nope") {
				t.Errorf("in-band error %q for id %q", r.ErrorMessage, r.InferResponse.GetId())
			}
			continue
		}
		id := r.InferResponse.GetId()
		if !want[id] {
			t.Errorf("answer for unknown or repeated id %q", id)
		}
		delete(want, id)
		var frame uint64
		fmt.Sscanf(id, "cam0#%d", &frame)
		if len(r.InferResponse.RawOutputContents) != 1 || binary.LittleEndian.Uint64(r.InferResponse.RawOutputContents[0][8:]) != frame {
			t.Errorf("answer for %s carries output %x", id, r.InferResponse.RawOutputContents)
		}
	}
	if answers != 51 || inBand != 1 || len(want) != 0 {
		t.Errorf("%d answers, %d in-band errors, unanswered %v; want 51, 1, none", answers, inBand, want)
	}
	drained(t, e.gw)
	if got := grpcCodes(t, e.reg, "ModelStreamInfer"); got["OK"] != 1 {
		t.Errorf("ModelStreamInfer codes %v, want one OK", got)
	}
}

// A client that cancels a stream while its requests run on the backend: every
// backend call is cancelled, vig answers the stream, and keeps serving.
func TestConfStreamInferCancelMidway(t *testing.T) {
	e, p := withProbe(t, "")
	c := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))
	ctx, cancel := context.WithCancel(probeCtx(ctxT(t), "hold", "held"))
	s, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.Send(inferRequest("detector", fmt.Sprintf("cam0#%d", i), 1000)); err != nil {
			t.Fatal(err)
		}
	}
	p.waitStarted(t, 5)
	cancel()
	if _, err := s.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("cancelled stream: %v, want CANCELLED", err)
	}
	// All 5 reached the backend (waitStarted) and each of their streams is reset
	// there, whether or not its request message was read first.
	eventually(t, "the backend sees 5 cancellations", func() bool { return p.cancelled.Load() == 5 })
	if v, _ := p.ctxErrs.Load("held"); !errors.Is(v.(error), context.Canceled) {
		t.Errorf("backend's context ended with %v, want context.Canceled", v)
	}
	drained(t, e.gw)
	if err := serves(t, e.tcp, "detector"); err != nil {
		t.Errorf("after a cancelled stream: %v", err)
	}
	// A new stream on a new connection works.
	s2, err := c.ModelStreamInfer(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	s2.Send(inferRequest("detector", "cam0#9", 10))
	if r, err := s2.Recv(); err != nil || r.InferResponse.GetId() != "cam0#9" {
		t.Errorf("stream after a cancelled one: %v %v", r, err)
	}
	s2.CloseSend()
	if _, err := s2.Recv(); err != io.EOF {
		t.Errorf("end of the second stream: %v", err)
	}
}

// Every RPC vig passes through answers byte for byte what the backend answers
// directly, errors included (status proto equal).
func TestConfPassThroughBytesEqual(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	via, direct := plainClient(t, e.tcp), plainClient(t, e.backend.Addr())
	ctx := ctxT(t)
	m := func(msg proto.Message) []byte {
		b, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		method  string
		req     []byte
		compare bool // response bytes are deterministic
	}{
		{"ServerLive", m(&pb.ServerLiveRequest{}), true},
		{"ServerReady", m(&pb.ServerReadyRequest{}), true},
		{"ModelReady", m(&pb.ModelReadyRequest{Name: "detector"}), true},
		{"ModelReady", m(&pb.ModelReadyRequest{Name: "nope"}), true},
		{"ServerMetadata", m(&pb.ServerMetadataRequest{}), true},
		{"ModelMetadata", m(&pb.ModelMetadataRequest{Name: "pose"}), true},
		{"ModelMetadata", m(&pb.ModelMetadataRequest{Name: "nope"}), true},
		{"ModelConfig", m(&pb.ModelConfigRequest{Name: "detector"}), true},
		{"ModelConfig", m(&pb.ModelConfigRequest{Name: "pose", Version: "7"}), true},
		{"ModelStatistics", m(&pb.ModelStatisticsRequest{Name: "nope"}), true},
		{"ModelStatistics", m(&pb.ModelStatisticsRequest{Name: "detector"}), false},
		{"RepositoryIndex", m(&pb.RepositoryIndexRequest{}), true},
		{"RepositoryModelLoad", m(&pb.RepositoryModelLoadRequest{}), true},
		{"RepositoryModelUnload", m(&pb.RepositoryModelUnloadRequest{}), true},
		{"SystemSharedMemoryStatus", m(&pb.SystemSharedMemoryStatusRequest{}), true},
		{"SystemSharedMemoryStatus", m(&pb.SystemSharedMemoryStatusRequest{Name: "nope"}), true},
		{"CudaSharedMemoryStatus", m(&pb.CudaSharedMemoryStatusRequest{}), true},
		{"CudaSharedMemoryRegister", m(&pb.CudaSharedMemoryRegisterRequest{}), true},
		{"CudaSharedMemoryUnregister", m(&pb.CudaSharedMemoryUnregisterRequest{}), true},
		{"TraceSetting", m(&pb.TraceSettingRequest{}), true},
		{"LogSettings", m(&pb.LogSettingsRequest{}), true},
		{"ModelReady", []byte{0x0a, 0xff}, true}, // malformed: the backend's INTERNAL/INVALID_ARGUMENT
	} {
		full := "/" + gateway.Service + "/" + c.method
		var got, want wire.Frame
		gerr := via.Invoke(ctx, full, rawBytes(c.req), &got, grpc.ForceCodecV2(wire.RawCodec()))
		werr := direct.Invoke(ctx, full, rawBytes(c.req), &want, grpc.ForceCodecV2(wire.RawCodec()))
		if !proto.Equal(status.Convert(gerr).Proto(), status.Convert(werr).Proto()) {
			t.Errorf("%s(%x): via vig %v, direct %v", c.method, c.req, gerr, werr)
		}
		if c.compare && !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%s(%x): via vig %x, direct %x", c.method, c.req, got.Bytes(), want.Bytes())
		}
		got.Free()
		want.Free()
	}
}

// A method vig has no entry for is passed to the backend, whose UNIMPLEMENTED comes
// back unchanged, unary and streaming.
func TestConfUnknownMethod(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	via, direct := plainClient(t, e.tcp), plainClient(t, e.backend.Addr())
	ctx := ctxT(t)
	for _, method := range []string{"/" + gateway.Service + "/NoSuchMethod", "/foo.Bar/Baz", "/grpc.health.v1.Health/NoSuch"} {
		var got, want wire.Frame
		gerr := via.Invoke(ctx, method, rawBytes("x"), &got, grpc.ForceCodecV2(wire.RawCodec()))
		werr := direct.Invoke(ctx, method, rawBytes("x"), &want, grpc.ForceCodecV2(wire.RawCodec()))
		if status.Code(gerr) != codes.Unimplemented || !proto.Equal(status.Convert(gerr).Proto(), status.Convert(werr).Proto()) {
			t.Errorf("unary %s: via vig %v, direct %v", method, gerr, werr)
		}
		s, err := via.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, grpc.ForceCodecV2(wire.RawCodec()))
		if err != nil {
			t.Fatal(err)
		}
		s.SendMsg(rawBytes("x"))
		s.CloseSend()
		if err := s.RecvMsg(&got); status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != status.Convert(werr).Message() {
			t.Errorf("stream %s: %v, want %v", method, err, werr)
		}
	}
	drained(t, e.gw)
}

// ---- 5. Health ----

// grpc.health.v1 follows the backend: Check and Watch say SERVING while it is up; a
// stopped backend is pushed as NOT_SERVING on an open Watch; restarted on the same
// address, SERVING again on the same Watch, and inference works again.
func TestConfHealthFollowsBackendRestart(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	addr := e.backend.Addr()
	h := healthpb.NewHealthClient(plainClient(t, e.tcp))
	ctx := ctxT(t)
	w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{Service: gateway.Service})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for {
			r, err := w.Recv()
			if err != nil {
				t.Fatalf("Watch, waiting for %v: %v", want, err)
			}
			if r.Status == want {
				return
			}
		}
	}
	next(healthpb.HealthCheckResponse_SERVING)
	for _, svc := range []string{"", gateway.Service} {
		if r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) with the backend up: %v %v", svc, r, err)
		}
	}
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service: %v, want NOT_FOUND", err)
	}

	e.backend.Stop()
	next(healthpb.HealthCheckResponse_NOT_SERVING)
	if r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: gateway.Service}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check with the backend down: %v %v", r, err)
	}

	mb, err := mockbackend.Start(context.Background(), addr, mockbackend.FromConfig(e.cfg), gateway.ServerOptions(e.cfg.GRPC), nil)
	if err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	t.Cleanup(func() { mb.Stop() })
	next(healthpb.HealthCheckResponse_SERVING)
	if r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: ""}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check after the restart: %v %v", r, err)
	}
	if err := serves(t, e.tcp, "detector"); err != nil {
		t.Errorf("after the backend restarted: %v", err)
	}
}

// ---- 6. Backend lifecycle ----

// The backend shuts down gracefully (GOAWAY) under load: every call is answered once,
// OK or UNAVAILABLE, none hangs (each has a 1 s deadline: UNAVAILABLE must come
// before it); while the backend is down calls are UNAVAILABLE; when it returns on the
// same address vig reconnects and serves again.
func TestConfBackendGracefulStopUnderLoad(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	addr := e.backend.Addr()
	c := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))

	const workers = 4
	var (
		mu      sync.Mutex
		seen    = map[codes.Code]int{}
		calls   int
		phase   = 0 // 0 up, 1 stopping/down, 2 restarted
		okAfter = make([]bool, workers)
		unavail = make([]int, workers)
		bad     []error
	)
	stopped, restarted := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := c.ModelInfer(ctx, inferRequest("pose", mockbackend.FrameID(fmt.Sprintf("w%d", w), uint64(i)), 2000))
				cancel()
				code := status.Code(err)
				mu.Lock()
				calls++
				seen[code]++
				if code != codes.OK && code != codes.Unavailable {
					bad = append(bad, err)
				}
				p := phase
				if p == 1 && code == codes.Unavailable {
					unavail[w]++
				}
				if p == 2 && code == codes.OK {
					okAfter[w] = true
				}
				done := okAfter[w] || len(bad) > 0
				mu.Unlock()
				if done {
					return
				}
				if p == 1 && unavail[w] >= 3 {
					<-restarted // this worker has seen the backend down; wait for it to return
				}
			}
		}()
	}
	eventually(t, "load running", func() bool { mu.Lock(); defer mu.Unlock(); return seen[codes.OK] >= 20 })
	mu.Lock()
	phase = 1
	mu.Unlock()
	go func() { e.backend.Stop(); close(stopped) }()
	<-stopped
	eventually(t, "every worker sees UNAVAILABLE", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range unavail {
			if n < 3 {
				return false
			}
		}
		return true
	})
	mb, err := mockbackend.Start(context.Background(), addr, mockbackend.FromConfig(e.cfg), gateway.ServerOptions(e.cfg.GRPC), nil)
	if err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	t.Cleanup(func() { mb.Stop() })
	mu.Lock()
	phase = 2
	mu.Unlock()
	close(restarted)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("calls answered neither OK nor UNAVAILABLE (a hang shows as DEADLINE_EXCEEDED): %v", bad)
	}
	for w, ok := range okAfter {
		if !ok {
			t.Errorf("worker %d never served after the backend returned", w)
		}
	}
	drained(t, e.gw)
	got := grpcCodes(t, e.reg, "ModelInfer")
	var total float64
	for _, n := range got {
		total += n
	}
	if int(total) != calls || int(got["OK"]) != seen[codes.OK] || int(got["Unavailable"]) != seen[codes.Unavailable] {
		t.Errorf("vig answered %v (total %v), clients saw %v (total %d): each call must be answered exactly once", got, total, seen, calls)
	}
}

// ---- 8. Drain ----

// Drain as `vig serve` does it (Governor.Drain, then GracefulStop) with one call on
// the backend and two waiting in vig: the waiting ones are answered UNAVAILABLE at
// once, GracefulStop waits for the running one, which is answered OK; every call is
// answered exactly once and Accepted() == Answered().
func TestConfDrainGoverned(t *testing.T) {
	e, gov, p := governedProbe(t)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	holdDone := holdA(t, ctx, c, p)
	queued := make(chan error, 2)
	for i, s := range []string{"b", "c"} {
		go func() {
			_, err := c.ModelInfer(probeCtx(ctx, "echo", s), streamRequest(s, "m", uint64(i+1), 0))
			queued <- err
		}()
	}
	eventually(t, "b and c waiting", func() bool {
		m := streamCounters(t, e.reg)
		return m["b"]["waiting"] == 1 && m["c"]["waiting"] == 1
	})
	before := e.gw.Accepted()
	stopped := make(chan struct{})
	go func() { gov.Drain(); e.gw.GracefulStop(); close(stopped) }()
	for range 2 {
		if err := <-queued; status.Code(err) != codes.Unavailable {
			t.Errorf("queued call at drain: %v, want UNAVAILABLE", err)
		}
	}
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while a call was still on the backend")
	default:
	}
	p.unhold()
	if err := <-holdDone; err != nil {
		t.Errorf("running call at drain: %v, want OK", err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop did not return after the last call was answered")
	}
	if a, n := e.gw.Accepted(), e.gw.Answered(); a != n || a != before || a < 3 {
		t.Errorf("Accepted %d, Answered %d (before drain %d), want equal and ≥ 3", a, n, before)
	}
	if got := grpcCodes(t, e.reg, "ModelInfer"); got["OK"] != 1 || got["Unavailable"] != 2 {
		t.Errorf("ModelInfer codes %v, want 1 OK and 2 Unavailable", got)
	}
	m := checkBalanced(t, e.reg)
	if m["a"]["forwarded"] != 1 || m["b"]["forwarded"]+m["c"]["forwarded"] != 0 {
		t.Errorf("after drain: %v", m)
	}
	if n := len(p.recorded(wire.MethodInfer)); n != 1 {
		t.Errorf("backend saw %d ModelInfer calls, want 1", n)
	}
}

// GracefulStop with calls in flight of every kind (ModelInfer, unary pass-through, a
// pass-through stream) waits for all of them; a call started during the drain is
// answered (OK or UNAVAILABLE), never hung; Accepted() == Answered() afterwards.
func TestConfGracefulStopInFlight(t *testing.T) {
	e, p := withProbe(t, "")
	cc := plainClient(t, e.tcp)
	c := pb.NewGRPCInferenceServiceClient(cc)
	ctx := probeCtx(ctxT(t), "hold", "held")
	results := make(chan error, 5)
	for i := range 3 {
		go func() {
			_, err := c.ModelInfer(ctx, inferRequest("detector", fmt.Sprintf("cam0#%d", i), 1000))
			results <- err
		}()
	}
	go func() {
		_, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "detector"})
		results <- err
	}()
	go func() {
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/other.Service/Chat", grpc.ForceCodecV2(wire.RawCodec()))
		if err == nil {
			s.SendMsg(rawBytes("x"))
			s.CloseSend()
			var f wire.Frame
			if err = s.RecvMsg(&f); err == nil {
				f.Free()
				if err = s.RecvMsg(&f); err == io.EOF {
					err = nil
				}
			}
		}
		results <- err
	}()
	p.waitStarted(t, 5)
	stopped := make(chan struct{})
	go func() { e.gw.GracefulStop(); close(stopped) }()

	lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := pb.NewGRPCInferenceServiceClient(cc).ServerLive(lctx, &pb.ServerLiveRequest{})
	if code := status.Code(err); code != codes.OK && code != codes.Unavailable {
		t.Errorf("call started during the drain: %v, want OK or UNAVAILABLE", err)
	}
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with 5 calls on the backend")
	default:
	}
	p.unhold()
	for range 5 {
		if err := <-results; err != nil {
			t.Errorf("call in flight at GracefulStop: %v, want OK", err)
		}
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop did not return after the last call was answered")
	}
	if a, n := e.gw.Accepted(), e.gw.Answered(); a != n || n < 5 {
		t.Errorf("Accepted %d, Answered %d, want equal and ≥ 5", a, n)
	}
}

// TestConfStreamInferVigErrorCarriesIDStrict: an in-band stream error that vig itself detects (a bad vig_capture_ns) names the
// request it belongs to, as the backend's own in-band errors do: otherwise a client
// with several requests in flight cannot tell which one failed.
func TestConfStreamInferVigErrorCarriesIDStrict(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	c := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))
	s, err := c.ModelStreamInfer(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	bad := inferRequest("detector", "cam0#7", 10)
	bad.Parameters[wire.ParamCapture] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "yesterday"}}
	s.Send(bad)
	s.Send(inferRequest("detector", "cam0#8", 10))
	s.CloseSend()
	got := map[string]string{}
	for {
		r, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[r.InferResponse.GetId()] = r.ErrorMessage
	}
	if len(got) != 2 || got["cam0#8"] != "" || !strings.Contains(got["cam0#7"], wire.ParamCapture) {
		t.Errorf("answers by id: %q; want cam0#8 OK and cam0#7 with an error naming %s", got, wire.ParamCapture)
	}
}

// GracefulStop alone (no scheduler drain) with one call on the backend and two
// waiting in vig: it waits for all three, which the backend answers in turn; every
// call is answered exactly once.
func TestConfGracefulStopGovernedQueued(t *testing.T) {
	e, _, p := governedProbe(t)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	holdDone := holdA(t, ctx, c, p)
	queued := make(chan error, 2)
	for i, s := range []string{"b", "c"} {
		go func() {
			_, err := c.ModelInfer(probeCtx(ctx, "echo", s), streamRequest(s, "m", uint64(i+1), 0))
			queued <- err
		}()
	}
	eventually(t, "b and c waiting", func() bool {
		m := streamCounters(t, e.reg)
		return m["b"]["waiting"] == 1 && m["c"]["waiting"] == 1
	})
	stopped := make(chan struct{})
	go func() { e.gw.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with calls running and waiting")
	case err := <-queued:
		t.Fatalf("a waiting call was answered (%v) while the slot was still held", err)
	default:
	}
	p.unhold()
	if err := <-holdDone; err != nil {
		t.Errorf("running call: %v", err)
	}
	for range 2 {
		if err := <-queued; err != nil {
			t.Errorf("waiting call at GracefulStop: %v, want OK (it runs once the slot frees)", err)
		}
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop did not return after the last call was answered")
	}
	if a, n := e.gw.Accepted(), e.gw.Answered(); a != n || n < 3 {
		t.Errorf("Accepted %d, Answered %d, want equal and ≥ 3", a, n)
	}
	m := checkBalanced(t, e.reg)
	if m["a"]["forwarded"]+m["b"]["forwarded"]+m["c"]["forwarded"] != 3 {
		t.Errorf("after GracefulStop: %v, want 3 forwarded", m)
	}
}
