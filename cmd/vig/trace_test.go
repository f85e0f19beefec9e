package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// traceScenario: a protected detector sent by three sensors at once (its
// latest queue supersedes), an exclusive best-effort VLM that blocks it, and a
// high stream whose frames reach vig too old to make their deadline.
const traceScenario = `
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models:
  det: {exec_ms: 3}
  vlm: {exec_ms: 25, corun: false}
  late: {exec_ms: 8}
streams:
  - {name: det, model: det, class: protected, period_ms: 10, max_age_ms: 200}
  - {name: vlm, model: vlm, class: best_effort, period_ms: 100, max_age_ms: 2000, queue: fifo, capacity: 2}
  - {name: late, model: late, class: high, period_ms: 50, max_age_ms: 12}
trace: {buffer_events: 200000}
`

type traceRig struct {
	cfg    *config.Config
	addrs  map[string]string
	client pb.GRPCInferenceServiceClient
	cancel context.CancelFunc
	served chan error
	cc     *grpc.ClientConn
}

func startTraceRig(t *testing.T, to traceOptions) *traceRig {
	return startTraceRigWith(t, traceScenario, to)
}

func startTraceRigWith(t *testing.T, yaml string, to traceOptions) *traceRig {
	t.Helper()
	cfg, err := config.Parse("trace.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	r := &traceRig{cfg: cfg, cancel: cancel, served: make(chan error, 1)}
	go func() {
		r.served <- serveWith(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil, nil, to)
	}()
	select {
	case r.addrs = <-ready:
	case err := <-r.served:
		t.Fatalf("serve: %v", err)
	}
	r.cc, err = grpc.NewClient("passthrough:///"+r.addrs["grpc"], append(gateway.DialOptions(cfg.GRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	r.client = pb.NewGRPCInferenceServiceClient(r.cc)
	return r
}

func (r *traceRig) stop(t *testing.T) {
	r.cc.Close()
	r.cancel()
	if err := <-r.served; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// load runs the scenario's sensors until stop is closed, then waits for every
// call to be answered; it returns the number of answers.
// traceSensor sends frames of one stream, one at a time.
type traceSensor struct {
	stream string
	old    time.Duration // capture this long before sending
	gap    time.Duration
	client time.Duration // the client's deadline
	input  bool          // with a [1, 16] UINT8 tensor (a batching model's frame)
}

func (r *traceRig) load(stop <-chan struct{}, answers *atomic.Uint64) *sync.WaitGroup {
	return r.loadWith(stop, answers, []traceSensor{
		{"det", 0, 2 * time.Millisecond, 5 * time.Second, false},
		{"det", 0, 3 * time.Millisecond, 5 * time.Second, false},
		{"det", 0, 4 * time.Millisecond, 5 * time.Second, false},
		{"vlm", 0, 10 * time.Millisecond, 5 * time.Second, false},
		{"vlm", 0, 10 * time.Millisecond, 4 * time.Millisecond, false}, // leaves while waiting: cancelled
		{"late", 8 * time.Millisecond, 5 * time.Millisecond, 5 * time.Second, false},
	})
}

func (r *traceRig) loadWith(stop <-chan struct{}, answers *atomic.Uint64, sensors []traceSensor) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, s := range sensors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := uint64(0); ; f++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), s.client)
				model := s.stream
				if s.input {
					model = "bat"
				}
				req := &pb.ModelInferRequest{ModelName: model, Id: fmt.Sprintf("%s#%d.%d", s.stream, i, f),
					Parameters: map[string]*pb.InferParameter{
						wire.ParamStream:  {ParameterChoice: &pb.InferParameter_StringParam{StringParam: s.stream}},
						wire.ParamCapture: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: clock.Monotonic() - int64(s.old)}},
					}}
				if s.input {
					req.Inputs = []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{1, 16}}}
					req.RawInputContents = [][]byte{make([]byte, 16)}
				}
				r.client.ModelInfer(ctx, req)
				cancel()
				answers.Add(1)
				time.Sleep(s.gap)
			}
		}()
	}
	return &wg
}

var (
	requestsLine = regexp.MustCompile(`(?m)^vig_stream_requests_total\{([^}]*)\} ([0-9.e+]+)$`)
	labelPair    = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
)

// scrapeOutcomes reads vig_stream_requests_total by stream and outcome.
func scrapeOutcomes(t *testing.T, addr string) map[string]map[string]uint64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	out := map[string]map[string]uint64{}
	for _, m := range requestsLine.FindAllStringSubmatch(string(body), -1) {
		var outcome, stream string
		for _, l := range labelPair.FindAllStringSubmatch(m[1], -1) {
			switch l[1] {
			case "outcome":
				outcome = l[2]
			case "stream":
				stream = l[2]
			}
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		if out[stream] == nil {
			out[stream] = map[string]uint64{}
		}
		out[stream][outcome] = uint64(v)
	}
	if len(out) == 0 {
		t.Fatalf("no vig_stream_requests_total in /metrics:\n%s", body)
	}
	return out
}

// TestTraceMatchesCounters drives the scenario through vig serve --trace and
// checks the recorded run: every frame vig accepted arrives once and is
// answered once, after its arrival; the answers per stream and outcome equal
// vig's counters; and the file is valid trace-event JSON. Meanwhile a window
// asked with vig trace (the CLI's client) is valid too.
func TestTraceMatchesCounters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vig under load for about two seconds")
	}
	file := filepath.Join(t.TempDir(), "run.trace.json")
	windows := make(chan *trace.Window, 1)
	rig := startTraceRig(t, traceOptions{file: file, window: windows})
	stop := make(chan struct{})
	var answers atomic.Uint64
	wg := rig.load(stop, &answers)

	// vig trace, while the run is recorded.
	cli := filepath.Join(t.TempDir(), "cli.trace.json")
	n, hdr, err := fetchTrace(context.Background(), traceRequest{addr: rig.addrs["metrics"], seconds: 0.5, out: cli})
	if err != nil || n == 0 || hdr.Get("X-Vig-Trace-Events") == "0" {
		t.Fatalf("vig trace: %d bytes, %s events, %v", n, hdr.Get("X-Vig-Trace-Events"), err)
	}
	checkChromeFile(t, cli)

	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	metrics := scrapeOutcomes(t, rig.addrs["metrics"]) // quiescent: nothing in flight
	rig.stop(t)
	win := <-windows

	got, frames := checkTrace(t, win, metrics)
	for _, need := range []struct{ stream, outcome string }{{"det", "forwarded"}, {"det", "superseded"}, {"late", "late_dropped"}, {"vlm", "cancelled"}} {
		if got[need.stream][need.outcome] == 0 {
			t.Errorf("the scenario had no %s frame on %s: %v", need.outcome, need.stream, got)
		}
	}
	// A client that gives up before vig reads its request has an answer
	// (its own deadline) and no frame in vig.
	if uint64(frames) > answers.Load() {
		t.Errorf("%d frames traced, clients got %d answers", frames, answers.Load())
	}
	t.Logf("%d events, %d frames: %v", len(win.Events), frames, got)
	checkChromeFile(t, file)
}

// checkChromeFile checks a file against the trace-event format: an object
// with traceEvents, each event with a known phase and its required fields,
// complete events in order on each track, and every track and process named.
func checkChromeFile(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s is not JSON: %v", path, err)
	}
	if len(doc.TraceEvents) == 0 {
		t.Fatalf("%s: no traceEvents", path)
	}
	type track struct{ pid, tid float64 }
	procNamed, threadNamed := map[float64]bool{}, map[track]bool{}
	used := map[track]bool{}
	lastX := map[track]float64{}
	phases := map[string]int{}
	for i, e := range doc.TraceEvents {
		ph, _ := e["ph"].(string)
		_, hasName := e["name"].(string)
		pid, okP := e["pid"].(float64)
		tid, okT := e["tid"].(float64)
		ts, okTs := e["ts"].(float64)
		phases[ph]++
		if !hasName || !okP {
			t.Fatalf("%s event %d lacks name or pid: %v", path, i, e)
		}
		switch ph {
		case "M":
			args, _ := e["args"].(map[string]any)
			switch e["name"] {
			case "process_name":
				procNamed[pid] = args["name"] != nil
			case "thread_name":
				threadNamed[track{pid, tid}] = args["name"] != nil
			}
		case "X":
			dur, okD := e["dur"].(float64)
			if !okT || !okTs || !okD || dur < 0 {
				t.Fatalf("%s event %d: a complete event needs tid, ts and dur ≥ 0: %v", path, i, e)
			}
			k := track{pid, tid}
			if ts < lastX[k] {
				t.Fatalf("%s event %d: starts at %v on track %v, before the previous (%v)", path, i, ts, k, lastX[k])
			}
			lastX[k], used[k] = ts, true
		case "C", "i", "I", "b", "e", "n", "s", "t", "f", "B", "E":
			if !okTs {
				t.Fatalf("%s event %d (%s) has no ts: %v", path, i, ph, e)
			}
			if ph != "C" {
				used[track{pid, tid}] = true
			}
		default:
			t.Fatalf("%s event %d: unknown phase %q", path, i, ph)
		}
	}
	for k := range used {
		if !procNamed[k.pid] || !threadNamed[k] {
			t.Errorf("%s: track pid %v tid %v is used but not named (process %v, thread %v)", path, k.pid, k.tid, procNamed[k.pid], threadNamed[k])
		}
	}
	if phases["X"] == 0 || phases["M"] == 0 || phases["C"] == 0 {
		t.Errorf("%s: phases %v; want complete events, names and counters", path, phases)
	}
}

// TestTraceStuckClient: a /debug/trace client that never reads its window
// does not stall the data path: requests keep being answered during and after
// its window, and other windows are served.
func TestTraceStuckClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vig under load for about three seconds")
	}
	rig := startTraceRig(t, traceOptions{})
	defer rig.stop(t)
	stop := make(chan struct{})
	var answers atomic.Uint64
	wg := rig.load(stop, &answers)
	defer func() { close(stop); wg.Wait() }()

	conn, err := net.Dial("tcp", rig.addrs["metrics"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(conn, "GET /debug/trace?seconds=1 HTTP/1.1\r\nHost: vig\r\n\r\n") // and never read
	time.Sleep(1200 * time.Millisecond)                                           // its window is recorded; vig writes it

	for round := range 3 {
		before := answers.Load()
		time.Sleep(300 * time.Millisecond)
		if answers.Load() < before+20 {
			t.Fatalf("round %d: %d answers in 300 ms while a trace client does not read", round, answers.Load()-before)
		}
	}
	_, hdr, err := fetchTrace(context.Background(), traceRequest{addr: rig.addrs["metrics"], seconds: 0.2, out: filepath.Join(t.TempDir(), "t.json")})
	if err != nil || hdr.Get("X-Vig-Trace-Events") == "0" {
		t.Fatalf("a second window while the first client is stuck: %v", err)
	}
	// The live page, meanwhile.
	resp, err := http.Get("http://" + rig.addrs["metrics"] + "/debug/timeline?seconds=0.3&format=svg")
	if err != nil {
		t.Fatal(err)
	}
	svg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "det") {
		t.Fatalf("/debug/timeline: %s\n%.300s", resp.Status, svg)
	}
	// The stuck client indeed holds an unread window.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	status, _ := br.ReadString('\n')
	if !strings.Contains(status, "200") {
		t.Fatalf("stuck client's answer: %q", status)
	}
}

// TestTraceToken: with listen.auth.token_file, /debug/trace and
// /debug/timeline want the token, and vig trace --token-file sends it.
func TestTraceToken(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("tok.yaml", []byte(fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0", auth: {token_file: %q}}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models: {det: {exec_ms: 3}}
streams: [{name: det, model: det, class: protected, period_ms: 10, max_age_ms: 200}]
`, tok)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil) }()
	addrs := <-ready
	defer func() {
		cancel()
		<-served
	}()
	for _, path := range []string{"/debug/trace?seconds=0.1", "/debug/timeline?seconds=0.1"} {
		resp, err := http.Get("http://" + addrs["metrics"] + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: %s", path, resp.Status)
		}
	}
	out := filepath.Join(dir, "t.json")
	if _, _, err := fetchTrace(context.Background(), traceRequest{addr: addrs["metrics"], seconds: 0.1, out: out}); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("vig trace without --token-file: %v", err)
	}
	if _, _, err := fetchTrace(context.Background(), traceRequest{addr: addrs["metrics"], seconds: 0.1, out: out, tokenFile: tok}); err != nil {
		t.Errorf("vig trace --token-file: %v", err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("vig trace --token-file wrote no file: %v", err)
	}
}

// checkTrace checks a recorded run against vig's counters scraped at its end
// (nothing in flight): every frame arrives once and is answered once, after
// its arrival; a frame dispatched alone completes once, a batch once for its
// lead; the answers per stream and outcome equal the counters. It returns the
// answers by stream and outcome, and the number of frames.
func checkTrace(t *testing.T, win *trace.Window, metrics map[string]map[string]uint64) (map[string]map[string]uint64, int) {
	t.Helper()
	if win.Dropped != 0 {
		t.Fatalf("%d events dropped from a ring of 200000", win.Dropped)
	}
	type life struct {
		arrive, answer, dispatch, complete int
		tArrive, tAnswer                   int64
		stream                             int32
		outcome                            sched.Outcome
		id                                 string
		batch                              uint64 // the lead of the batch it was dispatched in
		batchSize                          int16
		members                            int // a lead: the dispatches naming it
	}
	frames := map[uint64]*life{}
	get := func(tok uint64) *life {
		if frames[tok] == nil {
			frames[tok] = &life{}
		}
		return frames[tok]
	}
	for _, e := range win.Events {
		f := get(e.Token)
		switch e.Kind {
		case trace.Arrive:
			f.arrive++
			f.tArrive, f.stream, f.id = e.Time, e.Stream, e.ID
		case trace.Answer:
			f.answer++
			f.tAnswer, f.outcome = e.Time, sched.Outcome(e.Outcome)
			if e.Stream != f.stream {
				t.Errorf("token %d: answered on stream %d, arrived on %d", e.Token, e.Stream, f.stream)
			}
		case trace.Dispatch:
			f.dispatch++
			if e.Accel != 0 || e.Slot != 0 || e.Busy < 1 {
				t.Errorf("dispatch %+v: want accelerator 0, slot 0, busy ≥ 1", e)
			}
			if e.Batch != 0 {
				f.batch, f.batchSize = e.Batch, e.BatchSize
				get(e.Batch).members++
			}
		case trace.Complete:
			f.complete++
			if f.batch != 0 && (e.Batch != f.batch || e.BatchSize != f.batchSize) {
				t.Errorf("completion %+v of a batch of %d led by %d", e, f.batchSize, f.batch)
			}
		}
	}
	got := map[string]map[string]uint64{}
	for tok, f := range frames {
		completions := f.dispatch // alone: its own; a batch: its lead's
		if f.batch != 0 && f.batch != tok {
			completions = 0
		}
		if f.batch == tok && f.members != int(f.batchSize) {
			t.Errorf("batch led by %d: %d dispatches, size %d", tok, f.members, f.batchSize)
		}
		if f.arrive != 1 || f.answer != 1 || f.tAnswer < f.tArrive || f.dispatch > 1 || f.complete != completions {
			t.Fatalf("token %d: %d arrivals, %d answers, %d dispatches, %d completions (arrived %d, answered %d)",
				tok, f.arrive, f.answer, f.dispatch, f.complete, f.tArrive, f.tAnswer)
		}
		if !strings.Contains(f.id, "#") {
			t.Errorf("token %d: request id %q, want the client's", tok, f.id)
		}
		name := win.Streams[f.stream].Name
		if got[name] == nil {
			got[name] = map[string]uint64{}
		}
		got[name]["received"]++
		got[name][f.outcome.String()]++
	}
	for stream, want := range metrics {
		for outcome, v := range want {
			if stream != "batches" && got[stream][outcome] != v {
				t.Errorf("stream %s, %s: trace %d, metrics %d", stream, outcome, got[stream][outcome], v)
			}
		}
	}
	batches := 0
	for tok, f := range frames {
		if f.batch == tok {
			batches++
		}
	}
	got["batches"] = map[string]uint64{"count": uint64(batches)}
	return got, len(frames)
}

// TestTraceBatches: frames of four streams of a batching model: a batch is
// dispatched as one job (every member's dispatch names its lead and size),
// completes once, and answers each member; the counts still equal vig's.
func TestTraceBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vig under load for about a second")
	}
	yaml := `
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models:
  bat: {exec_ms: 6, max_batch: 4}
streams:
  - {name: b0, model: bat, class: high, period_ms: 20, max_age_ms: 500}
  - {name: b1, model: bat, class: high, period_ms: 20, max_age_ms: 500}
  - {name: b2, model: bat, class: high, period_ms: 20, max_age_ms: 500}
  - {name: b3, model: bat, class: high, period_ms: 20, max_age_ms: 500}
trace: {buffer_events: 200000}
`
	windows := make(chan *trace.Window, 1)
	rig := startTraceRigWith(t, yaml, traceOptions{file: filepath.Join(t.TempDir(), "b.trace.json"), window: windows})
	stop := make(chan struct{})
	var answers atomic.Uint64
	var sensors []traceSensor
	for _, b := range []string{"b0", "b1", "b2", "b3"} {
		sensors = append(sensors, traceSensor{stream: b, gap: 2 * time.Millisecond, client: 5 * time.Second, input: true})
	}
	wg := rig.loadWith(stop, &answers, sensors)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	metrics := scrapeOutcomes(t, rig.addrs["metrics"])
	rig.stop(t)
	got, frames := checkTrace(t, <-windows, metrics)
	if got["batches"]["count"] == 0 {
		t.Errorf("no batch among %d frames: %v", frames, got)
	}
	t.Logf("%d frames: %v", frames, got)
}

// TestTraceFlags: bad trace flags exit 2 saying what to give.
func TestTraceFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"trace", "--seconds", "0"}, "give more than 0 and at most 60"},
		{[]string{"trace", "--seconds", "61"}, "give more than 0 and at most 60"},
		{[]string{"trace", "--addr", "ftp://x:1"}, "give HOST:PORT"},
		{[]string{"trace", "extra"}, "unexpected argument"},
		{[]string{"trace", "--token-file", "/nonexistent/token", "--seconds", "1"}, "--token-file"},
		{[]string{"serve", "--trace-seconds", "5", "-c", "x.yaml"}, "--trace-seconds N needs --trace FILE"},
		{[]string{"serve", "--trace", "/nonexistent/dir/t.json", "-c", "x.yaml"}, "give a file in a directory vig can write"},
	} {
		out, code := captureStd(t, func() int { return run(tc.args) })
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("vig %v: exit %d, want 2 saying %q:\n%s", tc.args, code, tc.want, out)
		}
	}
}
