package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/build/version"
)

// Benchmarks names what Run can run.
var Benchmarks = []string{"datapath", "wire", "idle", "all", "overload", "soak"}

// Options configures Run.
type Options struct {
	Which     string // datapath, wire, idle, all (the three), overload or soak
	Quick     bool   // shorter runs (make bench)
	Out       string // output directory; default vig-bench-results/<date>-<host>
	VigBinary string // vig to run as its own process (datapath, idle)
	// ScenarioDir holds a.yaml … d.yaml (default examples/scenarios); Only
	// names the wire scenarios to run (default DefaultWireScenarios).
	ScenarioDir string
	Only        []string
	Pin         bool // pin the proxy under test with taskset (default on in the CLI)
	// Duration is the length of an overload case or of the soak (0: their
	// defaults, 60 s and 10 min); Factor the overload's multiple of the
	// contracted frame rates (0: 10); RowEvery the soak's row interval (0: 1 min).
	// Duration is also the length of each wire run (0: 15 s, 5 s with Quick).
	Duration time.Duration
	Factor   int
	RowEvery time.Duration
	// DatapathPaths and DatapathPayloads narrow the datapath benchmark to
	// these paths and payload sizes (nil: all of them).
	DatapathPaths    []string
	DatapathPayloads []int
	// DatapathRuns is the datapath's runs per row (0: its default).
	DatapathRuns int
	// StockWindows: the datapath's client and mock backend use gRPC's default
	// flow control, as stock Triton clients and servers do.
	StockWindows bool
	// WireHTTPStreams and WirePolicies are WireOptions' HTTPStreams and
	// Policies.
	WireHTTPStreams []string
	WirePolicies    []string
	WireRounds      int
	// WireTrace writes the scheduling trace of each wire run of vig's
	// governor into Out/traces (WireOptions.TraceDir).
	WireTrace bool
	Command   string
	// Progress receives one line per step; TTY makes it a single line rewritten
	// in place.
	Progress io.Writer
	TTY      bool
}

// Results is everything a run measured: results.json.
type Results struct {
	Version   string    `json:"vig_version"`
	Command   string    `json:"command"`
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished"`
	Quick     bool      `json:"quick"`
	Machine   Machine   `json:"machine"`
	LoadStart string    `json:"loadavg_start"`
	LoadEnd   string    `json:"loadavg_end"`

	Datapath *DatapathResult `json:"datapath,omitempty"`
	Wire     *WireResult     `json:"wire,omitempty"`
	Idle     *IdleResult     `json:"idle,omitempty"`
	Overload *OverloadResult `json:"overload,omitempty"`
	Soak     *SoakResult     `json:"soak,omitempty"`
	Targets  []Target        `json:"targets"`
}

// Machine describes where the numbers come from.
type Machine struct {
	Host     string `json:"host"`
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model"`
	Kernel   string `json:"kernel"`
	GOOS     string `json:"goos"`
	GOARCH   string `json:"goarch"`
	Go       string `json:"go"`
	// Mitigations are the CPU vulnerability mitigations the kernel applies
	// (mitigationsDir), and the vulnerabilities it leaves open. They set what a
	// system call and a context switch cost, and so how a proxy that makes
	// fewer of them compares with one that makes more: the hosts a VM lands on
	// differ there most.
	Mitigations []string `json:"mitigations,omitempty"`
	// SyscallNs is what one system call (getppid) took when the run started:
	// the fastest of several timed loops.
	SyscallNs float64 `json:"syscall_ns,omitempty"`
}

// Paths read for the machine description; variables for tests.
var (
	loadavgPath = "/proc/loadavg"
	cpuinfoPath = "/proc/cpuinfo"
	osrelPath   = "/proc/sys/kernel/osrelease"

	mitigationsDir = "/sys/devices/system/cpu/vulnerabilities"
)

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

// parseCPUModel returns the first "model name" (x86) or "Hardware"/"CPU part"
// (arm64) line of /proc/cpuinfo.
func parseCPUModel(b []byte) string {
	for _, key := range []string{"model name", "Hardware", "CPU part"} {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && strings.TrimSpace(k) == key {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown"
}

// parseMitigations lists dir's vulnerabilities (one file each, as in
// /sys/devices/system/cpu/vulnerabilities) that the kernel mitigates or leaves
// open, as "name: what" (the text up to its first ';', without "Mitigation: "),
// in name order; those the CPU is not affected by are left out.
func parseMitigations(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimSpace(string(b)), ";")
		if v == "" || strings.HasPrefix(v, "Not affected") {
			continue
		}
		out = append(out, e.Name()+": "+strings.TrimPrefix(v, "Mitigation: "))
	}
	return out
}

// syscallNs times one raw system call, the fastest of five loops.
func syscallNs() float64 {
	const n = 20000
	best := 0.0
	for i := range 5 {
		start := time.Now()
		for range n {
			unix.Getppid()
		}
		if ns := float64(time.Since(start).Nanoseconds()) / n; i == 0 || ns < best {
			best = ns
		}
	}
	return best
}

func machine() Machine {
	host, _ := os.Hostname()
	cpuinfo, _ := os.ReadFile(cpuinfoPath)
	return Machine{Host: host, CPUs: runtime.NumCPU(), CPUModel: parseCPUModel(cpuinfo), Kernel: readTrim(osrelPath),
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version(),
		Mitigations: parseMitigations(mitigationsDir), SyscallNs: syscallNs()}
}

// DefaultOutRoot is where runs land by default: a directory of the current one,
// outside vig's source (bench/results keeps only the reports the docs cite,
// copied there on purpose).
const DefaultOutRoot = "vig-bench-results"

// DefaultOut is the default output directory for a run started at t on host.
func DefaultOut(t time.Time, host string) string {
	return filepath.Join(DefaultOutRoot, t.UTC().Format("2006-01-02")+"-"+host)
}

// DefaultOutFor is DefaultOut for benchmark which: overload and soak write
// beside the day's other results, in <date>-<host>-overload and -soak.
func DefaultOutFor(which string, t time.Time, host string) string {
	if which == "overload" || which == "soak" {
		return DefaultOut(t, host) + "-" + which
	}
	return DefaultOut(t, host)
}

// progress writes status lines: rewritten in place on a TTY, one per line
// otherwise.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	start time.Time
}

func (p *progress) printf(format string, args ...any) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := fmt.Sprintf("[%s] ", time.Since(p.start).Truncate(time.Second)) + fmt.Sprintf(format, args...)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", msg)
		return
	}
	fmt.Fprintln(p.w, msg)
}

func (p *progress) done() {
	if p.w != nil && p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// Run runs the selected benchmarks and writes results.json, report.md and the SVG
// plots into o.Out. It returns the results even when writing fails.
func Run(ctx context.Context, o Options) (*Results, error) {
	which := map[string]bool{}
	switch o.Which {
	case "all":
		which["datapath"], which["wire"], which["idle"] = true, true, true
	case "datapath", "wire", "idle", "overload", "soak":
		which[o.Which] = true
	default:
		return nil, fmt.Errorf("unknown benchmark %q (want one of %s)", o.Which, strings.Join(Benchmarks, ", "))
	}
	res := &Results{Version: version.String(), Command: o.Command, Started: time.Now().UTC(), Quick: o.Quick,
		Machine: machine(), LoadStart: readTrim(loadavgPath)}
	if o.Out == "" {
		o.Out = DefaultOutFor(o.Which, res.Started, res.Machine.Host)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	pr := &progress{w: o.Progress, tty: o.TTY, start: time.Now()}
	defer pr.done()
	if o.ScenarioDir == "" {
		o.ScenarioDir = DefaultScenarioDir
	}
	var scenarios []Scenario
	if which["wire"] {
		var err error
		only := o.Only
		if len(only) == 0 {
			only = DefaultWireScenarios
		}
		if scenarios, err = LoadScenarios(o.ScenarioDir, only); err != nil {
			return nil, err
		}
	}
	if (which["datapath"] || which["idle"] || which["overload"] || which["soak"]) && o.VigBinary == "" {
		return nil, fmt.Errorf("%s runs vig as its own process: no vig binary given", o.Which)
	}
	var scenarioB []byte
	if which["overload"] || which["soak"] {
		path := filepath.Join(o.ScenarioDir, "b.yaml")
		var err error
		if scenarioB, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("scenario b: %w (run from the repository root, or pass --scenarios DIR)", err)
		}
		if _, err := scenarioStreams(scenarioB); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}

	var err error
	if which["datapath"] {
		do := DatapathOptions{VigBinary: o.VigBinary, Pin: o.Pin, Progress: pr.printf, Paths: o.DatapathPaths, Payloads: o.DatapathPayloads, Runs: o.DatapathRuns, StockWindows: o.StockWindows}
		if o.Quick {
			do.Warmup, do.Rounds = 10, 100
		}
		if res.Datapath, err = RunDatapath(ctx, do); err != nil {
			return res, err
		}
	}
	if which["wire"] {
		wo := WireOptions{Scenarios: scenarios, Progress: pr.printf, HTTPStreams: o.WireHTTPStreams, Policies: o.WirePolicies, Rounds: o.WireRounds}
		if o.WireTrace {
			wo.TraceDir = filepath.Join(o.Out, "traces")
		}
		if o.Quick {
			wo.Duration = 5 * time.Second
		}
		if o.Which == "wire" && o.Duration > 0 {
			wo.Duration = o.Duration
		}
		if res.Wire, err = RunWire(ctx, wo); err != nil {
			return res, err
		}
	}
	if which["idle"] {
		iopts := IdleOptions{VigBinary: o.VigBinary, Pin: o.Pin, Progress: pr.printf}
		if o.Quick {
			iopts.Sample, iopts.Probes, iopts.PauseProbes = 3*time.Second, 50, 8
		}
		if res.Idle, err = RunIdle(ctx, iopts); err != nil {
			return res, err
		}
	}
	if which["overload"] {
		oo := OverloadOptions{VigBinary: o.VigBinary, Scenario: scenarioB, Duration: o.Duration, Factor: o.Factor, Progress: pr.printf}
		if res.Overload, err = RunOverload(ctx, oo); err != nil {
			return res, err
		}
	}
	if which["soak"] {
		so := SoakOptions{VigBinary: o.VigBinary, Scenario: scenarioB, Duration: o.Duration, RowEvery: o.RowEvery, Progress: pr.printf}
		if res.Soak, err = RunSoak(ctx, so); err != nil {
			return res, err
		}
	}
	res.Finished = time.Now().UTC()
	res.LoadEnd = readTrim(loadavgPath)
	res.Targets = Evaluate(res)
	pr.printf("writing %s", o.Out)
	return res, Write(o.Out, res)
}

// ReadResults reads a results.json written by Write.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Rewrite re-renders report.md and the plots of a results folder from its
// results.json, re-evaluating the targets (after the report's code changed).
func Rewrite(dir string) error {
	r, err := ReadResults(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	r.Targets = Evaluate(r)
	return Write(dir, r)
}

// Write writes results.json, report.md and the plots into dir.
func Write(dir string, res *Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	plots := Plots(res)
	for name, svg := range plots {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(Report(res, plots)), 0o644)
}
