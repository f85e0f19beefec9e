package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/servermodel"
	"github.com/vig-edge/vig/android"
	"github.com/vig-edge/vig/jetson"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/cpu"
	"github.com/vig-edge/vig/platform/proc"
	"github.com/vig-edge/vig/platform/sysinfo"
	"github.com/vig-edge/vig/proto/inference"
)

// Host is the device as the checks see it. doctor itself makes no system calls:
// files are read through Root, tools run through Exec, and the probes that must
// exercise the kernel (shared memory, sockets, the backend connection) are
// functions from platform/shmprobe and platform/deviceprobe. cmd/vig fills every
// field for the machine doctor runs on; tests use fixtures.
type Host struct {
	Root   fs.FS                                                                  // the machine's "/"
	Getenv func(string) string                                                    // environment
	Exec   func(ctx context.Context, name string, args ...string) ([]byte, error) // run a tool
	EUID   int                                                                    // effective user id

	DevShm  func() error                    // /dev/shm present and writable
	Memfd   func() error                    // memfd_create with sealing works
	NoDelay func(ctx context.Context) error // TCP_NODELAY set and read back on a loopback pair
	// DialBackend connects to a Triton-protocol backend; close releases it.
	DialBackend func(ctx context.Context, address string) (c inference.GRPCInferenceServiceClient, close func(), err error)
	// BPF loads a trivial tracepoint program: whether the kernel (and any
	// emulator in between) accepts eBPF at all.
	BPF func() error
	// Since measures the latency of the ServerLive call (time.Since on a device).
	Since func(time.Time) time.Duration
	// CPUPlacement tries the cpu: section on a scratch thread and reads back what
	// the kernel granted (cmd/vig's cpuTrial on a device).
	CPUPlacement func(config.CPU) CPUTrial
	// Route reports the route and interface that reach an address
	// (netopt.RouteTo on a device); nil skips the route check.
	Route func(ctx context.Context, address string) (netopt.Route, error)
}

// Locations the eBPF check looks at. Variables so that tests and odd kernels can
// change them.
var (
	ProcSelfStatus = "/proc/self/status"
	BTFVmlinux     = "/sys/kernel/btf/vmlinux"
)

// Options selects what Run checks.
type Options struct {
	// Device runs the device checks besides the static analysis.
	Device bool
	// Host is the device to check (cmd/vig's deviceHost for this machine).
	// Without one the device checks are reported as skipped.
	Host *Host
	// Profile is the device whose limits remedies keep to; nil: the one
	// DetectProfile recognises on Host, if any.
	Profile *Profile
}

// Run analyses cfg and, with Options.Device, checks the device. This is what both
// `vig doctor` and `vig serve` call.
func Run(ctx context.Context, cfg *config.Config, opts Options) Report {
	p := opts.Profile
	if p == nil && opts.Host != nil && opts.Host.Root != nil {
		if d, ok := DetectProfile(opts.Host.Root, opts.Host.Getenv); ok {
			p = &d
		}
	}
	l := layoutOf(cfg, p)
	r := Report{Slots: cfg.Backend.Slots, Findings: analyze(cfg, l), Accelerators: l.accels, Device: p}
	if l.named() {
		r.Models = l.modelList()
	}
	if opts.Device {
		if opts.Host == nil {
			r.Checks = []Check{{Name: "device", Status: Skipped, Detail: "no access to the device was given to doctor (Options.Host is nil)"}}
		} else {
			r.Checks = DeviceChecks(ctx, cfg, opts.Host)
		}
	}
	return r
}

// DeviceChecks runs every device check on h, in a fixed order.
func DeviceChecks(ctx context.Context, cfg *config.Config, h *Host) []Check {
	var cs []Check
	cs = append(cs, backendChecks(ctx, cfg, h)...)
	cs = append(cs, routeCheck(ctx, cfg, h))
	cs = append(cs, noDelayCheck(ctx, h))
	cs = append(cs, shmChecks(h)...)
	cs = append(cs, cpuChecks(h)...)
	cs = append(cs, cpuPlacementChecks(cfg, h)...)
	cs = append(cs, androidChecks(ctx, h)...)
	cs = append(cs, jetsonChecks(ctx, h)...)
	cs = append(cs, bpfCheck(h))
	return cs
}

const backendTimeout = 3 * time.Second

func backendChecks(ctx context.Context, cfg *config.Config, h *Host) []Check {
	if cfg.Backend.Embedded {
		return []Check{{Name: "backend", Status: Skipped, Detail: fmt.Sprintf(
			"backend.embedded: vig serve runs the mock backend in-process (models %s); there is nothing to reach before it starts",
			strings.Join(cfg.ServedModelNames(), ", "))}}
	}
	addr := cfg.Backend.Address
	ctx, cancel := context.WithTimeout(ctx, backendTimeout)
	defer cancel()
	client, closeFn, err := h.DialBackend(ctx, addr)
	if err != nil {
		return []Check{{Name: "backend", Status: Fail, Detail: fmt.Sprintf("%s: %v", addr, err)}}
	}
	defer closeFn()
	start := time.Now()
	live, err := client.ServerLive(ctx, &inference.ServerLiveRequest{})
	lat := h.Since(start)
	switch {
	case err != nil:
		return []Check{{Name: "backend", Status: Warn, Detail: fmt.Sprintf(
			"%s unreachable: %v; vig answers UNAVAILABLE and reconnects with backoff until it is up (start the server, or set backend.embedded: true)", addr, err)}}
	case !live.GetLive():
		return []Check{{Name: "backend", Status: Warn, Detail: fmt.Sprintf("%s answers but is not live (ServerLive false, %s)", addr, lat.Round(10*time.Microsecond))}}
	}
	cs := []Check{{Name: "backend", Status: OK, Detail: fmt.Sprintf("%s live, ServerLive took %s", addr, lat.Round(10*time.Microsecond))}}
	for _, m := range cfg.ServedModelNames() {
		c := Check{Name: "model " + m}
		rr, err := client.ModelReady(ctx, &inference.ModelReadyRequest{Name: m})
		switch {
		case err != nil:
			c.Status, c.Detail = Warn, fmt.Sprintf("ModelReady: %v", err)
		case !rr.GetReady():
			c.Status, c.Detail = Warn, "not ready: load it in the backend (its repository or RepositoryModelLoad) before vig forwards to it"
		default:
			c.Status, c.Detail = OK, "ready"
		}
		cs = append(cs, c)
		if c.Status == OK {
			cs = append(cs, batchCheck(ctx, cfg, m, client))
		}
	}
	return cs
}

// batchCheck compares how the config and the server batch model: vig batches
// up to the server's max_batch_size when max_batch is absent, never above it,
// never a model with a sequence batcher.
func batchCheck(ctx context.Context, cfg *config.Config, m string, client inference.GRPCInferenceServiceClient) Check {
	c := Check{Name: "model " + m + " batching"}
	r := servermodel.Read(ctx, client, m)
	if r.Outcome != servermodel.Described {
		c.Status, c.Detail = Skipped, fmt.Sprintf("the server's ModelConfig is unavailable (%v): vig batches as its config says", r.Err)
		return c
	}
	mc := r.Config
	n, why := config.BatchFromServer(cfg.Models[m].MaxBatch, mc.MaxBatchSize, mc.SequenceBatching)
	switch {
	case why != "":
		c.Status, c.Detail = Warn, why
	case n > 1:
		c.Status, c.Detail = OK, fmt.Sprintf("vig merges up to %d frames per request (server max_batch_size %d)", n, mc.MaxBatchSize)
	default:
		c.Status, c.Detail = OK, fmt.Sprintf("one frame per request (server max_batch_size %d%s)", mc.MaxBatchSize, map[bool]string{true: ", sequence batcher", false: ""}[mc.SequenceBatching])
	}
	return c
}

// routeCheck says which link reaches the backend. Off loopback, shared memory with
// the backend is impossible and every payload crosses a real link.
func routeCheck(ctx context.Context, cfg *config.Config, h *Host) Check {
	c := Check{Name: "backend route"}
	addr := cfg.Backend.Address
	network, _ := netopt.Split(addr)
	_, ring := cfg.Backend.RingBackend()
	switch {
	case cfg.Backend.Embedded:
		c.Status, c.Detail = Skipped, "backend.embedded: the mock backend runs inside vig"
		return c
	case ring || network == "unix":
		c.Status, c.Detail = OK, addr+": a Unix socket, so the backend is on this machine (shared memory possible)"
		return c
	case h.Route == nil:
		c.Status, c.Detail = Skipped, "no route lookup was given to doctor (Host.Route is nil)"
		return c
	}
	r, err := h.Route(ctx, addr)
	if err != nil {
		c.Status, c.Detail = skippable(err)
		return c
	}
	if r.Local() {
		c.Status, c.Detail = OK, r.String()+": on this machine (shared memory possible)"
		return c
	}
	c.Status = Warn
	c.Detail = fmt.Sprintf("%s: the backend is on another machine over %s, so shared memory with it is impossible "+
		"(Triton system shared memory and vig's rings need one machine) and every payload crosses that link "+
		"on the copy path; run the backend on this device, or budget exec_ms for the transfer", r, r.Kind)
	return c
}

func noDelayCheck(ctx context.Context, h *Host) Check {
	if err := h.NoDelay(ctx); err != nil {
		if st, why := skippable(err); st == Skipped {
			return Check{Name: "tcp_nodelay", Status: Skipped, Detail: why}
		}
		return Check{Name: "tcp_nodelay", Status: Fail, Detail: fmt.Sprintf("%v: netopt refuses such connections, so vig cannot serve over TCP", err)}
	}
	return Check{Name: "tcp_nodelay", Status: OK, Detail: "set and read back on both ends of a loopback connection opened through netopt"}
}

func shmChecks(h *Host) []Check {
	devShm := Check{Name: "shm /dev/shm", Status: OK, Detail: "present and writable (Triton system shared memory works)"}
	memfd := Check{Name: "shm memfd", Status: OK, Detail: "memfd_create(MFD_ALLOW_SEALING) and F_ADD_SEALS(shrink|grow|seal) work (vig's shared-memory ring)"}
	errShm, errMemfd := h.DevShm(), h.Memfd()
	if errShm != nil {
		devShm.Status, devShm.Detail = skippable(errShm)
		if devShm.Status == Skipped && errMemfd == nil {
			devShm.Detail += "; vig's ring uses memfd instead"
		}
	}
	if errMemfd != nil {
		memfd.Status, memfd.Detail = skippable(errMemfd)
	}
	if errShm != nil && errMemfd != nil {
		// Neither shared-memory path: only the copy path is left.
		memfd.Status = Warn
		memfd.Detail += "; with no /dev/shm either, only the copy path (payload inside gRPC) works"
	}
	return []Check{devShm, memfd}
}

func cpuChecks(h *Host) []Check {
	topo, err := cpu.ReadTopology(h.Root)
	var cs []Check
	if err != nil {
		st, why := skippable(err)
		cs = append(cs, Check{Name: "cpu topology", Status: st, Detail: why})
	} else {
		var parts []string
		for _, c := range topo.Clusters {
			parts = append(parts, c.String())
		}
		detail := fmt.Sprintf("%d CPUs: %s", len(topo.CPUs), strings.Join(parts, "; "))
		if len(topo.Offline) > 0 {
			detail += fmt.Sprintf("; cpu%s offline", cpu.FormatList(topo.Offline))
		}
		cs = append(cs, Check{Name: "cpu topology", Status: OK, Detail: detail})
		governed := false
		for _, c := range topo.Clusters {
			if len(c.Governors) == 0 {
				continue
			}
			governed = true
			g := Check{Name: "governor cpu" + cpu.FormatList(c.CPUs), Status: OK, Detail: strings.Join(c.Governors, ", ")}
			if c.Driver != "" {
				g.Detail += " (" + c.Driver + ")"
			}
			if a := cpu.GovernorAdvice(c); a != "" {
				g.Status, g.Detail = Warn, a
			}
			cs = append(cs, g)
		}
		if !governed {
			cs = append(cs, Check{Name: "governor", Status: Skipped, Detail: "not supported here: no cpufreq in sysfs (a virtual machine, or frequency is managed by firmware)"})
		}
	}
	clk, err := cpu.ReadClocksource(h.Root)
	switch {
	case err != nil:
		st, why := skippable(err)
		cs = append(cs, Check{Name: "clocksource", Status: st, Detail: why})
	case clk.Advice() != "":
		cs = append(cs, Check{Name: "clocksource", Status: Warn, Detail: clk.Advice()})
	default:
		cs = append(cs, Check{Name: "clocksource", Status: OK, Detail: clk.Current + " (clock reads stay in the vDSO)"})
	}
	return cs
}

func androidChecks(ctx context.Context, h *Host) []Check {
	ok, why := android.Detect(h.Root, h.Getenv)
	if !ok {
		return []Check{{Name: "android", Status: Skipped, Detail: "not Android (" + why + ")"}}
	}
	s := android.Check(ctx, h.Root, h.Exec)
	return []Check{
		{Name: "android", Status: OK, Detail: why},
		reading("android doze", s.Doze.Value, s.Doze.Advice, s.Doze.Err),
		reading("android wakefulness", s.Wakefulness.Value, s.Wakefulness.Advice, s.Wakefulness.Err),
		reading("android thermal", s.Thermal.Value, s.Thermal.Advice, s.Thermal.Err),
		reading("android perf_harden", s.PerfHarden.Value, s.PerfHarden.Advice, s.PerfHarden.Err),
	}
}

func jetsonChecks(ctx context.Context, h *Host) []Check {
	ok, why := jetson.Detect(h.Root)
	if !ok {
		return []Check{{Name: "jetson", Status: Skipped, Detail: "not a Jetson (" + why + ")"}}
	}
	s := jetson.Check(ctx, h.Root, h.Exec)
	pm := reading("jetson nvpmodel", s.PowerMode.Value, s.PowerMode.Advice, s.PowerMode.Err)
	if pm.Status == OK {
		pm.Detail += " — exec_ms priors hold only in the mode they were measured in"
	}
	return []Check{
		{Name: "jetson", Status: OK, Detail: why},
		pm,
		reading("jetson_clocks", s.Clocks.Value, s.Clocks.Advice, s.Clocks.Err),
		reading("jetson gpu load", s.GPULoad.Value, s.GPULoad.Advice, s.GPULoad.Err),
		reading("jetson load", s.Load.Value, s.Load.Advice, s.Load.Err),
	}
}

// reading turns a policy package's reading into a check.
func reading(name, value, advice string, err error) Check {
	switch {
	case err != nil:
		st, why := skippable(err)
		return Check{Name: name, Status: st, Detail: why}
	case advice != "":
		return Check{Name: name, Status: Warn, Detail: value + ": " + advice}
	}
	return Check{Name: name, Status: OK, Detail: value}
}

// skippable classifies an error of a check: a feature this device does not have, or
// a permission the user lacks, skips the check with the reason; anything else means
// the feature is there but broken.
func skippable(err error) (Status, string) {
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return Skipped, "not supported here: " + err.Error()
	case errors.Is(err, fs.ErrPermission):
		return Skipped, "needs root: " + err.Error()
	case errors.Is(err, fs.ErrNotExist):
		return Skipped, "not supported here: " + err.Error()
	}
	return Warn, err.Error()
}

// bpfCheck says whether `vig profile` can use eBPF here: privileges (root, or
// CAP_BPF with CAP_PERFMON), tracefs for the tracepoints, and BTF (optional: vig's
// probes use classic tracepoints with fixed layouts, not CO-RE).
func bpfCheck(h *Host) Check {
	c := Check{Name: "ebpf"}
	status, err := fs.ReadFile(h.Root, rel(ProcSelfStatus))
	if err != nil {
		c.Status, c.Detail = Skipped, "not supported here: cannot read "+ProcSelfStatus+": "+err.Error()
		return c
	}
	st, err := proc.ParseStatus(status)
	if err == nil && !st.HaveCapEff {
		err = errors.New("no CapEff line")
	}
	if err != nil {
		c.Status, c.Detail = Warn, ProcSelfStatus+": "+err.Error()
		return c
	}
	caps := st.CapEff
	has := func(bit int) bool { return proc.HasCap(caps, bit) }
	privileged := has(proc.CapSysAdmin) || (has(proc.CapBPF) && has(proc.CapPerfmon))
	if !privileged {
		c.Status = Skipped
		c.Detail = fmt.Sprintf("needs root (or CAP_BPF+CAP_PERFMON; uid %d, CapEff %016x): vig profile uses /proc and perf counters instead", h.EUID, caps)
		return c
	}
	tracefs := ""
	for _, d := range sysinfo.TracefsDirs {
		if _, err := fs.Stat(h.Root, rel(d)+"/events/raw_syscalls"); err == nil {
			tracefs = d
			break
		}
	}
	btf := "BTF present"
	if _, err := fs.Stat(h.Root, rel(BTFVmlinux)); err != nil {
		btf = "no BTF (fine: classic tracepoints, no CO-RE)"
	}
	if err := h.BPF(); err != nil {
		st, why := skippable(err)
		c.Status, c.Detail = st, "loading a tracepoint program: "+why
		if st == Warn {
			c.Detail = "privileged, but " + c.Detail
		}
		return c
	}
	if tracefs == "" {
		c.Status = Warn
		c.Detail = fmt.Sprintf("privileged, but tracefs is not mounted (no events/raw_syscalls under %s): mount -t tracefs nodev %s; %s",
			strings.Join(sysinfo.TracefsDirs, " or "), sysinfo.TracefsDirs[0], btf)
		return c
	}
	c.Status, c.Detail = OK, fmt.Sprintf("privileged, tracepoint programs load, tracefs at %s, %s", tracefs, btf)
	return c
}

func rel(p string) string { return strings.TrimPrefix(p, "/") }
