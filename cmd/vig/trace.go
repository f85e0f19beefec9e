package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vig-edge/vig/agent/trace"
)

// traceOptions is vig serve's --trace FILE --trace-seconds N.
type traceOptions struct {
	file    string
	seconds float64
	window  chan<- *trace.Window // tests: also receives the window written
}

// serveTrace is a trace recorded from vig's start into a file.
type serveTrace struct {
	once   sync.Once
	window chan<- *trace.Window
	span   *trace.Span
	file   string
	log    *slog.Logger
	timer  *time.Timer
}

// start begins recording when a file is asked for; finish writes it (after
// the seconds asked, or at drain, whichever comes first).
func (o traceOptions) start(rec *trace.Recorder, log *slog.Logger) *serveTrace {
	t := &serveTrace{file: o.file, log: log, window: o.window}
	if o.file == "" {
		return t
	}
	t.span = rec.Begin()
	log.Info("recording the scheduling trace", "file", o.file, "seconds", o.seconds, "buffer_events", rec.Size())
	if o.seconds > 0 {
		t.timer = time.AfterFunc(time.Duration(o.seconds*float64(time.Second)), t.finish)
	}
	return t
}

func (t *serveTrace) finish() {
	if t.span == nil {
		return
	}
	t.once.Do(func() {
		if t.timer != nil {
			t.timer.Stop()
		}
		win := t.span.End()
		if t.window != nil {
			t.window <- win
		}
		if err := trace.WriteFile(t.file, win); err != nil {
			t.log.Error("trace", "file", t.file, "err", err)
			return
		}
		args := []any{"file", t.file, "events", len(win.Events), "seconds", float64(win.End-win.Start) / 1e9}
		if win.Dropped > 0 {
			args = append(args, "dropped", win.Dropped, "fix", "raise trace.buffer_events to keep the whole run")
		}
		t.log.Info("trace written (open it in ui.perfetto.dev)", args...)
	})
}

// writable checks, before a run, that the file a trace is written to at its
// end can be: a temporary file beside it is created and removed.
func writable(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
