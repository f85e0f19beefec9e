package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"slices"
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
	"github.com/vig-edge/vig/wire"
)

const mockBackendUsage = `Usage: vig mock-backend [flags]

Serves vig's mock Triton backend: a real Triton-protocol gRPC server whose models hold
an accelerator slot for a deterministic time instead of computing (see package
mockbackend). It runs until SIGINT or SIGTERM, then stops gracefully.

Models come from --model flags, from a vig config (-c: its models, backend.slots,
backend.seed, backend.address and grpc sizing), or both (--model adds or overrides).
A request id "<stream>#<frame>" selects the frame whose execution time is used.
--batch gives a model Triton's max_batch_size with its dynamic batcher: an
execution of b rows costs the mean of their times x (1 + gain·(b − 1)). From -c, a
model with max_batch > 1 batches so, at the gain its batch_exec_ms implies.

Placement as Triton binds models (docs/jetson.md): --repository FILE, or
--instance NAME=gpu|cpu|dla<N>[:COUNT], gives models their instance groups; the
device then has the GPU (--gpu-slots, default 1), one accelerator of one slot per
DLA core a model is bound to, and the CPU; each has its own FIFO, and a model runs
at most COUNT executions at once. ModelConfig reports the groups (a DLA engine as
KIND_GPU with secondary device KIND_NVDLA N). --interference gpu=1.3,dla=1.15: a
job that starts while another accelerator runs one takes x its factor.

Examples:
  vig mock-backend --model detector=8 --model vlm=200 --slots 1
  vig mock-backend --model detector=10 --batch detector=8,gain=0.25 --model depth=6
  vig mock-backend -c examples/demo.yaml --listen unix:/tmp/mock.sock
  vig mock-backend --repository examples/scenarios/d2.repository.yaml
  vig mock-backend --model det_gpu=8 --model det_dla0=14 --instance det_dla0=dla0 --interference gpu=1.3,dla=1.15

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

// mockBatchFlags collects repeated --batch NAME=MAX[,gain=G][,delay_us=N][,preferred=P/P…].
type mockBatchFlags []mockbackend.Model

func (m *mockBatchFlags) String() string { return fmt.Sprint(len(*m), " batching models") }

func (m *mockBatchFlags) Set(v string) error {
	const want = "want NAME=MAX[,gain=G][,delay_us=N][,preferred=P/P…], e.g. detector=8,gain=0.25"
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: %s", v, want)
	}
	parts := strings.Split(rest, ",")
	n, err := strconv.Atoi(parts[0])
	if err != nil || n < 1 || n > config.MaxBatch {
		return fmt.Errorf("%q: MAX must be a batch size from 1 to %d (Triton's max_batch_size); %s", v, config.MaxBatch, want)
	}
	mb := mockbackend.Model{Name: name, MaxBatch: n, Batcher: &wire.DynamicBatching{}, BatchGain: 1}
	for _, p := range parts[1:] {
		key, val, _ := strings.Cut(p, "=")
		switch key {
		case "gain":
			g, err := strconv.ParseFloat(val, 64)
			if err != nil || g < 0 || math.IsInf(g, 0) {
				return fmt.Errorf("%q: gain %q: give a number, 0 or more (1: a batch costs its rows' single runs)", v, val)
			}
			mb.BatchGain = g
		case "delay_us":
			d, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return fmt.Errorf("%q: delay_us %q: give Triton's max_queue_delay_microseconds, a whole number", v, val)
			}
			mb.Batcher.MaxQueueDelayMicroseconds = d
		case "preferred":
			for _, ps := range strings.Split(val, "/") {
				p, err := strconv.Atoi(ps)
				if err != nil || p < 1 || p > n {
					return fmt.Errorf("%q: preferred batch size %q: sizes from 1 to MAX (%d), separated by /", v, ps, n)
				}
				mb.Batcher.PreferredBatchSize = append(mb.Batcher.PreferredBatchSize, int32(p))
			}
		default:
			return fmt.Errorf("%q: unknown option %q; %s", v, key, want)
		}
	}
	*m = append(*m, mb)
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
		file      = configFlag(fs, "", "vig config `FILE` to take models, slots, seed, address and gRPC sizing from")
		slots     = fs.Int("slots", 1, "jobs that execute at once (default with -c: backend.slots)")
		seed      = fs.Uint64("seed", 0, "seed of the per-frame execution times (default with -c: backend.seed)")
		logFormat = fs.String("log-format", "text", "log format: text or json (default with -c: log.format)")
		ringAddr  = fs.String("ring", "", "also serve shared-memory ring clients on the Unix socket `ADDR` (@name: abstract namespace), as an on-device runtime without gRPC")
	)
	fs.Var(&models, "model", "a model as `NAME=EXEC_MS` (base execution time in ms); repeatable")
	var batches mockBatchFlags
	fs.Var(&batches, "batch", "a model's batching as `NAME=MAX[,gain=G][,delay_us=N][,preferred=P/P…]`: Triton's max_batch_size with its dynamic batcher, the batch gain (default 1: no gain); repeatable")
	seqs, queues := mockSequenceFlags{}, mockQueueFlags{}
	fs.Var(seqs, "sequence", "serve model NAME behind Triton's sequence batcher: `NAME[=MAX_IDLE_MS[,SLOTS]]`; repeatable")
	instances := mockInstanceFlags{}
	fs.Var(instances, "instance", "place model NAME as Triton's instance group: `NAME=gpu|cpu|dla<N>[:COUNT]` (dla0: an engine on DLA core 0); repeatable, overrides --repository")
	repoFile := fs.String("repository", "", "YAML `FILE` describing the model repository: gpu_slots, interference, models: {NAME: {exec_ms, kind, count, dla_core}} (docs/jetson.md)")
	gpuSlots := fs.Int("gpu-slots", 0, "with a repository: jobs the GPU runs at once (default 1, or the repository's gpu_slots)")
	interference := fs.String("interference", "", "with a repository: slowdown of a job that starts while another accelerator runs one, `LIST` such as gpu=1.3,dla=1.15 (dla: every core; dla0: one)")
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
	if *repoFile != "" || len(instances) > 0 || set["gpu-slots"] || set["interference"] {
		if set["slots"] {
			fmt.Fprintln(stderr, "vig mock-backend: --slots: a repository places the models on the GPU, DLA cores and CPU: give the GPU's slots with --gpu-slots")
			return 2
		}
		repo, err := mockRepository(*repoFile, instances, *gpuSlots, *interference)
		if err != nil {
			fmt.Fprintf(stderr, "vig mock-backend: %v\n", err)
			return 2
		}
		if err := repo.Apply(&cfg); err != nil {
			fmt.Fprintf(stderr, "vig mock-backend: %v\n", err)
			return 2
		}
	}
	if len(cfg.Models) == 0 {
		fmt.Fprintln(stderr, "vig mock-backend: no models: give --model NAME=EXEC_MS (e.g. --model detector=8) or -c FILE with a models: section")
		return 2
	}
	if err := applyMockModelFlags(cfg.Models, seqs, queues); err != nil {
		fmt.Fprintf(stderr, "vig mock-backend: %v\n", err)
		return 2
	}
	for _, b := range batches {
		i := slices.IndexFunc(cfg.Models, func(m mockbackend.Model) bool { return m.Name == b.Name })
		if i < 0 {
			fmt.Fprintf(stderr, "vig mock-backend: --batch %s: no such model; give it with --model %s=EXEC_MS or in -c's models:\n", b.Name, b.Name)
			return 2
		}
		cfg.Models[i].MaxBatch, cfg.Models[i].Batcher, cfg.Models[i].BatchGain = b.MaxBatch, b.Batcher, b.BatchGain
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
		d := fmt.Sprintf("%s=%v", m.Name, m.Exec)
		if m.On != "" {
			d += " on " + m.On
			if m.Instances > 1 {
				d += fmt.Sprintf(" x%d", m.Instances)
			}
		}
		if m.MaxBatch > 0 {
			d += fmt.Sprintf(" (batch %d, gain %g)", m.MaxBatch, m.BatchGain)
		}
		desc = append(desc, d)
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
	var accels []string
	for _, a := range cfg.Accelerators {
		accels = append(accels, fmt.Sprintf("%s:%d", a.Name, a.Slots))
	}
	log.Info("mock backend serving", "addr", r.Addr(), "models", strings.Join(desc, ","),
		"slots", cfg.Slots, "accelerators", strings.Join(accels, ","), "interference", cfg.Interference, "seed", cfg.Seed, "spin", r.Spin())
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

// mockInstanceFlags collects repeated --instance NAME=gpu|cpu|dla<N>[:COUNT].
type mockInstanceFlags map[string]mockbackend.RepositoryModel

func (m mockInstanceFlags) String() string { return fmt.Sprint(len(m), " instance groups") }

func (m mockInstanceFlags) Set(v string) error {
	name, where, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want NAME=gpu|cpu|dla<N>[:COUNT], e.g. detector_dla0=dla0 or pose=gpu:2", v)
	}
	g, err := mockbackend.ParseInstance(where)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	m[name] = g
	return nil
}

// mockRepository is the repository of --repository, with --instance,
// --gpu-slots and --interference over it.
func mockRepository(file string, instances mockInstanceFlags, gpuSlots int, interference string) (*mockbackend.Repository, error) {
	repo := &mockbackend.Repository{}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--repository: %w", err)
		}
		if repo, err = mockbackend.ParseRepository(file, data); err != nil {
			return nil, fmt.Errorf("--repository %w", err)
		}
	}
	if repo.Models == nil {
		repo.Models = map[string]mockbackend.RepositoryModel{}
	}
	for name, g := range instances {
		g.ExecMs = repo.Models[name].ExecMs
		repo.Models[name] = g
	}
	if gpuSlots < 0 {
		return nil, fmt.Errorf("--gpu-slots %d: give 1 or more", gpuSlots)
	}
	if gpuSlots > 0 {
		repo.GPUSlots = gpuSlots
	}
	if interference != "" {
		f, err := mockbackend.ParseInterference(interference)
		if err != nil {
			return nil, fmt.Errorf("--interference %w", err)
		}
		repo.Interference = f
	}
	return repo, nil
}
