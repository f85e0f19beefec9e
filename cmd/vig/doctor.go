package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/doctor"
)

const doctorUsage = `Usage: vig doctor -c FILE [--json] [--no-device-checks] [--no-server] [--device NAME]

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
	noServer := fs.Bool("no-server", false, "do not read the models' layout (instance groups) from the backend: analyse the config's own layout")
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
	} else if checks, err := doctorLayout(ctx, cfg, !*noDevice && !*noServer, stderr); err != nil {
		r = doctor.Report{Findings: doctor.ConfigFindings(err)}
	} else {
		r = doctor.Run(ctx, cfg, doctor.Options{Device: !*noDevice, Host: cpuHost(deviceHost()), Profile: prof})
		r.Checks = append(r.Checks, checks...)
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

// doctorServerTimeout bounds doctor's reading of the server's layout.
var doctorServerTimeout = 3 * time.Second

// doctorLayout reads the layout from the backend, when the config leaves it
// to the server or declares one to compare, and resolves cfg with it, so
// that doctor analyses what vig would schedule. It says in checks what it
// read, what it assumed when the server could not be read, and where the
// config and the server disagree; the error is a layout that cannot be
// completed.
func doctorLayout(ctx context.Context, cfg *config.Config, read bool, stderr io.Writer) ([]doctor.Check, error) {
	const name = "server layout"
	if _, ring := cfg.Backend.RingBackend(); ring || cfg.Backend.Embedded {
		// A ring runtime does not describe its models, and the embedded
		// mock serves the config's: the config's own layout.
		return nil, nil
	}
	if !read {
		// --no-server (or --no-device-checks) asks for the config alone.
		if cfg.DerivesLayout() {
			fmt.Fprintf(stderr, "vig doctor: the config leaves the layout to the server, not read (--no-server, --no-device-checks): %s\n", assumed(cfg))
		}
		return nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, doctorServerTimeout)
	srv, err := serverModels(rctx, cfg.Backend.Address, cfg.ServedModelNames())
	cancel()
	if err != nil {
		st := doctor.Skipped
		if cfg.DerivesLayout() {
			st = doctor.Warn
		}
		return []doctor.Check{{Name: name, Status: st, Detail: fmt.Sprintf("cannot read the models' configuration from %s (%v): %s; "+
			"start the backend, or pass --no-server", cfg.Backend.Address, err, assumed(cfg))}}, nil
	}
	notes, err := cfg.Resolve(srv)
	if err != nil {
		return nil, err
	}
	l, _ := cfg.Resolved()
	detail := fmt.Sprintf("read from %s: %d of %d models described", cfg.Backend.Address, l.Described, len(cfg.ServedModelNames()))
	switch {
	case cfg.DerivesLayout() && len(l.Accelerators) > 0:
		detail += "; derived accelerators " + acceleratorList(cfg)
	case cfg.DerivesLayout():
		detail += "; " + assumed(cfg)
	}
	checks := []doctor.Check{{Name: name, Status: doctor.OK, Detail: detail}}
	for _, n := range notes {
		checks = append(checks, doctor.Check{Name: name, Status: doctor.Warn, Detail: n.String()})
	}
	return checks, nil
}

// assumed says which layout doctor analyses without the server's.
func assumed(cfg *config.Config) string {
	if list := acceleratorList(cfg); list != "" {
		return "doctor analyses the config's accelerators " + list
	}
	return fmt.Sprintf("doctor assumed one accelerator of backend.slots %d for every model", cfg.Backend.Slots)
}
