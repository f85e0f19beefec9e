package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/build/version"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
)

const serveUsage = `Usage: vig serve -c FILE [flags]

Runs the governor: a Triton-protocol gRPC gateway (TCP and/or Unix socket) in front of
the backend named in the config, with Prometheus metrics. SIGTERM or SIGINT drains:
vig stops accepting, answers every accepted request, and exits 0.

Flags:
`

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("c", "", "config `FILE` (YAML)")
	logFormat := fs.String("log-format", "", "override log.format: text or json")
	fs.Usage = func() { fmt.Fprint(fs.Output(), serveUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return exitUsage(err)
	}
	cfg, code := loadConfig(*cfgPath)
	if cfg == nil {
		return code
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	log := newLogger(cfg.Log)
	slog.SetDefault(log)

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := serve(ctx, cfg, log, nil); err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}

// loadConfig reads and parses a config file. On failure it prints the problems and
// returns nil and exit code 2.
func loadConfig(path string) (*config.Config, int) {
	if path == "" {
		fmt.Fprintln(os.Stderr, "vig: -c FILE is required (try examples/demo.yaml)")
		return nil, 2
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vig: %v\n", err)
		return nil, 2
	}
	cfg, err := config.Parse(path, data)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vig: invalid config:\n%v\n", err)
		return nil, 2
	}
	return cfg, 0
}

func exitUsage(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func newLogger(c config.Log) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// serve runs vig until ctx is done, then drains. ready, when not nil, receives the
// addresses vig listens on once it accepts requests (tests use it).
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger, ready chan<- map[string]string) error {
	var sockets netopt.Stats
	reg := metrics.New()
	reg.Sockets(&sockets)

	if cfg.Backend.Embedded {
		mb, err := mockbackend.Start(ctx, cfg.Backend.Address, mockbackend.FromConfig(cfg), gateway.ServerOptions(cfg.GRPC), &sockets)
		if err != nil {
			return fmt.Errorf("embedded backend on %s: %w", cfg.Backend.Address, err)
		}
		defer mb.Stop()
		cfg.Backend.Address = mb.Addr()
		log.Info("embedded mock backend started", "address", mb.Addr(), "models", len(cfg.Models), "slots", cfg.Backend.Slots)
	}

	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset, Log: log})
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	gov.SetObserver(reg.NewSched(gov.Snapshot))
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: sockets.DialAddr, Metrics: reg, Log: log, Admit: gov})
	if err != nil {
		return err
	}
	if cfg.Backend.StatsIntervalMs > 0 {
		poller := gateway.NewStatsPoller(gw, gov, time.Duration(cfg.Backend.StatsIntervalMs)*time.Millisecond, log)
		pctx, pcancel := context.WithCancel(context.Background())
		defer pcancel()
		go poller.Run(pctx)
	}

	type listener struct {
		name string
		ln   net.Listener
	}
	addrs := map[string]string{}
	var listeners []listener
	closeAll := func() {
		for _, l := range listeners {
			l.ln.Close()
		}
	}
	for _, l := range []struct{ name, network, addr string }{
		{"grpc", "tcp", cfg.Listen.GRPC},
		{"unix", "unix", cfg.Listen.Unix},
		{"metrics", "tcp", cfg.Listen.Metrics},
	} {
		if l.addr == "" {
			continue
		}
		ln, err := netopt.Listen(l.network, l.addr, &sockets)
		if err != nil {
			closeAll()
			gw.Stop()
			return fmt.Errorf("listen.%s %s: %w", l.name, l.addr, err)
		}
		listeners = append(listeners, listener{l.name, ln})
		addrs[l.name] = ln.Addr().String()
	}

	errc := make(chan error, len(listeners))
	var metricsSrv *http.Server
	for _, l := range listeners {
		if l.name == "metrics" {
			mux := http.NewServeMux()
			mux.Handle("/metrics", reg.Handler())
			metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			go func() { errc <- ignoreClosed(metricsSrv.Serve(l.ln)) }()
			continue
		}
		go func() { errc <- gw.Serve(l.ln) }()
	}
	log.Info("vig serving", "version", version.String(), "grpc", addrs["grpc"], "unix", addrs["unix"],
		"metrics", addrs["metrics"], "backend", cfg.Backend.Address, "slots", cfg.Backend.Slots)
	if ready != nil {
		ready <- addrs
	}

	select {
	case <-ctx.Done():
	case err = <-errc:
		log.Error("listener failed", "err", err)
	}
	log.Info("draining: no new requests accepted; answering the accepted ones")
	gov.Drain()
	gw.GracefulStop()
	answered, accepted := gw.Answered(), gw.Accepted()
	log.Info(fmt.Sprintf("drained: %d answered, %d lost", answered, accepted-answered))
	if metricsSrv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		metricsSrv.Shutdown(sctx)
		scancel()
	}
	return err
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
