package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/profile"
	"github.com/vig-edge/vig/platform/shmprobe"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
)

// Datapath paths. Every proxy runs in its default configuration (no taskset):
// vig as a user starts it, nginx as configured by nginxConfig. The -pinned paths
// repeat the TCP comparison with the proxy pinned to one CPU (proxyCPU).
const (
	PathTCP = "grpc-tcp" // gRPC copy path over loopback TCP
	// PathTCPTraced is PathTCP with vig's trace recorder on the whole run
	// (vig serve --trace): its cost against PathTCP's, same run.
	PathTCPTraced   = "grpc-tcp-traced"
	PathNginx       = "nginx"           // nginx grpc_pass over TCP: the reference proxy
	PathTCPPinned   = "grpc-tcp-pinned" // PathTCP with vig under taskset
	PathNginxPinned = "nginx-pinned"    // PathNginx with nginx under taskset
	PathUnix        = "grpc-unix"       // gRPC copy path over Unix sockets
	PathShm         = "triton-shm"      // Triton system shared memory: tensors by reference
	PathShmring     = "shmring"         // vig's own ring (by reference where the machine has /dev/shm)
	// PathShmringMemfd is the ring with a sealed memfd region (Android's kind:
	// the copy path in front of a gRPC backend).
	PathShmringMemfd = "shmring-memfd"
	// PathShmringRuntime is Android end to end: a sealed memfd ring session in
	// front of a runtime reached over a ring (backend ring:ADDR, package
	// ringback), which reads the sensor's frame in place. No socket carries a
	// frame on either leg; DIRECT is the same ring request straight to the
	// runtime.
	PathShmringRuntime = "shmring-runtime"
	PathHTTP           = "http-binary" // Triton HTTP/REST, tensors in the binary data extension
	PathHTTPJSON       = "http-json"   // Triton HTTP/REST, tensors as JSON arrays
)

// httpJSONMax is the largest payload the http-json row measures: larger
// tensors are what the binary data extension is for.
const httpJSONMax = 150_000

// DatapathPaths lists the paths in report order.
var DatapathPaths = []string{PathTCP, PathTCPTraced, PathBatch4, PathBatch8, PathNginx, PathTCPPinned, PathNginxPinned, PathUnix, PathShm, PathShmring, PathShmringMemfd, PathShmringRuntime, PathHTTP, PathHTTPJSON}

// isRingPath says whether VIA on path is a ring client.
func isRingPath(path string) bool {
	return path == PathShmring || path == PathShmringMemfd || path == PathShmringRuntime
}

// pinnedPaths maps a pinned path to the path it repeats under taskset.
var pinnedPaths = map[string]string{PathTCPPinned: PathTCP, PathNginxPinned: PathNginx}

// DatapathOptions configures the datapath benchmark.
type DatapathOptions struct {
	VigBinary string // the vig executable to run as its own process
	Payloads  []int  // bytes; default 0, 150 KB, 1.2 MB, 6.2 MB
	Warmup    int    // rounds before measuring, per run (default 30)
	Rounds    int    // measured rounds per run (default 300)
	Runs      int    // runs per row (default 3); rows report the median of the runs
	Exec      time.Duration
	Pin       bool // measure the -pinned paths (the others never pin)
	// StockWindows runs the client and the mock backend with gRPC's default
	// flow control (64 KiB windows grown by BDP probes), as a stock
	// tritonclient and Triton server run, instead of vig's window_mib windows.
	StockWindows bool
	Paths        []string
	TempDir      string
	Progress     func(format string, args ...any)
}

// ProxyCost is what the proxy process (vig or nginx) spent per request it served,
// over a run's measured rounds.
type ProxyCost struct {
	CPUus       float64 `json:"cpu_us"`
	Userus      float64 `json:"user_us"`
	Kernelus    float64 `json:"kernel_us"`
	CtxSwitches float64 `json:"ctxt_switches"`
	Syscalls    float64 `json:"syscalls"` // -1 when unknown
	// Source says where the figures come from (schedstat, eBPF, or why not).
	Source string `json:"source"`
}

// DatapathRun is one run of a row.
type DatapathRun struct {
	Direct     Dist       `json:"direct"`
	Via        Dist       `json:"via"`
	PairMedian float64    `json:"pair_median_ms"` // median of VIA−DIRECT per round
	Cost       *ProxyCost `json:"cost,omitempty"`
	// BackendRequests is, on a batch row, the backend's executions per VIA
	// round (its frames merged into fewer requests).
	BackendRequests float64 `json:"backend_requests,omitempty"`
	// Dropped counts, on a batch row, the frames vig's scheduler dropped in
	// measured rounds; those rounds are not timed.
	Dropped int `json:"dropped,omitempty"`
}

// DatapathRow is one (path, payload) row: medians of its runs.
type DatapathRow struct {
	Path    string `json:"path"`
	Proxy   string `json:"proxy"`  // vig or nginx
	Pinned  bool   `json:"pinned"` // the proxy ran under taskset -c proxyCPU
	Payload int    `json:"payload_bytes"`
	Skipped string `json:"skipped,omitempty"`
	// Frames is, on a batch row, the frames each round sends at once (one of
	// each stream); its latencies are per round, its cost per frame.
	Frames          int     `json:"frames,omitempty"`
	BackendRequests float64 `json:"backend_requests,omitempty"` // per VIA round, median of the runs
	Dropped         int     `json:"dropped,omitempty"`          // frames vig dropped, all runs
	// BackendConns is how many connections the proxy opened to the mock
	// backend over all runs of the path (the backend's accepted connections
	// minus DIRECT's one): 1 for a proxy that keeps its backend connection.
	BackendConns uint64 `json:"backend_connections"`

	DirectP50  float64       `json:"direct_p50_ms"`
	ViaP50     float64       `json:"via_p50_ms"`
	AddedP50   float64       `json:"added_p50_ms"` // VIA p50 − DIRECT p50
	AddedP99   float64       `json:"added_p99_ms"` // VIA p99 − DIRECT p99
	PairMedian float64       `json:"pair_median_ms"`
	Cost       *ProxyCost    `json:"cost,omitempty"`
	Runs       []DatapathRun `json:"runs,omitempty"`
}

// DatapathResult is the datapath benchmark's output.
type DatapathResult struct {
	Exec   time.Duration `json:"exec_ns"`
	Warmup int           `json:"warmup"`
	Rounds int           `json:"rounds"`
	Runs   int           `json:"runs"`
	Pinned bool          `json:"pinned"` // some rows ran pinned
	// StockWindows: client and mock backend ran with gRPC's default flow control.
	StockWindows bool          `json:"stock_windows,omitempty"`
	Payload      []int         `json:"payloads"`
	Rows         []DatapathRow `json:"rows"`
	// NginxConfig is the nginx.conf the nginx rows ran with (the unpinned
	// path's; the pinned one differs only in its directory and ports).
	NginxConfig string `json:"nginx_config,omitempty"`
}

func (o *DatapathOptions) defaults() {
	if len(o.Payloads) == 0 {
		o.Payloads = []int{0, 150_000, 1_200_000, 6_200_000}
	}
	if o.Warmup <= 0 {
		o.Warmup = 30
	}
	if o.Rounds <= 0 {
		o.Rounds = 300
	}
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if o.Exec <= 0 {
		o.Exec = 5 * time.Millisecond
	}
	if len(o.Paths) == 0 {
		o.Paths = DatapathPaths
	}
}

const benchModel = "m"

// vigDatapathConfig is vig's configuration for the datapath and idle benchmarks: one
// governed model with a loose contract, so the scheduler admits every request at
// once — the full governed path, with nothing dropped.
//
// With ring set, vig also listens for ring clients there, and the stream the ring
// requests name (ringStream) gets the same contract.
func vigDatapathConfig(listenGRPC, listenUnix, ring, backend string, exec time.Duration, extra ...string) string {
	listenRing, ringStreamLine := "", ""
	if ring != "" {
		listenRing = fmt.Sprintf(", ring: %q", ring)
		ringStreamLine = fmt.Sprintf("  - {name: %s, model: %s, class: protected, period_ms: 1000, max_age_ms: 60000}\n", ringStream, benchModel)
	}
	return fmt.Sprintf(`listen: {grpc: %q, unix: %q%s, metrics: "off"}
backend: {address: %q, slots: 1}
log: {format: json, level: info}
models:
  %s: {exec_ms: %g}
streams:
  - {name: %s, model: %s, class: protected, period_ms: 1000, max_age_ms: 60000}
%s%s`, listenGRPC, listenUnix, listenRing, backend, benchModel, float64(exec)/1e6, benchModel, benchModel, ringStreamLine, strings.Join(extra, ""))
}

// RunDatapath measures every path and payload. All paths are set up first (one
// mock backend and one proxy process each; idle ones cost nothing), then the
// measurements interleave them: for each run and payload, every path in turn, so
// that vig and nginx are compared under the same machine conditions.
func RunDatapath(ctx context.Context, o DatapathOptions) (*DatapathResult, error) {
	o.defaults()
	res := &DatapathResult{Exec: o.Exec, Warmup: o.Warmup, Rounds: o.Rounds, Runs: o.Runs, Payload: o.Payloads, StockWindows: o.StockWindows}
	var envs []*pathEnv
	defer func() {
		for _, e := range envs {
			e.Close()
		}
	}()
	for _, path := range o.Paths {
		if o.Progress != nil {
			o.Progress("datapath: setting up %s", path)
		}
		e, err := setupPath(ctx, &o, path)
		if err != nil {
			return nil, fmt.Errorf("datapath %s: %w", path, err)
		}
		envs = append(envs, e)
		res.Pinned = res.Pinned || e.pinned
		if e.path == PathNginx && e.proxy != nil {
			res.NginxConfig = e.proxy.Config
		}
	}
	rows := map[string]map[int]*DatapathRow{}
	for _, e := range envs {
		rows[e.path] = map[int]*DatapathRow{}
		for _, p := range o.Payloads {
			rows[e.path][p] = &DatapathRow{Path: e.path, Proxy: e.proxyName, Pinned: e.pinned, Payload: p, Skipped: e.skipped, Frames: batchFrames(e.path)}
			if batchFrames(e.path) > 0 && p > batchMaxPayload && e.skipped == "" {
				rows[e.path][p].Skipped = fmt.Sprintf("not measured above %s a frame (%d frames a round)", sizeLabel(batchMaxPayload), batchFrames(e.path))
			}
			if e.path == PathHTTPJSON && p > httpJSONMax && e.skipped == "" {
				rows[e.path][p].Skipped = fmt.Sprintf("not measured: JSON tensors above %s are what the binary data extension (http-binary) is for", sizeLabel(httpJSONMax))
			}
		}
	}
	// Runs are the outer loop, each over every payload (the order rotated by
	// one per run) and, for each, every path in turn: a machine that slows
	// down during the benchmark spreads the drift over every size's runs,
	// whose median the rows report, instead of putting it on the last sizes.
	for run := range o.Runs {
		for k := range o.Payloads {
			payload := o.Payloads[(k+run)%len(o.Payloads)]
			for _, e := range envs {
				if e.skipped != "" || rows[e.path][payload].Skipped != "" {
					continue
				}
				if o.Progress != nil {
					o.Progress("datapath %s: run %d/%d, %s", sizeLabel(payload), run+1, o.Runs, e.path)
				}
				r, err := measureRow(ctx, &o, e, payload, run)
				if err != nil {
					return nil, fmt.Errorf("datapath %s %s: %w", e.path, sizeLabel(payload), err)
				}
				row := rows[e.path][payload]
				row.Runs = append(row.Runs, *r)
			}
		}
	}
	for _, e := range envs {
		var conns uint64
		if e.backendStats != nil && e.skipped == "" {
			// DIRECT's client holds one of the backend's connections.
			conns = max(e.backendStats.TCPAccepted.Load()+e.backendStats.UnixAccepted.Load(), 1) - 1
		}
		for _, p := range o.Payloads {
			row := rows[e.path][p]
			row.BackendConns = conns
			if row.Skipped == "" {
				row.summarize()
			}
			res.Rows = append(res.Rows, *row)
		}
	}
	return res, nil
}

// pathEnv is one path ready to measure: its mock backend, its proxy process and a
// client connection to each (for the shmring path, VIA is a ring client).
type pathEnv struct {
	path, proxyName string
	pinned          bool   // the proxy runs under taskset
	skipped         string // why the path cannot be measured here
	backendStats    *netopt.Stats
	direct, via     *grpc.ClientConn
	ring            *ringSensor
	directRing      *ringSensor // PathShmringRuntime: DIRECT is a ring client of the runtime
	http            *httpSensor // the http-* paths
	proxy           *Proc
	shm             *shmInput
	closers         []func()
}

// callVia times one VIA round trip of frame: msg through the proxy's gRPC
// listener, or data through vig's ring on the shmring path.
func (e *pathEnv) callVia(ctx context.Context, frame uint64, data []byte, msg rawMsg) (time.Duration, error) {
	if e.ring != nil {
		d, _, err := e.ring.call(frame, data)
		return d, err
	}
	if e.http != nil {
		return e.http.call(ctx, frame, data, e.path == PathHTTPJSON)
	}
	return call(ctx, e.via, msg)
}

// callDirect times one DIRECT round trip of frame: msg straight to the mock
// backend's gRPC server, or data on its ring on the shmring-runtime path.
func (e *pathEnv) callDirect(ctx context.Context, frame uint64, data []byte, msg rawMsg) (time.Duration, error) {
	if e.directRing != nil {
		d, _, err := e.directRing.call(frame, data)
		return d, err
	}
	return call(ctx, e.direct, msg)
}

// serveRuntimeRing has the mock backend serve ring clients as well, on a new
// abstract address, until e closes; it returns the address.
func serveRuntimeRing(e *pathEnv, mb *mockbackend.Running) (string, error) {
	ln, err := shmring.Listen(ringAddr(), shmring.ServerConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", fmt.Errorf("ring listener for the mock runtime: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- mb.ServeRing(ln) }()
	e.closers = append(e.closers, func() { ln.Close(); <-done })
	return ln.Addr(), nil
}

// Close releases everything in reverse order of setup.
func (e *pathEnv) Close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

// setupPath starts a path's mock backend and proxy and connects to both.
func setupPath(ctx context.Context, o *DatapathOptions, path string) (_ *pathEnv, err error) {
	e := &pathEnv{path: path, proxyName: "vig"}
	kind, pin := path, false
	if base, ok := pinnedPaths[path]; ok {
		if !o.Pin {
			e.skipped = "not measured: pinned rows were turned off (--no-pin)"
			return e, nil
		}
		kind, pin = base, true
	}
	if isRingPath(path) {
		if err := ringSupport(); err != nil {
			e.skipped = err.Error()
			return e, nil
		}
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	dir, err := os.MkdirTemp(o.TempDir, "vigbench-"+path+"-")
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { os.RemoveAll(dir) })
	mockAddr := "127.0.0.1:0"
	if path == PathUnix {
		mockAddr = "unix:" + filepath.Join(dir, "mock.sock")
	}
	e.backendStats = new(netopt.Stats)
	serverOpts, dial := gateway.ServerOptions(defaultGRPC()), dial
	if o.StockWindows {
		serverOpts, dial = stockServerOptions(), dialStock
	}
	mcfg := mockbackend.Config{Models: []mockbackend.Model{{Name: benchModel, Exec: o.Exec}}, Slots: 1, Seed: 1}
	if k := batchFrames(path); k > 0 {
		if mcfg, err = batchMock(o.Exec, k); err != nil {
			return nil, err
		}
	}
	mb, err := mockbackend.Start(context.Background(), mockAddr, mcfg, serverOpts, e.backendStats)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { mb.Stop() })

	var viaAddr string
	switch kind {
	case PathNginx:
		e.proxyName = "nginx"
		e.proxy, viaAddr, err = StartNginx(ctx, dir, mb.Addr(), pin)
		if errors.Is(err, errSkip) {
			e.skipped = err.Error()
			return e, nil
		}
	case PathUnix:
		e.proxy, err = StartVig(ctx, o.VigBinary, dir, vigDatapathConfig("off", filepath.Join(dir, "vig.sock"), "", mb.Addr(), o.Exec), pin)
		if err == nil {
			viaAddr = "unix:" + e.proxy.Addrs["unix"]
		}
	case PathShmring:
		// The gRPC listener is only there because vig wants one; nothing uses it.
		e.proxy, err = StartVig(ctx, o.VigBinary, dir, vigDatapathConfig("127.0.0.1:0", "off", ringAddr(), mb.Addr(), o.Exec), pin)
	case PathShmringMemfd:
		e.proxy, err = StartVig(ctx, o.VigBinary, dir, vigDatapathConfig("127.0.0.1:0", "off", ringAddr(), mb.Addr(), o.Exec, "cpu: {hot_path: shared}\n"), pin)
	case PathShmringRuntime:
		// The mock backend serves rings too, as an on-device runtime without
		// gRPC: vig's backend is that ring, and DIRECT attaches to it as well.
		var rt string
		if rt, err = serveRuntimeRing(e, mb); err == nil {
			e.proxy, err = StartVig(ctx, o.VigBinary, dir, vigDatapathConfig("127.0.0.1:0", "off", ringAddr(), "ring:"+rt, o.Exec), pin)
		}
		if err == nil {
			if e.directRing, err = dialRing(rt, false); err == nil {
				e.closers = append(e.closers, e.directRing.Close)
			}
		}
	case PathTCPTraced:
		e.proxy, err = StartVig(ctx, o.VigBinary, dir, vigDatapathConfig("127.0.0.1:0", "off", "", mb.Addr(), o.Exec), pin,
			"--trace", filepath.Join(dir, "vig.trace.json"))
		if err == nil {
			viaAddr = e.proxy.Addrs["grpc"]
		}
	case PathBatch4, PathBatch8:
		e.proxy, err = StartVig(ctx, o.VigBinary, dir, vigBatchConfig("127.0.0.1:0", mb.Addr(), o.Exec, batchFrames(path)), pin)
		if err == nil {
			viaAddr = e.proxy.Addrs["grpc"]
		}
	case PathHTTP, PathHTTPJSON:
		// The gRPC listener is only there because the config wants one.
		cfg := strings.Replace(vigDatapathConfig("127.0.0.1:0", "off", "", mb.Addr(), o.Exec), `metrics: "off"}`, `metrics: "off", http: "127.0.0.1:0"}`, 1)
		e.proxy, err = StartVig(ctx, o.VigBinary, dir, cfg, pin)
	default:
		e.proxy, err = StartVig(ctx, o.VigBinary, dir, vigDatapathConfig("127.0.0.1:0", "off", "", mb.Addr(), o.Exec), pin)
		if err == nil {
			viaAddr = e.proxy.Addrs["grpc"]
		}
	}
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.proxy.Stop)
	e.pinned = e.proxy.Pinned
	if pin && !e.pinned {
		e.skipped = "not measured: taskset or a second CPU is missing, so the proxy cannot be pinned"
		e.Close()
		return e, nil
	}

	if e.direct, err = dial(mb.Addr()); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { e.direct.Close() })
	maxPayload := 0
	for _, p := range o.Payloads {
		maxPayload = max(maxPayload, p)
	}
	if path == PathHTTP || path == PathHTTPJSON {
		if e.proxy.Addrs["http"] == "" {
			return nil, fmt.Errorf("vig did not log its listen.http address (got %v)", e.proxy.Addrs)
		}
		e.http = newHTTPSensor(e.proxy.Addrs["http"])
		e.closers = append(e.closers, e.http.Close)
		return e, nil
	}
	if isRingPath(path) {
		if e.ring, err = dialRing(e.proxy.Addrs["ring"], path == PathShmring); err != nil {
			return nil, err
		}
		e.closers = append(e.closers, e.ring.Close)
		if e.ring.byRef {
			// vig forwards the ring's frames by reference (Triton system shared
			// memory), so the DIRECT request is the same by-reference request
			// straight to the backend: both sides leave the frame in place, and
			// the difference is vig's own cost.
			if e.shm, err = newShmInput(ctx, e.direct, maxPayload); err != nil {
				return nil, fmt.Errorf("system shared memory for the ring row's DIRECT side: %w", err)
			}
			e.closers = append(e.closers, func() { e.shm.Close(e.direct) })
		}
		return e, nil
	}
	if e.via, err = dial(viaAddr); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { e.via.Close() })

	if path == PathShm {
		// Registered through vig, which forwards it to the backend and mirrors
		// it: both paths then reference the same region.
		if e.shm, err = newShmInput(ctx, e.via, maxPayload); err != nil {
			return nil, fmt.Errorf("system shared memory: %w", err)
		}
		e.closers = append(e.closers, func() { e.shm.Close(e.via) })
	}
	return e, nil
}

// summarize sets the row's figures to the medians over its runs.
func (row *DatapathRow) summarize() {
	var dp50, vp50, a50, a99, pm, breq []float64
	var costs []*ProxyCost
	for _, r := range row.Runs {
		dp50 = append(dp50, r.Direct.P50)
		vp50 = append(vp50, r.Via.P50)
		a50 = append(a50, r.Via.P50-r.Direct.P50)
		a99 = append(a99, r.Via.P99-r.Direct.P99)
		pm = append(pm, r.PairMedian)
		breq = append(breq, r.BackendRequests)
		row.Dropped += r.Dropped
		if r.Cost != nil {
			costs = append(costs, r.Cost)
		}
	}
	row.DirectP50, row.ViaP50 = Median(dp50), Median(vp50)
	row.AddedP50, row.AddedP99, row.PairMedian = Median(a50), Median(a99), Median(pm)
	row.Cost = medianCost(costs)
	if row.Frames > 0 {
		row.BackendRequests = Median(breq)
	}
}

func medianCost(cs []*ProxyCost) *ProxyCost {
	if len(cs) == 0 {
		return nil
	}
	pick := func(f func(*ProxyCost) float64) float64 {
		var xs []float64
		for _, c := range cs {
			xs = append(xs, f(c))
		}
		return Median(xs)
	}
	return &ProxyCost{
		CPUus:       pick(func(c *ProxyCost) float64 { return c.CPUus }),
		Userus:      pick(func(c *ProxyCost) float64 { return c.Userus }),
		Kernelus:    pick(func(c *ProxyCost) float64 { return c.Kernelus }),
		CtxSwitches: pick(func(c *ProxyCost) float64 { return c.CtxSwitches }),
		Syscalls:    pick(func(c *ProxyCost) float64 { return c.Syscalls }),
		Source:      cs[0].Source,
	}
}

// rawMsg is a pre-encoded message: vig's raw codec sends its bytes as they are, so
// the client's encoding cost stays out of the timed call.
type rawMsg []byte

var rawCodec = grpc.ForceCodecV2(wire.RawCodec())

const inferMethod = "/" + wire.Service + "/ModelInfer"

// call times one ModelInfer round trip of a pre-encoded request.
func call(ctx context.Context, cc *grpc.ClientConn, req rawMsg) (time.Duration, error) {
	var resp wire.Frame
	t0 := time.Now()
	err := cc.Invoke(ctx, inferMethod, req, &resp, rawCodec)
	d := time.Since(t0)
	resp.Free()
	return d, err
}

// measureRow runs warm-up and measured rounds, DIRECT and VIA alternating (the
// order flips every round), profiling the proxy over the measured rounds.
func measureRow(ctx context.Context, o *DatapathOptions, e *pathEnv, payload, run int) (*DatapathRun, error) {
	if batchFrames(e.path) > 0 {
		return measureBatchRow(ctx, o, e, payload, run)
	}
	data := make([]byte, payload)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var d, v, diff []float64
	var sess *profile.Session
	var profErr error
	defer func() {
		if sess != nil {
			sess.Close()
		}
	}()
	total := o.Warmup + o.Rounds
	for i := range total {
		if i == o.Warmup {
			sess, profErr = profile.Start(profile.Options{PID: e.proxy.PID, EBPF: profile.Auto})
		}
		frame := uint64(run*total + i)
		req := frameRequest(benchModel, ringStream, frame, 0, data) // the ring row's id too
		if e.shm != nil {
			req = e.shm.request(frame, payload)
		}
		req.Parameters = nil // the loose contract needs no capture time
		b, err := proto.Marshal(req)
		if err != nil {
			return nil, err
		}
		var td, tv time.Duration
		if i%2 == 0 {
			if td, err = e.callDirect(ctx, frame, data, b); err == nil {
				tv, err = e.callVia(ctx, frame, data, b)
			}
		} else {
			if tv, err = e.callVia(ctx, frame, data, b); err == nil {
				td, err = e.callDirect(ctx, frame, data, b)
			}
		}
		if err != nil {
			return nil, err
		}
		if i >= o.Warmup {
			d, v = append(d, ms(td)), append(v, ms(tv))
			diff = append(diff, ms(tv)-ms(td))
		}
	}
	r := &DatapathRun{Direct: Summarize(d), Via: Summarize(v), PairMedian: Median(diff)}
	switch {
	case sess != nil:
		rep, err := sess.Stop()
		sess = nil
		if err != nil {
			r.Cost = &ProxyCost{Syscalls: -1, Source: err.Error()}
			break
		}
		rep.SetRequests(uint64(o.Rounds))
		r.Cost = costOf(rep)
	case profErr != nil:
		r.Cost = &ProxyCost{Syscalls: -1, Source: "profile: " + profErr.Error()}
	}
	return r, nil
}

func costOf(rep *profile.Report) *ProxyCost {
	pr := rep.PerRequest
	if pr == nil {
		return &ProxyCost{Syscalls: -1, Source: "no requests"}
	}
	c := &ProxyCost{
		CPUus: us(pr.CPU), Userus: us(pr.User), Kernelus: us(pr.Kernel),
		CtxSwitches: pr.ContextSwitches, Syscalls: -1,
		Source: "CPU: /proc/<pid>/stat split, schedstat total; context switches: /proc/<pid>/task/*/status",
	}
	if rep.EBPF != nil {
		c.Syscalls = pr.Syscalls
		c.Source += "; syscalls: eBPF raw_syscalls tracepoints (platform/profile)"
	} else {
		c.Source += "; syscalls: unavailable (" + rep.EBPFError + ")"
	}
	return c
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// sizeLabel prints a payload size the way the issue names them.
func sizeLabel(n int) string {
	switch {
	case n == 0:
		return "0 B"
	case n >= 1_000_000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1000:
		return fmt.Sprintf("%d KB", n/1000)
	}
	return fmt.Sprintf("%d B", n)
}

// shmInput is a /dev/shm object the client writes frames into and registers (as
// Triton clients do) so that requests carry a reference instead of the bytes.
type shmInput struct {
	name, key, path string
}

func newShmInput(ctx context.Context, cc *grpc.ClientConn, size int) (*shmInput, error) {
	size = max(size, 4096)
	s := &shmInput{name: fmt.Sprintf("vigbench_in_%d", os.Getpid()), key: fmt.Sprintf("/vigbench-in-%d", os.Getpid())}
	s.path = filepath.Join(shmprobe.DevShm, s.key[1:])
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(s.path, data, 0o600); err != nil {
		return nil, fmt.Errorf("%w (the Triton shm path needs a writable /dev/shm)", err)
	}
	c := pb.NewGRPCInferenceServiceClient(cc)
	if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: s.name, Key: s.key, ByteSize: uint64(size)}); err != nil {
		os.Remove(s.path)
		return nil, err
	}
	return s, nil
}

func (s *shmInput) request(frame uint64, payload int) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{
		ModelName: benchModel,
		Id:        mockbackend.FrameID("datapath", frame),
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{int64(payload)},
			Parameters: map[string]*pb.InferParameter{
				"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: s.name}},
				"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(payload)}},
			}}},
	}
}

func (s *shmInput) Close(cc *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pb.NewGRPCInferenceServiceClient(cc).SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: s.name})
	os.Remove(s.path)
}
