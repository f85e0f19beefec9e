package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/doctor"
)

const doctorUsage = `Usage: vig doctor -c FILE [--json] [--no-device-checks] [--device NAME]

Prints the layout (accelerators, their slots, where each model runs) and
checks, before vig serves, whether the freshness contracts in FILE can hold
(utilization per slot, response-time analysis with non-preemptive blocking,
sensor rate, streams admission never starts, interference, remedies within
the device's accelerators) and whether this device is set up for vig
(backend, TCP_NODELAY, shared memory, CPU governor, clock source, Android
Doze/thermal, Jetson nvpmodel/jetson_clocks, eBPF).

Exit status: 0 clean, 1 warnings, 2 errors (or a usage error). The codes and
what to do about each: docs/doctor.md.

Flags:
`

// runDoctor implements `vig doctor`; args are the arguments after "doctor".
func runDoctor(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return doctorMain(ctx, args, os.Stdout, os.Stderr, isTerminal(os.Stdout))
}

func doctorMain(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) int {
	fs := flag.NewFlagSet("vig doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs, "", "config `FILE` (YAML)")
	asJSON := fs.Bool("json", false, "write the report as JSON to stdout instead of a table")
	noDevice := noDeviceFlag(fs, "skip the device checks: analyse the config only")
	device := fs.String("device", "", "keep remedies within the accelerators of device `NAME` ("+strings.Join(doctor.ProfileNames(), ", ")+"); default: the device doctor runs on, when it recognises it")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), doctorUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	path := *cfgPath
	if path == "" || fs.NArg() > 0 {
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "vig doctor: unexpected argument %q\n", fs.Arg(0))
		} else {
			fmt.Fprintln(stderr, "vig doctor: -c FILE is required")
		}
		fs.Usage()
		return 2
	}
	var prof *doctor.Profile
	if *device != "" {
		p, ok := doctor.Profiles[*device]
		if !ok {
			fmt.Fprintf(stderr, "vig doctor: --device %q: unknown; give one of %s\n", *device, strings.Join(doctor.ProfileNames(), ", "))
			return 2
		}
		prof = &p
	}
	data, err := readConfig(path)
	if err != nil {
		fmt.Fprintf(stderr, "vig doctor: %v\n", err)
		return 2
	}
	var r doctor.Report
	cfg, err := config.Parse(path, data)
	if err != nil {
		// An invalid config is a finding like any other, in the same output format;
		// the analysis needs a valid one, so it stops here, and the header claims
		// no slots it could not read.
		r = doctor.Report{Findings: doctor.ConfigFindings(err)}
	} else {
		r = doctor.Run(ctx, cfg, doctor.Options{Device: !*noDevice, Host: cpuHost(deviceHost()), Profile: prof})
	}
	r.Config = path
	if *asJSON {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteTable(stdout, tty && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb")
	}
	if err != nil {
		fmt.Fprintf(stderr, "vig doctor: writing the report: %v\n", err)
		return 2
	}
	return r.ExitCode()
}

// isTerminal reports whether f is a terminal (colour is for people, not for logs
// and pipes).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}
