package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vig-edge/vig/bench"
)

const benchUsage = `Usage: vig bench <datapath|wire|idle|all> [--quick] [--out DIR] [flags]
       vig bench overload [--duration 60s] [--factor 10] [--out DIR]
       vig bench soak [--duration 10m] [--row-every 1m] [--out DIR]

Measures vig the way docs/benchmarks.md describes, and writes results.json,
report.md and SVG plots into DIR (default ./vig-bench-results/<date>-<host>/):

  datapath  added latency per request (VIA vig − DIRECT to the backend) and vig's
            CPU, context switches and syscalls per request, for payloads 0 B–6.2 MB
            on gRPC over TCP and Unix sockets, on Triton system shared memory and
            on vig's shared-memory ring (a ring client sensor; shmring-runtime:
            a ring runtime behind vig too, Android end to end), against nginx
            grpc_pass through an upstream keepalive pool as the reference
            proxy (vig and nginx run as their own processes in their default
            configuration; the TCP rows are repeated with both pinned to one
            CPU with taskset when there is a second CPU)
  wire      coverage and age of information for the benchmark workloads A–D, D2,
            E and E-linear (examples/scenarios, built in; --only picks some) with
            open-loop sensors: direct, an emulation of Triton's queue policy, and
            vig; on D's GPU and two DLA cores also vig configured as one pool (the
            ablation); on D2's models bound as Triton binds them (per-core DLA
            engines, interference) vig per core and vig reading the server
            (vig-server); on E's batched detector also vig with max_batch: 1 and
            vig with only max_batch (vig-unbatched, vig-learnt);
            --http-streams LIST adds vig with those sensors on HTTP/REST beside
            the others on gRPC (vig-http); --policies, --rounds, --duration
  idle      vig's CPU with 1, 5 and 10 idle gRPC clients and as many idle ring
            sessions, and idle-settled latency
  all       the three
  overload  scenario B's sensors (examples/scenarios/b.yaml) at --factor × their
            contracted frame rate, open loop, for --duration against vig serve
            (own process, embedded backend); then the detector alone at that
            rate. Samples vig's RSS, goroutines, fds, queues and counters every
            second; reports bounds, balance, counts and coverage per stream
            (default out: vig-bench-results/<date>-<host>-overload/)
  soak      scenario B at its contracted rates for --duration (default 10m):
            RSS, goroutines, fds and latency p50/p99/p99.9 per stream per
            --row-every, judged flat or not by the rule the report prints
            (default out: vig-bench-results/<date>-<host>-soak/)
  report    re-render report.md and the plots of a results folder from its
            results.json (vig bench report DIR)

Full runs take about 20 minutes on 2 cores; --quick (make bench) a few. Run it on
a quiet machine and never beside a build.

Flags:
`

func runBench(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "shorter runs (fewer rounds, 5 s wire runs, 3 s idle samples)")
	out := fs.String("out", "", "output `DIR` (default vig-bench-results/<date>-<host> in the current directory)")
	scen := fs.String("scenarios", bench.DefaultScenarioDir, "`DIR` holding the scenario configs a.yaml … e-linear.yaml and their sensors' phases, e.sensors.yaml (absent: the ones built into vig)")
	only := fs.String("only", strings.Join(bench.DefaultWireScenarios, ","), "wire: the scenarios to run, a `LIST` such as d,d2, a,b,c or e,e-linear")
	noPin := fs.Bool("no-pin", false, "skip the datapath rows that pin vig and nginx to CPU 1 with taskset, and do not pin vig in idle")
	vigBin := fs.String("vig", "", "vig `BINARY` to measure as its own process (default: this executable)")
	duration := fs.Duration("duration", 0, "overload: length of each case (default 60s); soak: length of the run (default 10m); wire: length of each run (default 15s, --quick 5s)")
	httpStreams := fs.String("http-streams", "", "wire: also run vig with these streams' sensors on its HTTP/REST frontend, the others on gRPC (policy vig-http), a `LIST` such as detector,depth or all")
	rounds := fs.Int("rounds", 0, "wire: split each run into `N` rounds, the whole sequence repeated round after round and each run's rounds pooled (the same total time; against a machine whose load drifts)")
	policies := fs.String("policies", "", "wire: only these policies, a `LIST` such as vig,vig-http (default every one that applies: "+strings.Join(bench.Policies, ",")+", D's one-pool ablations, and "+bench.PolicyVigHTTP+" with --http-streams)")
	factor := fs.Int("factor", 0, "overload: multiple of the contracted frame rates (default 10)")
	rowEvery := fs.Duration("row-every", 0, "soak: one report row per `INTERVAL` (default 1m)")
	paths := fs.String("paths", "", "datapath: only these comma-separated `PATHS` (default all: "+strings.Join(bench.DatapathPaths, ",")+")")
	stockWin := fs.Bool("stock-windows", false, "datapath: the client and the mock backend use gRPC's default flow control (64 KiB windows grown by BDP probes), as a stock tritonclient and Triton server do, instead of vig's window_mib windows")
	runs := fs.Int("runs", 0, "datapath: `N` runs per row, each over every path and payload in turn, the row reporting their median (default 3; more for a steadier median on a noisy machine)")
	payloads := fs.String("payloads", "", "datapath: only these comma-separated payload `BYTES` (default 0,150000,1200000,6200000)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), benchUsage); fs.PrintDefaults() }

	// The benchmark name may come before or after the flags.
	var which string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		which, args = args[0], args[1:]
	}
	if code, ok := parseFlags(fs, args, os.Stdout); !ok {
		return code
	}
	if which == "" && fs.NArg() > 0 {
		which = fs.Arg(0)
	} else if fs.NArg() > 0 && which != "report" {
		fmt.Fprintf(os.Stderr, "vig bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if which == "report" {
		// vig bench report DIR: re-render report.md and plots from results.json.
		if fs.NArg() != 1 {
			fmt.Fprintln(os.Stderr, "vig bench report: want exactly one results folder")
			return 2
		}
		if err := bench.Rewrite(fs.Arg(0)); err != nil {
			fmt.Fprintf(os.Stderr, "vig bench report: %v\n", err)
			return 1
		}
		return 0
	}
	if which == "" {
		fs.Usage()
		return 2
	}
	valid := false
	for _, b := range bench.Benchmarks {
		valid = valid || b == which
	}
	if !valid {
		fmt.Fprintf(os.Stderr, "vig bench: unknown benchmark %q (want %s)\n", which, strings.Join(bench.Benchmarks, ", "))
		return 2
	}
	if msg := checkLoadFlags(fs, which, *duration, *factor, *rowEvery); msg != "" {
		fmt.Fprintf(os.Stderr, "vig bench %s: %s\n", which, msg)
		return 2
	}
	if (which == "wire" || which == "all") && *rounds > 1 {
		d := *duration
		if d == 0 {
			d = map[bool]time.Duration{true: 5 * time.Second, false: 15 * time.Second}[*quick]
		}
		if d/time.Duration(*rounds) < time.Second {
			fmt.Fprintf(os.Stderr, "vig bench wire: --rounds %d makes rounds of %v: give each at least 1s (a longer --duration, or fewer rounds)\n", *rounds, d/time.Duration(*rounds))
			return 2
		}
	}
	dpPaths, dpPayloads, msg := parseDatapathFlags(which, *paths, *payloads)
	if msg != "" {
		fmt.Fprintf(os.Stderr, "vig bench %s: %s\n", which, msg)
		return 2
	}
	bin := *vigBin
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(os.Stderr, "vig bench: cannot find this executable to run vig as its own process: %v (pass --vig BINARY)\n", err)
			return 1
		}
		bin = exe
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	scenDir, rmScen, err := scenarioDir(*scen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vig bench: the built-in scenarios: %v (pass --scenarios DIR)\n", err)
		return 1
	}
	defer rmScen()
	opts := bench.Options{Which: which, Quick: *quick, Out: *out, VigBinary: bin, ScenarioDir: scenDir, Only: strings.Split(strings.ToLower(*only), ","), Pin: !*noPin,
		Duration: *duration, Factor: *factor, RowEvery: *rowEvery, DatapathPaths: dpPaths, DatapathPayloads: dpPayloads, DatapathRuns: *runs, StockWindows: *stockWin,
		WireHTTPStreams: splitList(*httpStreams), WirePolicies: splitList(*policies), WireRounds: *rounds,
		Command:  "vig bench " + strings.Join(append([]string{which}, args...), " "),
		Progress: os.Stderr, TTY: isTerminal(os.Stderr)}
	res, err := bench.Run(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vig bench: %v\n", err)
		return 1
	}
	dir := *out
	if dir == "" {
		dir = bench.DefaultOutFor(which, res.Started, res.Machine.Host)
	}
	fmt.Printf("results in %s (report.md, results.json, *.svg)\n\n", dir)
	for _, t := range res.Targets {
		fmt.Printf("%-14s %s — %s\n", t.Status, t.Name, t.Detail)
	}
	return 0
}

// checkLoadFlags says what is wrong with the flags of overload and soak (and
// with theirs given to another benchmark), with the fix; "" when nothing is.
func checkLoadFlags(fs *flag.FlagSet, which string, duration time.Duration, factor int, rowEvery time.Duration) string {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	only := map[string]string{"duration": "overload, soak and wire", "factor": "overload", "row-every": "soak",
		"http-streams": "wire", "policies": "wire", "rounds": "wire", "runs": "datapath"}
	for _, name := range []string{"duration", "factor", "row-every", "http-streams", "policies", "rounds", "runs"} {
		if set[name] && !strings.Contains(only[name], which) && (which != "all" || (only[name] != "wire" && only[name] != "datapath")) {
			return fmt.Sprintf("--%s applies to vig bench %s only", name, only[name])
		}
	}
	if (which == "overload" || which == "soak") && set["quick"] {
		return "--quick does not apply here; shorten the run with --duration (e.g. --duration 10s)"
	}
	if set["no-pin"] && (which == "overload" || which == "soak") {
		return "--no-pin does not apply here: overload and soak never pin vig"
	}
	if set["duration"] && duration < time.Second {
		return fmt.Sprintf("--duration %v is too short: give at least 1s (e.g. --duration 60s)", duration)
	}
	if set["factor"] && factor < 1 {
		return fmt.Sprintf("--factor %d: give a multiple of the contracted rate of 1 or more (e.g. --factor 10)", factor)
	}
	if set["rounds"] {
		if n, _ := strconv.Atoi(fs.Lookup("rounds").Value.String()); n < 1 || n > 100 {
			return fmt.Sprintf("--rounds %s: give a number of rounds from 1 to 100 (e.g. --rounds 3)", fs.Lookup("rounds").Value.String())
		}
	}
	if set["runs"] {
		if n, _ := strconv.Atoi(fs.Lookup("runs").Value.String()); n < 1 || n > 50 {
			return fmt.Sprintf("--runs %s: give a number of runs per row from 1 to 50 (e.g. --runs 5)", fs.Lookup("runs").Value.String())
		}
	}
	if set["row-every"] && rowEvery < time.Second {
		return fmt.Sprintf("--row-every %v is too short: vig is sampled once a second, give at least 1s (e.g. --row-every 1m)", rowEvery)
	}
	if which == "soak" {
		d, r := duration, rowEvery
		if d == 0 {
			d = 10 * time.Minute
		}
		if r == 0 {
			r = time.Minute
		}
		if d < 3*r {
			return fmt.Sprintf("--duration %v gives %d row(s) of %v; the flatness rule compares row 2 with the last row, so it needs 3 or more (use --duration %v or more, or --row-every %v or less)",
				d, int(d/r), r, 3*r, (d / 3).Truncate(time.Second))
		}
	}
	return ""
}

// parseDatapathFlags reads --paths and --payloads; msg says what is wrong, with
// the fix.
func parseDatapathFlags(which, paths, payloads string) (ps []string, ns []int, msg string) {
	if (paths != "" || payloads != "") && which != "datapath" && which != "all" {
		return nil, nil, "--paths and --payloads are for the datapath benchmark"
	}
	for _, p := range strings.Split(paths, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(bench.DatapathPaths, p) {
			return nil, nil, fmt.Sprintf("--paths: unknown path %q (want some of %s)", p, strings.Join(bench.DatapathPaths, ","))
		}
		ps = append(ps, p)
	}
	for _, f := range strings.Split(payloads, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 64<<20 {
			return nil, nil, fmt.Sprintf("--payloads: %q is not a byte count in [0, %d]", f, 64<<20)
		}
		ns = append(ns, n)
	}
	return ps, ns, ""
}

// splitList reads a comma-separated flag value: nil when empty.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
