package ringback

// Fault injection on the ring backend (issue 15): the same faults the gRPC
// backend is tested with. A runtime that hangs, one that is slow; a runtime
// killed mid-load is in cmd/vig (TestRingBackendKilledUnderLoad: the runtime is a
// process there).

import (
	"bufio"
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
)

// wedgedRuntime serves a ring: requests for model "hang" are held, unanswered,
// until release is closed (a wedged accelerator), then answered; every other
// request is answered at once with an empty payload. held counts the requests
// it holds now. Other requests are answered after slow (0: at once).
type wedgedRuntime struct {
	addr    string
	release chan struct{}
	once    sync.Once
	held    atomic.Int64
	slow    atomic.Int64 // ns
}

// unwedge lets the held requests be answered, and later ones at once.
func (w *wedgedRuntime) unwedge() { w.once.Do(func() { close(w.release) }) }

func startWedgedRuntime(t *testing.T) *wedgedRuntime {
	t.Helper()
	w := &wedgedRuntime{release: make(chan struct{})}
	w.addr = serveRuntime(t, func(c *shmring.Conn) {
		c.Serve(context.Background(), func(ctx context.Context, req *shmring.Request) {
			if req.Model == "hang" {
				w.held.Add(1)
				select {
				case <-w.release:
				case <-ctx.Done(): // the session ended
				}
				w.held.Add(-1)
			} else if d := time.Duration(w.slow.Load()); d > 0 {
				time.Sleep(d)
			}
			c.Respond(req, &shmring.Response{Status: shmring.StatusOK})
		})
	})
	t.Cleanup(w.unwedge) // before serveRuntime's: the held requests are let go first
	return w
}

// ringVig is vig (gateway + governor) in front of a ring runtime, with its
// metrics, over real sockets.
type ringVig struct {
	b   *Backend
	gw  *gateway.Gateway
	reg *metrics.Registry
	c   pb.GRPCInferenceServiceClient
}

func startRingVig(t *testing.T, addr, yaml string) *ringVig {
	t.Helper()
	cfg, err := config.Parse("ring-fault.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend.Address = "ring:" + addr
	v := &ringVig{reg: metrics.New()}
	v.b, err = New(addr, Options{Config: testRing, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.b.Close() })
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	gov.SetObserver(v.reg.NewSched(gov.Snapshot))
	var st netopt.Stats
	v.gw, err = gateway.New(gateway.Options{Config: cfg, Dial: st.DialAddr, Admit: gov, Backend: v.b, Metrics: v.reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.b.WaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", &st)
	if err != nil {
		t.Fatal(err)
	}
	go v.gw.Serve(ln)
	t.Cleanup(v.gw.Stop)
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), append(gateway.DialOptions(cfg.GRPC),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	v.c = pb.NewGRPCInferenceServiceClient(cc)
	return v
}

// scrape reads the registry's series: "name{labels}" → value.
func (v *ringVig) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	v.reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if f, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = f
		}
	}
	return out
}

const ringFaultYAML = `
listen: {metrics: "off"}
backend: {slots: 2, stats_interval_ms: -1, call_timeout_ms: 300}
models:
  det: {exec_ms: 1}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 60000}
`

// A wedged ring runtime holds every request it is sent, more of them than the
// ring has room for, from clients without deadlines: every call is answered
// DEADLINE_EXCEEDED after backend.call_timeout_ms, once, whether it was posted
// or still waited for room, and so is a governed call sent while the runtime
// holds all the room. When the runtime comes back its late answers are dropped
// and the room they held returns: the next call runs, nothing is left held.
func TestRingBackendHangs(t *testing.T) {
	w := startWedgedRuntime(t)
	v := startRingVig(t, w.addr, ringFaultYAML)
	s := v.b.cur.Load()
	room := s.room
	guard, cancel := context.WithCancel(context.Background()) // a hang guard, not a deadline
	defer time.AfterFunc(30*time.Second, cancel).Stop()
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, room+1)
	for i := range room + 1 { // one more than the ring takes: it waits for room
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := v.c.ModelInfer(guard, request("hang", uint64(i), pattern(1000, byte(i))))
			errs <- err
		}()
	}
	waitFor(t, "the runtime to hold as many requests as the ring has room for", func() bool { return w.held.Load() == int64(room) })
	wg.Wait()
	close(errs)
	for err := range errs {
		wantCode(t, "held by the runtime", err, codes.DeadlineExceeded, "backend.call_timeout_ms (300 ms)")
	}
	_, err := v.c.ModelInfer(guard, request("det", 100, []byte{1}))
	wantCode(t, "governed, the room held by abandoned calls", err, codes.DeadlineExceeded, "backend.call_timeout_ms")
	if n := s.busy(); n != room {
		t.Errorf("room in use %d while the runtime holds %d abandoned requests", n, room)
	}

	w.unwedge() // the runtime comes back; its late answers find tombstones
	waitFor(t, "the late answers to return the room", func() bool {
		return s.busy() == 0 && v.b.pendingCalls() == 0 && s.s.Responses.Held() == 0
	})
	in := pattern(1000, 7)
	resp, err := v.c.ModelInfer(guard, request("det", 101, in))
	if err != nil {
		t.Fatalf("after the runtime came back: %v", err)
	}
	if resp.Id != "cam#101" {
		t.Errorf("answer for %q", resp.Id)
	}
	waitFor(t, "vig to answer everything it accepted", func() bool { return v.gw.Accepted() == v.gw.Answered() })
	m := v.scrape(t)
	if got, want := m["vig_backend_calls_expired_total"], float64(room+2); got != want {
		t.Errorf("vig_backend_calls_expired_total %v, want %v", got, want)
	}
	if busy := m["vig_backend_slots_busy"]; busy != 0 {
		t.Errorf("vig_backend_slots_busy %v after the expiries", busy)
	}
	var answered float64
	for k, n := range m {
		if strings.HasPrefix(k, "vig_grpc_requests_total{") && strings.Contains(k, `method="ModelInfer"`) {
			answered += n
		}
	}
	if answered != float64(room+3) {
		t.Errorf("vig answered %v ModelInfer calls, the clients made %d", answered, room+3)
	}
	if n := v.b.stray.Load(); n != 0 {
		t.Errorf("%d answers counted stray: the late answers of abandoned calls are expected, not stray", n)
	}
}

// A ring runtime that is slower than the model's prior (1 ms): every call is
// still answered, and vig's execution-time estimate for the model follows what
// the runtime takes (each call takes at least 20 ms: a lower bound, not a timing
// claim).
func TestRingBackendSlow(t *testing.T) {
	w := startWedgedRuntime(t)
	w.slow.Store(int64(20 * time.Millisecond))
	// No call is meant to expire here: the 300 ms of ringFaultYAML expired a
	// 20 ms call now and then on a loaded machine (2 of 15 runs at load 11,
	// before and after ring ABI 3 alike).
	v := startRingVig(t, w.addr, strings.Replace(ringFaultYAML, "call_timeout_ms: 300", "call_timeout_ms: 10000", 1))
	estimate := func() float64 { return v.scrape(t)[`vig_estimate_seconds{busy="0",model="det"}`] }
	if e := estimate(); e > 0.0015 {
		t.Fatalf("estimate %v s before any call, want the 1 ms prior", e)
	}
	for i := range 30 {
		if _, err := v.c.ModelInfer(context.Background(), request("det", uint64(i), pattern(100, byte(i)))); err != nil {
			t.Fatalf("call %d on a slow runtime: %v", i, err)
		}
	}
	if e := estimate(); e < 0.019 {
		t.Errorf("estimate %v s after 30 calls of at least 20 ms, want it to follow the runtime", e)
	}
}
