package main

// Process-level fault and drain tests (issue 15, items 1 and 2): vig and its
// backend run as real processes (this test binary re-executed as vig), get real
// signals, and are talked to over real sockets.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// runAsVig, set in a child's environment, makes the test binary run vig's main.
const runAsVig = "VIG_TEST_RUN_AS_VIG"

func TestMain(m *testing.M) {
	if os.Getenv(runAsVig) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// proc is vig (or its mock backend) in a child process.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  []string
	news chan struct{} // a line was logged
	done chan struct{} // the process exited; err is set
	err  error
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runAsVig+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, news: make(chan struct{}, 1), done: make(chan struct{})}
	if err := cmd.Start(); errors.Is(err, syscall.ENOEXEC) && runtime.GOARCH == "arm64" {
		// The arm64 tests run under qemu-user, which cannot execve an arm64
		// binary by itself (no binfmt_misc here): run the child under qemu too.
		q, qerr := exec.LookPath("qemu-aarch64")
		if qerr != nil {
			t.Skipf("cannot start %s (%v) and no qemu-aarch64 to run it with", os.Args[0], err)
		}
		stderr.Close()
		p.cmd = exec.Command(q, append([]string{os.Args[0]}, args...)...)
		p.cmd.Env = cmd.Env
		if stderr, err = p.cmd.StderrPipe(); err != nil {
			t.Fatal(err)
		}
		cmd = p.cmd
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
			select {
			case p.news <- struct{}{}:
			default:
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLog waits (at most 30 s: liveness, not speed) for a log line matching re and
// returns its submatches.
func (p *proc) waitLog(re *regexp.Regexp) []string {
	p.t.Helper()
	timeout := time.After(30 * time.Second)
	for seen := 0; ; {
		p.mu.Lock()
		lines := p.log[seen:]
		seen = len(p.log)
		p.mu.Unlock()
		for _, l := range lines {
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		}
		select {
		case <-p.news:
		case <-p.done:
			p.mu.Lock()
			more := len(p.log) > seen
			p.mu.Unlock()
			if !more {
				p.t.Fatalf("process exited (%v) before logging %v:\n%s", p.err, re, p.logText())
			}
		case <-timeout:
			p.t.Fatalf("no log line matching %v in 30 s:\n%s", re, p.logText())
		}
	}
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// exitCode waits (at most 30 s) for the process to exit.
func (p *proc) exitCode() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("still running 30 s after the signal:\n%s", p.logText())
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	p.t.Fatalf("wait: %v", p.err)
	return -1
}

// trailerCounter is a client stats handler that counts, per RPC attempt, the
// trailers received: the client's record of what vig answered.
type trailerCounter struct {
	answered, twice atomic.Int64
}

type attemptKey struct{}

func (c *trailerCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, attemptKey{}, new(atomic.Int32))
}

func (c *trailerCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InTrailer); !ok {
		return
	}
	if ctx.Value(attemptKey{}).(*atomic.Int32).Add(1) == 1 {
		c.answered.Add(1)
	} else {
		c.twice.Add(1)
	}
}

func (c *trailerCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *trailerCounter) HandleConn(context.Context, stats.ConnStats) {}

var (
	servingRe = regexp.MustCompile(`msg="vig serving".* grpc=(\S+)`)
	drainedRe = regexp.MustCompile(`drained: (\d+) answered, (-?\d+) lost`)
)

func frameRequest(stream, model string, frame uint64) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: model, Id: mockbackend.FrameID(stream, frame),
		Parameters: map[string]*pb.InferParameter{
			wire.ParamStream:  {ParameterChoice: &pb.InferParameter_StringParam{StringParam: stream}},
			wire.ParamCapture: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: clock.Monotonic()}},
		}}
}

// SIGTERM to a vig process under load (two streams, one of them queued behind a
// long job): vig exits 0, logs "0 lost", and the number of RPCs it says it
// answered equals the number of answers its clients received, each exactly once.
// Every call ends with a status vig gives (none hangs until its 10 s deadline).
func TestSIGTERMUnderLoadAnswersEachOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drain.yaml")
	os.WriteFile(path, []byte(`
listen: {grpc: "127.0.0.1:0", metrics: "off"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models:
  det: {exec_ms: 3}
  vlm: {exec_ms: 40, corun: false}
streams:
  - {name: det, model: det, class: protected, period_ms: 10, max_age_ms: 200}
  - {name: vlm, model: vlm, class: best_effort, period_ms: 100, max_age_ms: 2000, queue: fifo, capacity: 4}
`), 0o600)
	vig := startProc(t, "serve", "--no-device-checks", "-c", path)
	addr := vig.waitLog(servingRe)[1]

	var counter trailerCounter
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(&counter))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	var mu sync.Mutex
	outcomes := map[codes.Code]int{}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := "det"
			if i < 2 {
				stream = "vlm"
			}
			for f := uint64(0); ; f++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := c.ModelInfer(ctx, frameRequest(stream, stream, f))
				cancel()
				code := status.Code(err)
				mu.Lock()
				outcomes[code]++
				mu.Unlock()
				if code == codes.Unavailable {
					return // vig is draining or gone
				}
			}
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := outcomes[codes.OK]
		mu.Unlock()
		if n >= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no load after 30 s: %v", outcomes)
		}
	}
	if err := vig.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := vig.exitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0:\n%s", code, vig.logText())
	}
	wg.Wait()
	m := vig.waitLog(drainedRe)
	answered, _ := strconv.ParseInt(m[1], 10, 64)
	if m[2] != "0" {
		t.Errorf("vig lost %s accepted requests", m[2])
	}
	if got := counter.answered.Load(); got != answered {
		t.Errorf("clients received %d answers, vig says it answered %d", got, answered)
	}
	if n := counter.twice.Load(); n != 0 {
		t.Errorf("%d calls were answered more than once", n)
	}
	for code, n := range outcomes {
		switch code {
		case codes.OK, codes.Aborted, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted:
		default:
			t.Errorf("%d calls ended with %v", n, code)
		}
	}
	if outcomes[codes.DeadlineExceeded] > 0 && answered == 0 {
		t.Errorf("calls timed out on the client: %v", outcomes)
	}
	t.Logf("vig answered %d; client outcomes %v", answered, outcomes)
}

// freePort returns a loopback address nobody listens on (the kernel's choice).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The backend process is killed (SIGKILL: no GOAWAY, its sockets just die) while
// vig serves two streams: every call in flight and every new one is answered
// UNAVAILABLE before its 1 s deadline (no call ends DEADLINE_EXCEEDED or hangs);
// when the backend is started again on its address vig is ready again within a
// generous bound (reconnect backoff is capped at 1 s), serves both streams, and
// has answered every call it accepted.
func TestBackendKilledUnderLoad(t *testing.T) {
	backendAddr := freePort(t)
	startBackend := func() *proc {
		b := startProc(t, "mock-backend", "--listen", backendAddr, "--model", "det=2", "--model", "pose=4", "--slots", "2")
		b.waitLog(regexp.MustCompile(`msg="mock backend serving"`))
		return b
	}
	backend := startBackend()
	cfg, err := config.Parse("killed.yaml", []byte(fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", metrics: "off"}
backend: {address: %q, slots: 2, stats_interval_ms: -1}
models: {det: {exec_ms: 2}, pose: {exec_ms: 4}}
streams:
  - {name: det, model: det, class: protected, period_ms: 10, max_age_ms: 500}
  - {name: pose, model: pose, class: high, period_ms: 20, max_age_ms: 500}
`, backendAddr)))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	var answered uint64
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), ready, &answered) }()
	addrs := <-ready
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if out := logs.String(); !strings.Contains(out, " 0 lost") {
			t.Errorf("vig lost accepted requests:\n%s", out)
		}
	}()
	cc, err := grpc.NewClient("passthrough:///"+addrs["grpc"], append(gateway.DialOptions(cfg.GRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	waitReady := func(what string) time.Duration {
		start := time.Now()
		for deadline := start.Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
			r, err := c.ServerReady(rctx, &pb.ServerReadyRequest{})
			rcancel()
			if err == nil && r.Ready {
				return time.Since(start)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: vig not ready after 30 s (%v)", what, err)
			}
		}
	}
	waitReady("first start")

	const (
		up = iota
		down
		restarting // the backend started again, vig not yet ready: OK or UNAVAILABLE
		back
	)
	var (
		mu       sync.Mutex
		phase    = up
		seen     = [4]map[codes.Code]int{{}, {}, {}, {}}
		inFlight = map[codes.Code]int{}
		bad      []string
		killedAt time.Time
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, stream := range []string{"det", "pose"} { // one sensor per stream: nothing supersedes
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := uint64(0); ; f++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				p := phase
				mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
				_, err := c.ModelInfer(rctx, frameRequest(stream, stream, f))
				rcancel()
				code := status.Code(err)
				mu.Lock()
				switch {
				case p == phase:
					seen[p][code]++
					if p == down && code != codes.Unavailable {
						bad = append(bad, fmt.Sprintf("%s frame %d sent after the kill: %v, want UNAVAILABLE", stream, f, err))
					}
				case p == up && phase == down: // in flight when the backend died
					inFlight[code]++
					if code != codes.OK && code != codes.Unavailable {
						bad = append(bad, fmt.Sprintf("%s frame %d in flight at the kill: %v, want OK or UNAVAILABLE", stream, f, err))
					}
				}
				mu.Unlock()
				if p == down {
					time.Sleep(20 * time.Millisecond) // a sensor keeps its period, it does not spin
				}
			}
		}()
	}
	count := func(p int, code codes.Code) int { mu.Lock(); defer mu.Unlock(); return seen[p][code] }
	waitFor := func(what string, cond func() bool) {
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("timed out waiting for %s: %v", what, seen)
			}
		}
	}
	waitFor("load", func() bool { return count(up, codes.OK) >= 40 })

	backend.cmd.Process.Kill()
	backend.exitCode()
	// The phase turns once the backend is gone (its sockets closed by the
	// kernel), not at the signal: a call sent between the two may still be
	// answered by the dying backend, and counts as in flight at the kill.
	mu.Lock()
	phase, killedAt = down, time.Now()
	mu.Unlock()
	// Down long enough for vig's reconnect backoff to reach its cap.
	waitFor("UNAVAILABLE answers with the backend gone", func() bool {
		return count(down, codes.Unavailable) >= 10 && time.Since(killedAt) > 2500*time.Millisecond
	})
	t.Logf("backend down for %v", time.Since(killedAt).Round(time.Millisecond))

	// The down phase ends before the backend starts again: from then on vig may
	// reconnect and answer OK at any moment.
	mu.Lock()
	phase = restarting
	mu.Unlock()
	startBackend()
	readyAfter := waitReady("after the backend's restart")
	mu.Lock()
	phase = back
	mu.Unlock()
	waitFor("both streams served again", func() bool { return count(back, codes.OK) >= 20 })
	close(stop)
	wg.Wait()

	// Liveness bound, not a benchmark: reconnect backoff is capped at 1 s, plus
	// process start and a loaded machine.
	if readyAfter > 3*time.Second {
		t.Errorf("vig ready %v after the backend was started again, want about 1 s at most", readyAfter)
	}
	t.Logf("vig ready again %v after the backend's restart; calls up/down/restarting/back %v, in flight at the kill %v", readyAfter.Round(time.Millisecond), seen, inFlight)
	for _, b := range bad {
		t.Error(b)
	}
	if n := seen[down][codes.DeadlineExceeded]; n > 0 {
		t.Errorf("%d calls ran into their 1 s deadline with the backend gone (vig must answer UNAVAILABLE first)", n)
	}
}
