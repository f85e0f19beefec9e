package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/jetson"
)

// deviceStart does what vig serve does for the device it runs on, once, at start:
// on a Jetson it exports the board's state as metrics.
func deviceStart(ctx context.Context, cfg *config.Config, reg *metrics.Registry, log *slog.Logger) {
	root := os.DirFS("/")
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
