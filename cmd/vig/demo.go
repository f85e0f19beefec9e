package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vig-edge/vig/bench"
)

const demoUsage = `Usage: vig demo [-c FILE] [--duration 30s]

Starts a mock inference backend, vig's governor in front of it, and open-loop
sensors for the streams of scenario B of the benchmarks (a detector, pose and
depth, and a 200 ms VLM sharing one accelerator slot), all in this process, and
shows a live table per stream: coverage of the contract's windows, age of
information p95, queue, outcomes and how busy the slots are, per accelerator
(-c d.yaml: a Jetson's GPU and two DLA cores). The scenarios a.yaml … d.yaml are
built into vig, so the demo runs from the binary alone; a FILE that exists is
read instead. The table is redrawn in place on a terminal; otherwise it is
printed every refresh. Ctrl-C stops early.

Flags:
`

func runDemo(args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dur := fs.Duration("duration", 30*time.Second, "how long to run (0: until Ctrl-C)")
	cfgPath := configFlag(fs, filepath.Join(bench.DefaultScenarioDir, "b.yaml"), "workload `FILE` (a vig config; its backend is replaced by the in-process mock)")
	refresh := fs.Duration("refresh", time.Second, "table refresh interval")
	tracePath := fs.String("trace", "", "write the run's scheduling trace to `FILE` when it ends (Chrome trace-event JSON: ui.perfetto.dev; docs/trace.md)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), demoUsage); fs.PrintDefaults() }
	if code, ok := parseFlags(fs, args, os.Stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "vig demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, code := loadScenarioConfig(*cfgPath)
	if cfg == nil {
		return code
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	err := bench.Demo(ctx, bench.DemoOptions{Config: cfg, Duration: *dur, Refresh: *refresh, Out: os.Stdout, TTY: isTerminal(os.Stdout),
		Trace: *tracePath})
	if err != nil {
		fmt.Fprintf(os.Stderr, "vig demo: %v\n", err)
		return 1
	}
	if *tracePath != "" {
		fmt.Fprintf(os.Stderr, "vig demo: trace written to %s: open it in ui.perfetto.dev\n", *tracePath)
	}
	return 0
}
