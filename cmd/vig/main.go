// Command vig is a lean inference governor for edge devices: a Triton-protocol
// gateway that keeps every sensor stream's results fresh.
package main

import (
	"fmt"
	"os"

	"github.com/vig-edge/vig/build/version"
)

const usage = `vig — a lean inference governor for edge devices

Usage:
  vig <command> [flags]

Commands:
  serve          run the governor: a Triton-protocol gRPC gateway in front of a backend
  doctor         check that the contracts are schedulable and the device is set up well
  profile        attribute a process's time to user space and kernel (syscalls, faults, ...)
  mock-backend   run a Triton-protocol mock inference server (tests, benchmarks, demos)
  bench          measure vig: datapath cost, freshness under contention, idle cost
  demo           the scenario-B sensors against vig, with a live per-stream table
  trace          record a running vig's scheduling decisions for ui.perfetto.dev
  topology       this device's CPUs: clusters (little/mid/big), governors, frequencies
  version        print vig's version

Run 'vig <command> --help' for a command's flags.
`

func main() { os.Exit(run(os.Args[1:])) }

// run dispatches a command line and returns the exit code: 0 success, 1 failure,
// 2 bad usage or configuration.
func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(rest)
	case "doctor":
		return runDoctor(rest)
	case "profile":
		return runProfile(rest)
	case "mock-backend":
		return runMockBackend(rest)
	case "bench":
		return runBench(rest)
	case "demo":
		return runDemo(rest)
	case "trace":
		return runTrace(rest)
	case "topology":
		return runTopology(rest)
	case "version", "--version", "-version":
		fmt.Println(version.Full())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "vig: unknown command %q\n\n%s", cmd, usage)
	return 2
}
