package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/shmring"
)

const mockBackendUsage = `Usage: vig mock-backend [flags]

Serves vig's mock Triton backend: a real Triton-protocol gRPC server whose models hold
an accelerator slot for a deterministic time instead of computing (see package
mockbackend). It runs until SIGINT or SIGTERM, then stops gracefully.

Models come from --model flags, from a vig config (-c: its models, backend.slots,
backend.seed, backend.address and grpc sizing), or both (--model adds or overrides).
A request id "<stream>#<frame>" selects the frame whose execution time is used.

Examples:
  vig mock-backend --model detector=8 --model vlm=200 --slots 1
  vig mock-backend -c examples/demo.yaml --listen unix:/tmp/mock.sock

Flags:
`

// mockModelFlags collects repeated --model NAME=EXEC_MS flags.
type mockModelFlags []mockbackend.Model

func (m *mockModelFlags) String() string {
	var parts []string
	for _, x := range *m {
		parts = append(parts, fmt.Sprintf("%s=%g", x.Name, float64(x.Exec)/float64(time.Millisecond)))
	}
	return strings.Join(parts, ",")
}

func (m *mockModelFlags) Set(v string) error {
	name, ms, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want NAME=EXEC_MS, e.g. detector=8", v)
	}
	f, err := strconv.ParseFloat(ms, 64)
	if err != nil || f < 0 || f > 3.6e6 {
		return fmt.Errorf("%q: EXEC_MS must be a number of milliseconds between 0 and 3600000", v)
	}
	*m = append(*m, mockbackend.Model{Name: name, Exec: time.Duration(f * float64(time.Millisecond))})
	return nil
}

// runMockBackend is `vig mock-backend`. It returns the process exit code: 0 after a
// graceful stop, 1 when serving fails, 2 for bad flags or config.
func runMockBackend(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return mockBackend(ctx, args, os.Stdout, os.Stderr, nil)
}

// mockBackend runs the mock backend until ctx ends. ready, if not nil, is called with
// the address once the server accepts connections.
func mockBackend(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) int {
	fs := flag.NewFlagSet("mock-backend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		models    mockModelFlags
		listen    = fs.String("listen", config.DefaultBackendAddr, "address to serve on: host:port or unix:PATH (default with -c: backend.address)")
		file      = fs.String("c", "", "vig config `FILE` to take models, slots, seed, address and gRPC sizing from")
		slots     = fs.Int("slots", 1, "jobs that execute at once (default with -c: backend.slots)")
		seed      = fs.Uint64("seed", 0, "seed of the per-frame execution times (default with -c: backend.seed)")
		logFormat = fs.String("log-format", "text", "log format: text or json (default with -c: log.format)")
		ringAddr  = fs.String("ring", "", "also serve shared-memory ring clients on the Unix socket `ADDR` (@name: abstract namespace), as an on-device runtime without gRPC")
	)
	fs.Var(&models, "model", "a model as `NAME=EXEC_MS` (base execution time in ms); repeatable")
	seqs, queues := mockSequenceFlags{}, mockQueueFlags{}
	fs.Var(seqs, "sequence", "serve model NAME behind Triton's sequence batcher: `NAME[=MAX_IDLE_MS[,SLOTS]]`; repeatable")
	fs.Var(queues, "queue-timeout", "give model NAME a dynamic batcher queue policy that honours request timeouts below its default: `NAME=DEFAULT_TIMEOUT_MS[,PRIORITY_LEVELS]`; repeatable")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), mockBackendUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vig mock-backend: unexpected arguments %q (see --help)\n", fs.Args())
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	grpcCfg := config.GRPC{
		MaxMessageMiB:  config.DefaultMaxMessageMiB,
		WindowMiB:      config.DefaultWindowMiB,
		ReadBufferKiB:  config.DefaultReadBufferKiB,
		WriteBufferKiB: config.DefaultWriteBufferKiB,
	}
	level := slog.LevelInfo
	var cfg mockbackend.Config
	if *file != "" {
		data, err := readConfig(*file)
		if err != nil {
			fmt.Fprintf(stderr, "vig mock-backend: %v\n", err)
			return 2
		}
		c, err := config.Parse(*file, data)
		if err != nil {
			fmt.Fprintf(stderr, "vig mock-backend: %v\n", err)
			return 2
		}
		cfg = mockbackend.FromConfig(c)
		grpcCfg = c.GRPC
		if !set["listen"] {
			*listen = c.Backend.Address
		}
		if !set["log-format"] {
			*logFormat = c.Log.Format
		}
		if err := level.UnmarshalText([]byte(c.Log.Level)); err != nil {
			level = slog.LevelInfo // validated by config.Parse; unreachable
		}
	}
	if set["slots"] && len(cfg.Accelerators) > 0 {
		fmt.Fprintf(stderr, "vig mock-backend: --slots: %s declares accelerators with their slots; drop --slots\n", *file)
		return 2
	}
	if (*file == "" || set["slots"]) && len(cfg.Accelerators) == 0 {
		cfg.Slots = *slots
	}
	if *file == "" || set["seed"] {
		cfg.Seed = *seed
	}
	if cfg.Slots < 1 && len(cfg.Accelerators) == 0 {
		fmt.Fprintf(stderr, "vig mock-backend: --slots %d: need at least 1\n", cfg.Slots)
		return 2
	}
	cfg.Models = mergeMockModels(cfg.Models, models)
	if len(cfg.Models) == 0 {
		fmt.Fprintln(stderr, "vig mock-backend: no models: give --model NAME=EXEC_MS (e.g. --model detector=8) or -c FILE with a models: section")
		return 2
	}
	if err := applyMockModelFlags(cfg.Models, seqs, queues); err != nil {
		fmt.Fprintf(stderr, "vig mock-backend: %v\n", err)
		return 2
	}

	var h slog.Handler
	switch *logFormat {
	case "text":
		h = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		fmt.Fprintf(stderr, "vig mock-backend: --log-format %q: want text or json\n", *logFormat)
		return 2
	}
	log := slog.New(h)

	var st netopt.Stats
	r, err := mockbackend.Start(context.Background(), *listen, cfg, gateway.ServerOptions(grpcCfg), &st)
	if err != nil {
		log.Error("mock backend failed to start", "listen", *listen, "err", err)
		return 1
	}
	var desc []string
	for _, m := range cfg.Models {
		desc = append(desc, fmt.Sprintf("%s=%v", m.Name, m.Exec))
	}
	if *ringAddr != "" {
		region, err := shmring.Probe()
		if err != nil {
			log.Error("mock backend: no shared memory for rings", "err", err)
			r.Stop()
			return 1
		}
		rln, err := shmring.Listen(*ringAddr, shmring.ServerConfig{AllowUnsealed: region == shmring.BackendShmFile, Logger: log})
		if err != nil {
			log.Error("mock backend: ring listener failed", "ring", *ringAddr, "err", err)
			r.Stop()
			return 1
		}
		ringDone := make(chan error, 1)
		go func() { ringDone <- r.ServeRing(rln) }()
		defer func() {
			rln.Close()
			if err := <-ringDone; err != nil {
				log.Error("ring serving failed", "err", err)
			}
		}()
		log.Info("mock backend serving rings", "ring", rln.Addr())
	}
	log.Info("mock backend serving", "addr", r.Addr(), "models", strings.Join(desc, ","),
		"slots", cfg.Slots, "seed", cfg.Seed, "spin", r.Spin())
	if ready != nil {
		ready(r.Addr())
	}

	select {
	case <-ctx.Done():
		log.Info("stopping: finishing calls in flight")
	case <-r.Done():
	}
	serveErr := r.Stop()
	log.Info("mock backend stopped", "tcp_accepted", st.TCPAccepted.Load(), "unix_accepted", st.UnixAccepted.Load(),
		"nodelay_verified", st.NoDelayVerified.Load(),
		"nodelay_failed", st.NoDelayFailed.Load())
	if serveErr != nil {
		log.Error("serving failed", "err", serveErr)
		return 1
	}
	return 0
}

// mergeMockModels returns the config's models with the flags' added or replacing those of
// the same name, sorted by name.
func mergeMockModels(base []mockbackend.Model, flags []mockbackend.Model) []mockbackend.Model {
	byName := map[string]mockbackend.Model{}
	for _, m := range base {
		byName[m.Name] = m
	}
	for _, m := range flags {
		byName[m.Name] = m
	}
	out := make([]mockbackend.Model, 0, len(byName))
	for _, m := range byName {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
