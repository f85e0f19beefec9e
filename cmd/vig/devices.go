package main

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/android"
	"github.com/vig-edge/vig/jetson"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/shmprobe"
)

// sysroot is the directory vig serve reads device facts from ("/" unless
// $VIG_SYSROOT names another): emulators and tests give it an Android- or
// Jetson-shaped tree without touching the machine's own /.
func sysroot() string {
	if r := os.Getenv("VIG_SYSROOT"); r != "" {
		return r
	}
	return "/"
}

// deviceStart does what vig serve does for the device it runs on, once, at start:
// it logs which link reaches the backend, on Android it chooses the run-time
// defaults and says which, on a Jetson it exports the board's state as metrics.
func deviceStart(ctx context.Context, cfg *config.Config, reg *metrics.Registry, log *slog.Logger) {
	logRoute(ctx, cfg, log)
	rootDir := sysroot()
	root := os.DirFS(rootDir)
	if ok, why := android.Detect(root, os.Getenv); ok {
		androidStart(rootDir, root, why, cfg, log)
	}
	if ok, why := jetson.Detect(root); ok {
		mode := ""
		if out, err := jetson.Exec(ctx, jetson.Nvpmodel, "-q"); err == nil {
			if m, err := jetson.ParseNvpmodel(out); err == nil {
				mode = m.String()
			}
		}
		reg.Prometheus().MustRegister(jetson.NewCollector(root, mode))
		log.Info("jetson: exporting vig_jetson_* metrics", "board", why, "power_mode", mode)
	}
}

// logRoute logs the route to a TCP backend; off loopback it warns that the copy
// path crosses a real link.
func logRoute(ctx context.Context, cfg *config.Config, log *slog.Logger) {
	network, _ := netopt.Split(cfg.Backend.Address)
	if _, ring := cfg.Backend.RingBackend(); ring || network == "unix" || cfg.Backend.Embedded {
		return // on this machine by construction
	}
	r, err := netopt.RouteTo(ctx, cfg.Backend.Address)
	switch {
	case err != nil:
		log.Warn("backend route", "err", err)
	case r.Local():
		log.Info("backend route", "route", r.String())
	default:
		log.Warn("backend route: the backend is on another machine; no shared memory with it, every payload crosses "+string(r.Kind),
			"route", r.String())
	}
}

func androidStart(rootDir string, root fs.FS, why string, cfg *config.Config, log *slog.Logger) {
	_, devShmErr := fs.Stat(root, strings.TrimPrefix(shmprobe.DevShm, "/"))
	if devShmErr != nil {
		devShmErr = fmt.Errorf("%s: %v", shmprobe.DevShm, devShmErr)
	}
	plan := android.Choose(android.Facts{
		Getenv:   os.Getenv,
		Memfd:    shmprobe.Memfd(),
		DevShm:   devShmErr,
		Writable: func(dir string) error { return writableDir(filepath.Join(rootDir, dir)) },
	}, map[string]string{
		"listen.grpc": cfg.Listen.GRPC, "listen.unix": cfg.Listen.Unix, "listen.metrics": cfg.Listen.Metrics,
		"listen.ring": cfg.Listen.Ring, "backend.address": cfg.Backend.Address,
	})
	if os.Getenv("TMPDIR") == "" && plan.TempDir != "" {
		// Go's os.TempDir is /tmp without $TMPDIR, and Android has no /tmp.
		os.Setenv("TMPDIR", filepath.Join(rootDir, plan.TempDir))
	}
	log.Info("android: run-time defaults", "detected", why, "rings", plan.Ring,
		"temp_dir", plan.TempDir, "addresses", "IP literals only (no DNS on Android)")
	for _, p := range plan.Problems {
		log.Error("android: " + p)
	}
}

// writableDir checks that dir exists and this user may create files in it, by
// creating one.
func writableDir(dir string) error {
	f, err := os.CreateTemp(dir, ".vig-probe-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
