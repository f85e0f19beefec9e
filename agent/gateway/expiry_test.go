package gateway_test

// vig's own deadline for calls on the backend (expiry.go), against a backend
// that honours nothing: not the grpc-timeout vig forwards, not vig's RST_STREAM.

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// deafBackend speaks gRPC over raw HTTP/2. A call whose x-probe-id is "hang" is
// never answered: not at its grpc-timeout, not when vig resets it (a wedged
// runtime behind a server that does not enforce deadlines). Every other
// ModelInfer is answered at once with the request's model name and id.
type deafBackend struct {
	addr     string
	hung     atomic.Int64 // hung calls received
	reset    atomic.Int64 // RST_STREAMs received for hung calls
	timeouts chan string  // the grpc-timeout of each hung call ("" for none)
}

func startDeafBackend(t *testing.T) *deafBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &deafBackend{addr: ln.Addr().String(), timeouts: make(chan string, 256)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return d
}

func (d *deafBackend) serve(c net.Conn) {
	defer c.Close()
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(bw, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	block := func(fields ...string) []byte {
		hbuf.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return append([]byte(nil), hbuf.Bytes()...)
	}
	fr.WriteSettings()
	bw.Flush()
	hung := map[uint32]bool{}
	body := map[uint32][]byte{}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			if field(f.Fields, "x-probe-id") == "hang" {
				hung[f.StreamID] = true
				d.hung.Add(1)
				select {
				case d.timeouts <- field(f.Fields, "grpc-timeout"):
				default:
				}
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				fr.WriteWindowUpdate(0, uint32(n))
			}
			if hung[f.StreamID] {
				break
			}
			body[f.StreamID] = append(body[f.StreamID], f.Data()...)
			if !f.StreamEnded() {
				break
			}
			b := body[f.StreamID]
			delete(body, f.StreamID)
			var in pb.ModelInferRequest
			if len(b) < 5 || proto.Unmarshal(b[5:], &in) != nil {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, EndStream: true, EndHeaders: true,
					BlockFragment: block(":status", "200", "content-type", "application/grpc", "grpc-status", "3")})
				break
			}
			out, _ := proto.Marshal(&pb.ModelInferResponse{ModelName: in.ModelName, Id: in.Id})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, EndHeaders: true,
				BlockFragment: block(":status", "200", "content-type", "application/grpc")})
			fr.WriteData(f.StreamID, false, grpcMessage(out))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, EndStream: true, EndHeaders: true,
				BlockFragment: block("grpc-status", "0")})
		case *http2.RSTStreamFrame:
			if hung[f.StreamID] {
				d.reset.Add(1)
			}
		}
		if err := bw.Flush(); err != nil {
			return
		}
	}
}

// expiryYAML: one slot, so that a call the backend holds blocks every other one
// until vig gives up on it; vig waits 300 ms for a call whose client set no
// deadline.
const expiryYAML = `
listen: {metrics: "off"}
backend: {slots: 1, stats_interval_ms: -1, call_timeout_ms: 300}
scheduler: {safety_margin_pct: 100, pipeline: false}
models:
  m: {exec_ms: 5}
streams:
  - {name: a, model: m, class: protected, period_ms: 1000, max_age_ms: 60000}
  - {name: b, model: m, class: protected, period_ms: 1000, max_age_ms: 60000}
`

func echoCtx(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-probe-id", id)
}

// A backend that ignores grpc-timeout and vig's resets, on the only slot:
//   - a raw HTTP/2 client that sends grpc-timeout and never resets its stream is
//     answered DEADLINE_EXCEEDED by vig, once, and the backend's stream is reset;
//   - a gRPC client without a deadline is answered DEADLINE_EXCEEDED after
//     backend.call_timeout_ms, naming the key; vig sent the backend no
//     grpc-timeout for it;
//   - after each, the slot is free: the next call runs although the backend
//     still holds the abandoned ones;
//   - the expiries are counted, the scheduler balances, no slot stays busy.
func TestBackendIgnoresDeadline(t *testing.T) {
	d := startDeafBackend(t)
	e, _, _ := governedAt(t, expiryYAML, d.addr)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	echo := func(what, stream string, frame uint64) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := c.ModelInfer(echoCtx(rctx, "echo"), streamRequest(stream, "m", frame, 0))
		if err != nil {
			t.Fatalf("%s: %v (slot not released?)", what, err)
		}
		if r.Id != streamRequest(stream, "m", frame, 0).Id {
			t.Fatalf("%s: answer for %q", what, r.Id)
		}
	}
	echo("before any hang", "b", 1)

	h := dialH2(t, e.tcp)
	msg, err := proto.Marshal(streamRequest("a", "m", 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.call(1, wire.MethodInfer, msg, "grpc-timeout", "200m", "x-probe-id", "hang")
	if err != nil {
		t.Fatalf("raw client, deaf backend: no answer (%v): vig did not give up on the call", err)
	}
	if r.rst != nil || field(r.trailers, "grpc-status") != strconv.Itoa(int(codes.DeadlineExceeded)) {
		t.Fatalf("raw client, deaf backend: rst %v trailers %v, want grpc-status 4 (DEADLINE_EXCEEDED)", r.rst, r.trailers)
	}
	if got := <-d.timeouts; got == "" {
		t.Error("vig forwarded no grpc-timeout for a client with a deadline")
	}
	echo("after the raw client's expiry", "b", 2)

	// No deadline; a hang guard that cancels after 30 s instead.
	guard, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(30*time.Second, cancel).Stop()
	defer cancel()
	start := time.Now()
	_, err = c.ModelInfer(echoCtx(guard, "hang"), streamRequest("a", "m", 2, 0))
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "backend.call_timeout_ms (300 ms)") {
		t.Fatalf("grpc client without deadline, deaf backend: %v, want DEADLINE_EXCEEDED naming backend.call_timeout_ms", err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("answered after %v, before backend.call_timeout_ms (300 ms)", waited) // a lower bound: vig may not give up early
	}
	if got := <-d.timeouts; got != "" {
		t.Errorf("vig forwarded grpc-timeout %q for a client without a deadline", got)
	}
	echo("after the call timeout", "b", 3)

	eventually(t, "the backend sees both abandoned streams reset", func() bool { return d.reset.Load() == 2 })
	drained(t, e.gw)
	m := checkBalanced(t, e.reg)
	if m["a"]["running"]+m["a"]["waiting"] != 0 || m["a"]["backend_error"] != 2 || m["b"]["forwarded"] != 3 {
		t.Errorf("after the expiries: a %v b %v", m["a"], m["b"])
	}
	s := scrape(t, e.reg)
	if s["vig_backend_slots_busy"] != 0 || s["vig_backend_calls_expired_total"] != 2 {
		t.Errorf("vig_backend_slots_busy %v, vig_backend_calls_expired_total %v; want 0 and 2",
			s["vig_backend_slots_busy"], s["vig_backend_calls_expired_total"])
	}
	if got := grpcCodes(t, e.reg, "ModelInfer"); got["DeadlineExceeded"] != 2 || got["OK"] != 3 || sum(got) != 5 {
		t.Errorf("vig_grpc_requests_total ModelInfer: %v, want 2 DeadlineExceeded and 3 OK", got)
	}
}

// Many clients at once, half of their calls on a deaf backend, none with a
// deadline, ungoverned (every call goes to the backend at once): every call is
// answered exactly once — OK for the answered, DEADLINE_EXCEEDED for the others —
// vig's count of answers equals the clients', and nothing stays on the backend.
//
// The call timeout is 1.5 s here, not expiryYAML's 300 ms: on a loaded machine
// (or under qemu) 48 concurrent calls on one slot made answered calls take longer
// than 300 ms too.
func TestBackendIgnoresDeadlineConcurrent(t *testing.T) {
	d := startDeafBackend(t)
	e, _, _ := governedAt(t, strings.Replace(expiryYAML, "call_timeout_ms: 300", "call_timeout_ms: 1500", 1), d.addr)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	const clients, calls = 8, 6
	// A hang guard that is not a deadline (a deadline would be forwarded and
	// enforced as the client's): it cancels what is left after 30 s.
	guard, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(30*time.Second, cancel).Stop()
	defer cancel()
	var wg sync.WaitGroup
	var ok, expired atomic.Int64
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				id := "echo"
				if (g+i)%2 == 0 {
					id = "hang"
				}
				_, err := c.ModelInfer(echoCtx(guard, id), inferRequest("ungoverned", id, 16))
				switch code := status.Code(err); {
				case code == codes.OK && id == "echo":
					ok.Add(1)
				case code == codes.DeadlineExceeded && id == "hang" && strings.Contains(err.Error(), "call_timeout_ms"):
					expired.Add(1)
				default:
					t.Errorf("client %d call %d (%s): %v", g, i, id, err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != clients*calls/2 || expired.Load() != clients*calls/2 {
		t.Errorf("%d OK, %d DEADLINE_EXCEEDED; want %d of each", ok.Load(), expired.Load(), clients*calls/2)
	}
	drained(t, e.gw)
	eventually(t, "every abandoned stream reset", func() bool { return d.reset.Load() == clients*calls/2 })
	s := scrape(t, e.reg)
	if s["vig_backend_calls_expired_total"] != clients*calls/2 {
		t.Errorf("vig_backend_calls_expired_total %v, want %d", s["vig_backend_calls_expired_total"], clients*calls/2)
	}
	if got := grpcCodes(t, e.reg, "ModelInfer"); got["OK"]+got["DeadlineExceeded"] != clients*calls || sum(got) != clients*calls {
		t.Errorf("vig_grpc_requests_total ModelInfer: %v, want %d answers, OK or DeadlineExceeded", got, clients*calls)
	}
}

func sum(m map[string]float64) (n float64) {
	for _, v := range m {
		n += v
	}
	return n
}
