package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/doctor"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/gateway/restfront"
	"github.com/vig-edge/vig/agent/gateway/ringback"
	"github.com/vig-edge/vig/agent/gateway/ringfront"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/agent/servermodel"
	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/build/version"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	"github.com/vig-edge/vig/platform/deviceprobe"
	"github.com/vig-edge/vig/platform/profile"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
)

const serveUsage = `Usage: vig serve -c FILE [flags]

Runs the governor in front of the backend named in the config (backend.address:
Triton's gRPC port, a Unix socket, or a ring runtime). Clients reach vig on the
listeners the config turns on (listen:):

  grpc       Triton's gRPC protocol over TCP (default 127.0.0.1:9001)
  unix       the same gRPC on a Unix socket (off by default)
  http       Triton's HTTP/REST protocol, KServe v2 (off by default)
  http_unix  the same HTTP on a Unix socket (off by default)
  ring       vig's shared-memory rings for co-located sensors (off by default)
  metrics    Prometheus metrics at /metrics (default 127.0.0.1:9090)

When the config leaves the layout to the server (no accelerators and no on:,
or accelerators: from_server), vig first reads each model's instance groups
from the backend, waiting up to --layout-wait for it (docs/config.md).
Then vig runs doctor's checks and logs what they find; --strict refuses to
serve when doctor finds an error (as vig.service does). SIGTERM or SIGINT drains:
vig stops accepting, answers every accepted request, and exits 0.

Flags:
`

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := configFlag(fs, "", "config `FILE` (YAML; docs/config.md)")
	logFormat := fs.String("log-format", "", "override log.format: text or json")
	strict := fs.Bool("strict", false, "refuse to start when doctor finds an error (unschedulable contracts, broken device setup)")
	noDevice := noDeviceFlag(fs, "skip doctor's device checks at start (the static analysis still runs)")
	fs.DurationVar(&layoutWait, "layout-wait", layoutWait, "how long to wait for the backend to describe the models' layout (instance groups) before scheduling, when the config leaves it to the server")
	profilePath := fs.String("profile", "", "profile vig itself while it serves and write the report to `FILE` on drain (.zst: compressed)")
	tracePath := fs.String("trace", "", "record the scheduling trace from the start and write it to `FILE` (Chrome trace-event JSON; docs/trace.md)")
	traceSecs := fs.Float64("trace-seconds", 0, "with --trace: stop recording and write the file after `N` seconds (0: at drain)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), serveUsage); fs.PrintDefaults() }
	if code, ok := parseFlags(fs, args, os.Stdout); !ok {
		return code
	}
	if *traceSecs < 0 || *traceSecs > 0 && *tracePath == "" {
		fmt.Fprintln(os.Stderr, "vig serve: --trace-seconds N needs --trace FILE and N ≥ 0 (0: record until drain)")
		return 2
	}
	if *tracePath != "" {
		if err := writable(*tracePath); err != nil {
			fmt.Fprintf(os.Stderr, "vig serve: --trace %s: %v (give a file in a directory vig can write)\n", *tracePath, err)
			return 2
		}
	}
	cfg, code := loadConfig(*cfgPath)
	if cfg == nil {
		return code
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	log := newLogger(cfg.Log)
	slog.SetDefault(log)

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	// doctor looks at the layout vig schedules: it runs once the layout is
	// resolved (from the server, when the config leaves it to it).
	checkAtStart := func(cfg *config.Config) error {
		report := doctor.Run(ctx, cfg, doctor.Options{Device: !*noDevice, Host: cpuHost(deviceHost())})
		logDoctor(log, report)
		if *strict && report.Worst() == doctor.Error {
			return errStrict
		}
		return nil
	}

	var prof *profile.Session
	if *profilePath != "" {
		var err error
		if prof, err = profile.Start(profile.Options{PID: os.Getpid(), EBPF: profile.Auto}); err != nil {
			log.Error("profile", "err", err)
			return 1
		}
	}
	var answered uint64
	err := serveWith(ctx, cfg, log, nil, &answered, checkAtStart, traceOptions{file: *tracePath, seconds: *traceSecs})
	if prof != nil {
		writeProfile(log, prof, *profilePath, answered)
	}
	if errors.Is(err, errStrict) {
		log.Error("doctor found errors and --strict is set: not serving (run `vig doctor -c FILE` for the details)")
		return 2
	}
	if ce := (configError{}); errors.As(err, &ce) {
		fmt.Fprintf(os.Stderr, "vig: invalid config:\n%v\n", ce.error)
		return 2
	}
	if err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}

// logDoctor logs doctor's findings and checks at start: errors and warnings as such,
// the rest at debug level.
func logDoctor(log *slog.Logger, r doctor.Report) {
	for _, f := range r.Findings {
		level := slog.LevelDebug
		switch f.Severity {
		case doctor.Error:
			level = slog.LevelError
		case doctor.Warning:
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "doctor: "+f.Message, "code", f.Code, "remedy", strings.Join(f.Remedy, "; "))
	}
	for _, c := range r.Checks {
		level := slog.LevelDebug
		if c.Status == doctor.Warn || c.Status == doctor.Fail {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "doctor: "+c.Name, "status", c.Status, "detail", c.Detail)
	}
}

func writeProfile(log *slog.Logger, s *profile.Session, path string, requests uint64) {
	rep, err := s.Stop()
	if err != nil {
		log.Error("profile", "err", err)
		return
	}
	rep.SetRequests(requests)
	if err := rep.WriteFile(path); err != nil {
		log.Error("profile", "err", err)
		return
	}
	log.Info("profile written", "file", path, "requests", requests)
}

// loadConfig reads and parses a config file. On failure it prints the problems and
// returns nil and exit code 2.
func loadConfig(path string) (*config.Config, int) {
	if path == "" {
		fmt.Fprintln(os.Stderr, "vig: -c FILE is required (examples/jetson.yaml governs a Triton at 127.0.0.1:8001; examples/demo.yaml runs with a mock backend)")
		return nil, 2
	}
	data, err := readConfig(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vig: %v\n", err)
		return nil, 2
	}
	cfg, err := config.Parse(path, data)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vig: invalid config:\n%v\n", err)
		return nil, 2
	}
	return cfg, 0
}

// readConfig reads a config file, at most one byte past config.MaxBytes (so that Parse
// names the limit), whatever the path is: -c /dev/zero must not read forever.
func readConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, config.MaxBytes+1))
}

// parseFlags parses a subcommand's flags. --help prints the usage once, to stdout,
// and asks for exit 0; a bad flag is reported on the flag set's output (stderr) with
// the usage, and asks for exit 2.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
	usage := fs.Usage
	fs.Usage = func() {} // printed below, once, on the right stream
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		out := fs.Output()
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(out)
		return 0, false
	}
	fs.Usage()
	return 2, false
}

func newLogger(c config.Log) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// serve runs vig until ctx is done, then drains. ready, when not nil, receives the
// addresses vig listens on once it accepts requests (tests use it).
// answered, when not nil, receives the number of RPCs answered.
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger, ready chan<- map[string]string, answered *uint64) error {
	return serveWith(ctx, cfg, log, ready, answered, nil, traceOptions{})
}

// errStrict: doctor found an error and --strict refuses to serve.
var errStrict = errors.New("doctor found errors (--strict)")

// serveWith is serve with a check run once the layout is resolved, before
// the scheduler is built (its error stops vig), recording a trace of the run
// as to asks.
func serveWith(ctx context.Context, cfg *config.Config, log *slog.Logger, ready chan<- map[string]string, answered *uint64,
	atStart func(*config.Config) error, to traceOptions) error {
	exp, err := loadExposure(cfg.File, cfg.Listen, log)
	if err != nil {
		return err
	}
	var sockets netopt.Stats
	reg := metrics.New()
	reg.Sockets(&sockets)
	cpuc, err := applyCPU(cfg, log, reg)
	if err != nil {
		return err
	}
	defer cpuc.Close()

	if cfg.Backend.Embedded {
		mb, err := mockbackend.Start(ctx, cfg.Backend.Address, mockbackend.FromConfig(cfg), gateway.ServerOptions(cfg.GRPC), &sockets)
		if err != nil {
			return fmt.Errorf("embedded backend on %s: %w", cfg.Backend.Address, err)
		}
		defer mb.Stop()
		cfg.Backend.Address = mb.Addr()
		log.Info("embedded mock backend started", "address", mb.Addr(), "models", len(cfg.Models), "slots", cfg.Backend.Slots, "accelerators", acceleratorList(cfg))
	}
	deviceStart(ctx, cfg, reg, log) // per-device facts and metrics (devices.go)
	if err := resolveLayout(ctx, cfg, log, layoutWait); err != nil {
		return err
	}
	if atStart != nil {
		if err := atStart(cfg); err != nil {
			return err
		}
	}

	rec, err := trace.NewRecorder(cfg.Trace.BufferEvents, clock.Monotonic, clock.WallOffset)
	if err != nil {
		return configError{err} // validated by config
	}
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset, Log: log,
		Recorder: rec})
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	recording := to.start(rec, log)
	defer recording.finish()
	gov.SetObserver(reg.NewSched(gov.Snapshot))
	// A ring runtime is the gateway's Backend: the gateway opens it and follows its
	// state; without one, the gateway dials the gRPC backend itself.
	var backend gateway.Backend
	ringAddr, ringBackend := cfg.Backend.RingBackend()
	if ringBackend {
		// Reconnect backoff capped at 1 s, as for a gRPC backend: a runtime that
		// restarts is found again within about a second.
		rb, err := ringback.New(ringAddr, ringback.Options{Config: ringConfig(cfg.Backend.Ring),
			ConfigKey: "backend.ring.slot_kib", Logger: log, MaxBackoff: time.Second,
			NoSharedFrames: cfg.Backend.Ring.ShareFrames != nil && !*cfg.Backend.Ring.ShareFrames})
		if err != nil {
			return fmt.Errorf("ring backend %s: %w", ringAddr, err)
		}
		backend = rb
	}
	gopts := gateway.Options{Config: cfg, Dial: sockets.DialAddr, Metrics: reg, Log: log, Admit: gov, Backend: backend,
		Token: exp.token}
	gw, err := gateway.New(gopts)
	if err != nil {
		if backend != nil {
			backend.Close()
		}
		return err
	}
	if cfg.Backend.StatsIntervalMs > 0 && !ringBackend { // a ring runtime has no ModelStatistics
		poller := gateway.NewStatsPoller(gw, gov, time.Duration(cfg.Backend.StatsIntervalMs)*time.Millisecond, log)
		pctx, pcancel := context.WithCancel(context.Background())
		defer pcancel()
		go poller.Run(pctx)
	}

	type listener struct {
		name string
		ln   net.Listener
	}
	addrs := map[string]string{}
	var listeners []listener
	closeAll := func() {
		for _, l := range listeners {
			l.ln.Close()
		}
	}
	for _, l := range []struct{ name, network, addr string }{
		{"grpc", "tcp", cfg.Listen.GRPC},
		{"unix", "unix", cfg.Listen.Unix},
		{"metrics", "tcp", cfg.Listen.Metrics},
		{"http", "tcp", cfg.Listen.HTTP},
		{"http_unix", "unix", cfg.Listen.HTTPUnix},
	} {
		if l.addr == "" {
			continue
		}
		ln, err := netopt.Listen(l.network, l.addr, &sockets)
		if err != nil {
			closeAll()
			gw.Stop()
			return fmt.Errorf("listen.%s %s: %w", l.name, l.addr, err)
		}
		listeners = append(listeners, listener{l.name, exp.listener(l.name, ln, log, reg)})
		addrs[l.name] = ln.Addr().String()
	}

	errc := make(chan error, len(listeners)+1)
	var ring *ringfront.Frontend
	if cfg.Listen.Ring != "" {
		allowUnsealed := false
		if b, err := shmring.Probe(); err == nil && b == shmring.BackendShmFile {
			allowUnsealed = true
			log.Warn("ring: sealed memfd unavailable on this kernel; accepting /dev/shm regions under a fault guard")
		}
		// Keyed /dev/shm regions are what lets a Triton backend read frames in
		// place (by reference); they are fault-guarded like any /dev/shm region.
		rl, err := shmring.Listen(cfg.Listen.Ring, shmring.ServerConfig{AllowUnsealed: allowUnsealed, AllowShmKey: true, Logger: log,
			Authorize: exp.authorizeRing(reg)})
		if err != nil {
			closeAll()
			gw.Stop()
			return fmt.Errorf("listen.ring %s: %w", cfg.Listen.Ring, err)
		}
		addrs["ring"] = rl.Addr()
		ring = ringfront.New(rl, gw, ringfront.Options{Log: log, Metrics: reg})
		go func() { errc <- ring.Serve() }()
	}
	var metricsSrv *http.Server
	var rest *restfront.Frontend // Triton's HTTP/REST protocol, into the same gateway
	for _, l := range listeners {
		if l.name == "http" || l.name == "http_unix" {
			if rest == nil {
				rc := cfg.REST
				var fwd *regexp.Regexp
				if rc.ForwardHeaders != "" {
					fwd = regexp.MustCompile(rc.ForwardHeaders) // validated by config
				}
				sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
				rest = restfront.New(gw, restfront.Options{Log: log, MaxBody: int64(cfg.GRPC.MaxMessageMiB) << 20,
					HeaderTimeout: sec(rc.HeaderTimeoutS), ReadTimeout: sec(rc.ReadTimeoutS), WriteTimeout: sec(rc.WriteTimeoutS),
					IdleTimeout: sec(rc.IdleTimeoutS), MaxConns: rc.MaxConns, MaxJSONParses: rc.MaxJSONParses, ForwardHeaders: fwd,
					Wrap: func(h http.Handler) http.Handler { return exp.httpHandler(h, log, reg) }})
			}
			go func() { errc <- rest.Serve(l.ln) }()
			continue
		}
		if l.name == "metrics" {
			mux := http.NewServeMux()
			mux.Handle("/metrics", exp.metricsHandler(reg.Handler(), log, reg))
			mux.Handle("/debug/trace", exp.metricsHandler(rec.Handler(trace.WriteChrome), log, reg))
			mux.Handle("/debug/timeline", exp.metricsHandler(trace.TimelineHandler(rec.Recent), log, reg))
			metricsSrv = newMetricsServer(mux)
			go func() { errc <- ignoreClosed(metricsSrv.Serve(l.ln)) }()
			continue
		}
		go func() { errc <- gw.Serve(l.ln) }()
	}
	log.Info("vig serving", "version", version.String(), "grpc", addrs["grpc"], "unix", addrs["unix"], "ring", addrs["ring"],
		"http", addrs["http"], "http_unix", addrs["http_unix"], "metrics", addrs["metrics"], "backend", cfg.Backend.Address, "slots", cfg.Backend.Slots,
		"accelerators", acceleratorList(cfg), "tls", exp.tls != nil, "token", exp.token != nil, "peer_allowlist", exp.peers.Restricted())
	if ready != nil {
		ready <- addrs
	}
	stopping := notifyReady(log) // systemd: READY=1, watchdog

	select {
	case <-ctx.Done():
	case err = <-errc:
		log.Error("listener failed", "err", err)
	}
	stopping() // systemd: STOPPING=1
	log.Info("draining: no new requests accepted; answering the accepted ones")
	gov.Drain()
	if ring != nil {
		ring.Close()
	}
	if rest != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		rest.Shutdown(sctx) // answers the requests in flight
		scancel()
	}
	gw.GracefulStop()
	recording.finish() // every accepted request is answered: the file ends with their answers
	n, accepted := gw.Answered(), gw.Accepted()
	log.Info(fmt.Sprintf("drained: %d answered, %d lost", n, accepted-n))
	if answered != nil {
		*answered = n
	}
	if metricsSrv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		metricsSrv.Shutdown(sctx)
		scancel()
	}
	return err
}

// layoutWait bounds how long vig serve waits for the backend to describe
// the layout before it schedules (--layout-wait).
var layoutWait = 45 * time.Second

// serverModels reads the configuration of each of models from the backend
// at addr (host:port or unix:PATH) over a connection of its own, dialled as
// doctor dials it: the layout is read before the gateway exists.
// servermodel.ReadAll says what its answers mean.
func serverModels(ctx context.Context, addr string, models []string) (map[string]*wire.ModelConfig, error) {
	c, closeFn, err := deviceprobe.DialBackend(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	return servermodel.ReadAll(ctx, c, models)
}

// resolveLayout reads the server's model configuration before the scheduler
// is built, when the config leaves the layout to the server: retried with
// backoff while the backend is not up, for at most wait. Then, with
// accelerators: from_server, vig exits with the fix; without accelerators,
// it starts with the config's own layout (backend.slots) and says so.
func resolveLayout(ctx context.Context, cfg *config.Config, log *slog.Logger, wait time.Duration) error {
	if _, ring := cfg.Backend.RingBackend(); ring || cfg.Backend.Embedded || !cfg.DerivesLayout() {
		// A ring runtime does not describe its models, the embedded mock
		// serves the config's; a declared layout is compared on connect.
		return nil
	}
	models := cfg.ServedModelNames()
	deadline := time.Now().Add(wait)
	backoff, said := 100*time.Millisecond, time.Time{}
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		srv, err := serverModels(rctx, cfg.Backend.Address, models)
		cancel()
		if err == nil {
			notes, err := cfg.Resolve(srv)
			for _, n := range notes {
				log.Warn("layout: "+n.String(), "model", n.Model)
			}
			if err != nil {
				return configError{err}
			}
			logLayout(log, cfg)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, servermodel.ErrBadModelConfig) {
			return fmt.Errorf("the backend at %s answered, but %w: check that it is Triton (or speaks its ModelConfig) and the model's config.pbtxt, "+
				"or declare the accelerators and each model's on: in vig's config", cfg.Backend.Address, err)
		}
		if time.Now().After(deadline) {
			if cfg.LayoutFromServer() {
				return fmt.Errorf("accelerators: from_server, but the backend at %s did not describe the models within %s (%v): "+
					"start the backend first (or give vig longer: --layout-wait), or declare the accelerators and each model's on: in the config", cfg.Backend.Address, wait, err)
			}
			log.Warn("the backend did not describe the models in time: vig schedules with the config's own layout (one accelerator of backend.slots); "+
				"once the backend is up vig compares its layout and says so if it differs (then restart vig)",
				"backend", cfg.Backend.Address, "waited", wait, "slots", cfg.Backend.Slots, "err", err)
			// The layout vig runs, for that comparison: nothing described.
			if _, err := cfg.Resolve(nil); err != nil {
				return configError{err}
			}
			return nil
		}
		if time.Since(said) >= 10*time.Second {
			log.Info("waiting for the backend to describe the models' instance groups (the layout vig schedules)",
				"backend", cfg.Backend.Address, "models", len(models), "up_to", time.Until(deadline).Round(time.Second), "err", err)
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// logLayout says where each model runs and where that comes from.
func logLayout(log *slog.Logger, cfg *config.Config) {
	l, _ := cfg.Resolved()
	if len(l.Accelerators) == 0 {
		log.Info("layout: the server describes none of the models: one accelerator of backend.slots", "slots", cfg.Backend.Slots)
		return
	}
	log.Info("layout derived from the server", "accelerators", acceleratorList(cfg), "models", l.Described)
	for _, name := range cfg.ServedModelNames() {
		p := cfg.PlacementOf(name)
		log.Info("layout", "model", name, "on", p.Accelerator, "instances", p.Instances, "source", p.Source.String())
	}
}

// ringConfig sizes the ring to a ring backend from the config (0 = default).
func ringConfig(r config.BackendRing) shmring.Config {
	c := shmring.DefaultConfig
	if r.SlotKiB > 0 {
		c.Requests.SlotSize = r.SlotKiB << 10
	}
	if r.Slots > 0 {
		c.Requests.Slots = r.Slots
	}
	if r.ResponseSlotKiB > 0 {
		c.Responses.SlotSize = r.ResponseSlotKiB << 10
	}
	return c
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// The metrics port's limits: a scraper sends one small GET and reads the answer.
// A client that trickles its headers (slowloris), holds a kept-alive connection
// idle or never reads the answer is cut off at these bounds, so that it holds a
// descriptor and a goroutine for seconds, not forever. Variables for the tests.
var (
	metricsHeaderTimeout = 5 * time.Second
	metricsWriteTimeout  = 30 * time.Second
	metricsIdleTimeout   = 60 * time.Second
)

const metricsMaxHeaderBytes = 16 << 10

func newMetricsServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: metricsHeaderTimeout, ReadTimeout: metricsHeaderTimeout,
		WriteTimeout: metricsWriteTimeout, IdleTimeout: metricsIdleTimeout, MaxHeaderBytes: metricsMaxHeaderBytes}
}

// acceleratorList names the accelerators and their slots for the log
// ("dla=2,gpu=1"); empty for the one-accelerator shorthand (backend.slots).
func acceleratorList(cfg *config.Config) string {
	var names []string
	for _, a := range cfg.AcceleratorList() {
		if a.Name != "" {
			names = append(names, fmt.Sprintf("%s=%d", a.Name, a.Slots))
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}
