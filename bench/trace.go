package bench

import (
	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/platform/clock"
)

// traceRecorder returns the recorder of a run whose trace is written to a
// file, sized by the config's trace.buffer_events; nil when none is asked.
func traceRecorder(path string, cfg *config.Config) (*trace.Recorder, error) {
	if path == "" {
		return nil, nil
	}
	return trace.NewRecorder(cfg.Trace.BufferEvents, clock.Monotonic, clock.WallOffset)
}
