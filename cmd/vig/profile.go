package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vig-edge/vig/platform/profile"
)

const profileUsage = `Usage: vig profile --pid PID [--duration 30s] [--ebpf auto|on|off] [--requests N] [--json] [-o FILE]

Measures where a process's time goes for a while, and prints a breakdown: CPU split
into user and kernel time, the kernel part split into syscalls by name, softirqs
(NET_RX/NET_TX: loopback TCP) and the rest, run-queue waits, context switches and
page faults, per request when --requests gives the number served in the window.

Without privileges it reads /proc (times, faults, context switches, schedstat) and
perf_event software counters where perf_event_paranoid allows (on Android:
security.perf_harden). As root, or with CAP_BPF and CAP_PERFMON, eBPF probes add
syscall, run-queue, softirq and page-fault attribution (--ebpf auto uses them when
possible and says why not otherwise; on requires them). SIGINT ends the window
early and still prints the report.

Examples:
  vig profile --pid $(pidof vig) --duration 30s
  sudo vig profile --pid 1234 --ebpf on --requests 3000 -o profile.json.zst

Flags:
`

// runProfile is `vig profile`. It returns the process exit code: 0 when a
// report was produced, 1 when profiling failed, 2 for bad flags.
func runProfile(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return profileCmd(ctx, args, os.Stdout, os.Stderr)
}

// profileCmd runs `vig profile` until the duration passes or ctx ends.
func profileCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		pid      = fs.Int("pid", 0, "`PID` of the process to profile (required)")
		duration = fs.Duration("duration", 30*time.Second, "how long to profile; SIGINT stops earlier")
		asJSON   = fs.Bool("json", false, "write the report as JSON to stdout instead of a table")
		outFile  = fs.String("o", "", "also write the report as JSON to `FILE` (zstd-compressed when it ends in .zst)")
		requests = fs.Uint64("requests", 0, "requests the process served in the window, for per-request figures")
		mode     = profile.Auto
	)
	fs.StringVar(outFile, "out", "", "same as -o")
	fs.Var(&mode, "ebpf", "eBPF probes: `auto`, on or off")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), profileUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "vig profile: unexpected arguments %q (see --help)\n", fs.Args())
		return 2
	case *pid <= 0:
		fmt.Fprintln(stderr, "vig profile: --pid PID is required (see --help)")
		return 2
	case *duration <= 0:
		fmt.Fprintf(stderr, "vig profile: --duration %v must be positive\n", *duration)
		return 2
	}

	r, err := profile.Run(ctx, profile.Options{PID: *pid, Duration: *duration, EBPF: mode, Requests: *requests})
	if err != nil {
		fmt.Fprintf(stderr, "vig profile: %v\n", err)
		return 1
	}
	if *outFile != "" {
		err = r.WriteFile(*outFile)
	}
	if err == nil && *asJSON {
		err = r.WriteJSON(stdout)
	} else if err == nil {
		err = r.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "vig profile: writing the report: %v\n", err)
		return 1
	}
	return 0
}
