package gateway_test

// Cut-through (cutthrough.go): a large ModelInfer request is forwarded to the
// backend while it still arrives, checked before each byte goes on.

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/gateway"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// arrivals is what a raw backend saw of each request stream: bytes of DATA,
// END_STREAM, RST_STREAM.
type arrivals struct {
	mu     sync.Mutex
	bytes  map[uint32]int
	ended  map[uint32][]byte // the request message of a stream that ended
	rst    map[uint32]http2.ErrCode
	latest uint32
}

func (a *arrivals) get() (stream uint32, n int, ended bool, rst bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ended = a.ended[a.latest]
	_, rst = a.rst[a.latest]
	return a.latest, a.bytes[a.latest], ended, rst
}

// startArrivalsBackend is a raw backend that records arrivals and answers
// each complete ModelInfer with its id.
func startArrivalsBackend(t *testing.T) (*rawBackend, *arrivals) {
	a := &arrivals{bytes: map[uint32]int{}, ended: map[uint32][]byte{}, rst: map[uint32]http2.ErrCode{}}
	rb := startRawBackendWith(t, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 64 << 20}}, func(_ int, bc *backendConn) {
		bodies := map[uint32][]byte{}
		for {
			f, err := bc.fr.ReadFrame()
			if err != nil {
				return
			}
			if bc.ack(f) {
				continue
			}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				a.mu.Lock()
				a.latest = f.StreamID
				a.mu.Unlock()
			case *http2.DataFrame:
				if n := len(f.Data()); n > 0 {
					bc.fr.WriteWindowUpdate(0, uint32(n))
				}
				bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
				a.mu.Lock()
				a.bytes[f.StreamID] += len(f.Data())
				if f.StreamEnded() {
					a.ended[f.StreamID] = bodies[f.StreamID]
				}
				a.mu.Unlock()
				if f.StreamEnded() {
					bc.answerInfer(f.StreamID, bodies[f.StreamID][5:])
				}
			case *http2.RSTStreamFrame:
				a.mu.Lock()
				a.rst[f.StreamID] = f.ErrCode
				a.mu.Unlock()
			}
		}
	})
	return rb, a
}

// sendFrames writes b on stream as DATA frames of 16 KiB, END_STREAM on the
// last with end.
func sendFrames(h *h2conn, stream uint32, b []byte, end bool) {
	for len(b) > 0 {
		n := min(len(b), 16384)
		h.fr.WriteData(stream, end && n == len(b), b[:n])
		b = b[n:]
	}
	h.flush()
}

func waitArrived(t *testing.T, a *arrivals, what string, ok func(n int, ended, rst bool) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // a hang guard
		_, n, ended, rst := a.get()
		if ok(n, ended, rst) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend never saw %s: %d bytes, ended %v, reset %v", what, n, ended, rst)
		}
	}
}

func cutThroughEnv(t *testing.T) (*env, *arrivals, *h2conn) {
	rb, a := startArrivalsBackend(t)
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	return e, a, dialH2(t, e.tcp)
}

// The backend has most of a large request before the client has sent its
// end; it gets exactly the request, vig's parameters out; the client its
// answer.
func TestCutThroughForwardsAsItArrives(t *testing.T) {
	e, a, h := cutThroughEnv(t)
	req := inferRequest("detector", "through", 1<<20)
	msg := grpcMessage(mustMarshal(t, req))
	if err := h.headers(1, h.block("/inference.GRPCInferenceService/ModelInfer"), false); err != nil {
		t.Fatal(err)
	}
	first, rest := msg[:600<<10], msg[600<<10:]
	sendFrames(h, 1, first, false)
	// Everything sent but the head's own bytes (vig's parameter is taken out).
	waitArrived(t, a, "the first 500 KiB before the client sent the rest", func(n int, ended, rst bool) bool { return n >= 500<<10 })
	sendFrames(h, 1, rest, true)
	r, err := h.read(1)
	if err != nil {
		t.Fatal(err)
	}
	if st := field(r.trailers, "grpc-status"); st != "0" {
		t.Fatalf("grpc-status %q (%s), want 0", st, field(r.trailers, "grpc-message"))
	}
	stream, _, _, _ := a.get()
	a.mu.Lock()
	got := a.ended[stream]
	a.mu.Unlock()
	var fwd pb.ModelInferRequest
	if err := proto.Unmarshal(got[5:], &fwd); err != nil {
		t.Fatalf("the backend got a message that does not decode: %v", err)
	}
	if int(uint32(got[1])<<24|uint32(got[2])<<16|uint32(got[3])<<8|uint32(got[4])) != len(got)-5 {
		t.Fatal("the length prefix vig declared is not the length it sent")
	}
	if fwd.Id != "through" || len(fwd.RawInputContents) != 1 || !bytes.Equal(fwd.RawInputContents[0], req.RawInputContents[0]) {
		t.Fatalf("the backend got id %q and %d raw inputs, not the request", fwd.Id, len(fwd.RawInputContents))
	}
	if _, ok := fwd.Parameters[wire.ParamStream]; ok {
		t.Error("vig's own parameter was forwarded")
	}
	drained(t, e.gw)
}

// A field after raw_input_contents (valid protobuf; no encoder writes it):
// INVALID_ARGUMENT, and the backend never gets the request's end.
func TestCutThroughRefusesFieldAfterRaw(t *testing.T) {
	e, a, h := cutThroughEnv(t)
	body := mustMarshal(t, inferRequest("detector", "late", 400<<10))
	body = protowire.AppendString(protowire.AppendTag(body, 3, protowire.BytesType), "late-id")
	if err := h.headers(1, h.block("/inference.GRPCInferenceService/ModelInfer"), false); err != nil {
		t.Fatal(err)
	}
	sendFrames(h, 1, grpcMessage(body), true)
	r, err := h.read(1)
	if err != nil {
		t.Fatal(err)
	}
	tr := append(r.headers, r.trailers...) // a trailers-only answer carries them in its headers
	if st, m := field(tr, "grpc-status"), field(tr, "grpc-message"); st != "3" || !strings.Contains(m, "raw_input_contents") {
		t.Fatalf("grpc-status %q %q, want 3 (INVALID_ARGUMENT) naming raw_input_contents", st, m)
	}
	if _, n, ended, _ := a.get(); ended {
		t.Fatalf("the backend got the whole refused request (%d bytes)", n)
	}
	drained(t, e.gw)
}

// The client resets its stream, or ends it, inside the request: the backend
// stream is reset; the call is answered once.
func TestCutThroughClientLeavesMidRequest(t *testing.T) {
	for _, how := range []string{"reset", "end"} {
		t.Run(how, func(t *testing.T) {
			e, a, h := cutThroughEnv(t)
			msg := grpcMessage(mustMarshal(t, inferRequest("detector", "left", 1<<20)))
			if err := h.headers(1, h.block("/inference.GRPCInferenceService/ModelInfer"), false); err != nil {
				t.Fatal(err)
			}
			sendFrames(h, 1, msg[:300<<10], false)
			waitArrived(t, a, "the request's start", func(n int, ended, rst bool) bool { return n >= 200<<10 })
			if how == "reset" {
				h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
				h.flush()
			} else {
				h.fr.WriteData(1, true, nil)
				h.flush()
				r, err := h.read(1)
				if err != nil {
					t.Fatal(err)
				}
				if st := field(append(r.headers, r.trailers...), "grpc-status"); st != "13" {
					t.Errorf("a request ended inside its message: grpc-status %q, want 13 (INTERNAL)", st)
				}
			}
			waitArrived(t, a, "RST_STREAM", func(n int, ended, rst bool) bool { return rst })
			if _, _, ended, _ := a.get(); ended {
				t.Error("the backend got the request's end")
			}
			drained(t, e.gw)
		})
	}
}

// A large request that waits in vig's queue while it arrives: its bytes
// gather, and follow it to the backend when it starts, whether it starts
// once all have arrived or with part of them still to come.
func TestCutThroughWaitsInQueue(t *testing.T) {
	for _, when := range []string{"after", "during"} {
		t.Run("starts "+when+" the end", func(t *testing.T) {
			e, _, p := governedProbe(t)
			c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
			holdDone := holdA(t, ctxT(t), c, p)

			req := streamRequest("b", "m", 1, 0)
			data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
			req.RawInputContents[0], req.Inputs[0].Shape = data, []int64{int64(len(data))}
			msg := grpcMessage(mustMarshal(t, req))
			h := dialH2(t, e.tcp)
			if err := h.headers(1, h.block("/inference.GRPCInferenceService/ModelInfer", "x-probe", "echo", "x-probe-id", "b"), false); err != nil {
				t.Fatal(err)
			}
			sendFrames(h, 1, msg[:len(msg)/2], false)
			eventually(t, "b waiting in vig", func() bool { return streamCounters(t, e.reg)["b"]["waiting"] == 1 })
			if when == "after" {
				sendFrames(h, 1, msg[len(msg)/2:], true)
				time.Sleep(20 * time.Millisecond) // (the order of arrival and start; either way the bytes must follow)
				p.unhold()
			} else {
				p.unhold()
				p.waitStartedID(t, "b", 1)
				sendFrames(h, 1, msg[len(msg)/2:], true)
			}
			if err := <-holdDone; err != nil {
				t.Fatalf("the held call: %v", err)
			}
			r, err := h.read(1)
			if err != nil {
				t.Fatal(err)
			}
			if st := field(append(r.headers, r.trailers...), "grpc-status"); st != "0" {
				t.Fatalf("grpc-status %q (%s)", st, field(r.trailers, "grpc-message"))
			}
			var out pb.ModelInferResponse
			if len(r.data) < 5 || proto.Unmarshal(r.data[5:], &out) != nil || len(out.RawOutputContents) != 1 || !bytes.Equal(out.RawOutputContents[0], data) {
				t.Fatal("the backend did not get the request's bytes (its echo differs)")
			}
			drained(t, e.gw)
		})
	}
}

// A client that stops inside a request whose call has started: after the
// stall bound it is answered DEADLINE_EXCEEDED saying why, and the backend
// stream is reset (the slot is not held by a client that went quiet).
func TestCutThroughStalledBody(t *testing.T) {
	defer gateway.SetBodyStall(100 * time.Millisecond)()
	e, a, h := cutThroughEnv(t)
	msg := grpcMessage(mustMarshal(t, inferRequest("detector", "stalled", 1<<20)))
	if err := h.headers(1, h.block("/inference.GRPCInferenceService/ModelInfer"), false); err != nil {
		t.Fatal(err)
	}
	sendFrames(h, 1, msg[:300<<10], false)
	waitArrived(t, a, "the request's start", func(n int, ended, rst bool) bool { return n >= 200<<10 })
	r, err := h.read(1)
	if err != nil {
		t.Fatal(err)
	}
	tr := append(r.headers, r.trailers...)
	if st, m := field(tr, "grpc-status"), field(tr, "grpc-message"); st != "4" || !strings.Contains(m, "stopped+arriving") && !strings.Contains(m, "stopped arriving") && !strings.Contains(m, "stopped%20arriving") {
		t.Fatalf("grpc-status %q %q, want 4 (DEADLINE_EXCEEDED) saying the bytes stopped arriving", st, m)
	}
	waitArrived(t, a, "RST_STREAM", func(n int, ended, rst bool) bool { return rst })
	drained(t, e.gw)
}

// A request that arrives slowly but without a pause as long as bodyStall is
// not a stalled one, however long it takes in all: the stall watch looks at
// a call once a bound after the last look, and keeps it while bytes arrive.
// Then a stalled request on the same gateway is still caught.
func TestCutThroughSlowBodyIsNotStalled(t *testing.T) {
	const bound = 600 * time.Millisecond // pieces bound/6 apart: a wide margin on a slow machine
	defer gateway.SetBodyStall(bound)()
	e, a, h := cutThroughEnv(t)
	msg := grpcMessage(mustMarshal(t, inferRequest("detector", "slow", 1<<20)))
	if err := h.headers(1, h.block("/inference.GRPCInferenceService/ModelInfer"), false); err != nil {
		t.Fatal(err)
	}
	sendFrames(h, 1, msg[:200<<10], false)
	waitArrived(t, a, "the request's start", func(n int, ended, rst bool) bool { return n >= 150<<10 })
	start := time.Now()
	// 13 pieces of 64 KiB, bound/6 apart: over two bounds in all.
	for rest := msg[200<<10:]; len(rest) > 0; time.Sleep(bound / 6) {
		k := min(len(rest), 64<<10)
		sendFrames(h, 1, rest[:k], k == len(rest))
		rest = rest[k:]
	}
	r, err := h.read(1)
	if err != nil {
		t.Fatal(err)
	}
	if st := field(r.trailers, "grpc-status"); st != "0" {
		t.Fatalf("a request sent over %v in pieces %v apart: grpc-status %q (%s), want 0", time.Since(start).Round(time.Millisecond), bound/6, st, field(r.trailers, "grpc-message"))
	}

	if err := h.headers(3, h.block("/inference.GRPCInferenceService/ModelInfer"), false); err != nil {
		t.Fatal(err)
	}
	sendFrames(h, 3, msg[:300<<10], false)
	r, err = h.read(3)
	if err != nil {
		t.Fatal(err)
	}
	tr := append(r.headers, r.trailers...)
	if st := field(tr, "grpc-status"); st != "4" {
		t.Fatalf("the stalled request after it: grpc-status %q (%s), want 4 (DEADLINE_EXCEEDED)", st, field(tr, "grpc-message"))
	}
	drained(t, e.gw)
}
