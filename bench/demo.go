package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
)

// DemoOptions configures Demo.
type DemoOptions struct {
	Config   *config.Config // the workload (scenario B by default in the CLI)
	Duration time.Duration  // 0 runs until ctx ends
	Refresh  time.Duration  // table refresh interval (default 1 s)
	Out      io.Writer
	TTY      bool // redraw the table in place with ANSI escapes
	Depth    int  // client buffer depth (default 1)
	// Trace, when set, is the file the run's scheduling trace is written to
	// (Chrome trace-event JSON, agent/trace) when it ends.
	Trace string
}

// demoWindow is the span over which the demo's AoI p95 is computed.
const demoWindow = 10 * time.Second

// Demo runs the mock backend, vig's gateway with the governor and one open-loop
// sensor per configured stream, all in this process, and shows a live table per
// stream: coverage over the governor's sliding window, AoI p95 over the last 10 s,
// queue, outcomes and the backend's slot busy share. When ctx ends (or after
// Duration) it waits for the calls in flight and draws the table a last time.
func Demo(ctx context.Context, o DemoOptions) (err error) {
	if o.Refresh <= 0 {
		o.Refresh = time.Second
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	cfg := *o.Config
	mcfg := mockbackend.FromConfig(&cfg)
	mcfg.Timeline = true // for the accelerator's idle time while work waits
	mb, err := startMock(ctx, "127.0.0.1:0", mcfg)
	if err != nil {
		return err
	}
	defer mb.Stop()
	cfg.Backend.Address, cfg.Backend.Embedded = mb.Addr(), false
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec, err := traceRecorder(o.Trace, &cfg)
	if err != nil {
		return err
	}
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: &cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset, Log: quiet,
		Recorder: rec})
	if err != nil {
		return err
	}
	if rec != nil {
		span := rec.Begin()
		defer func() { // after the gateway stopped: every call answered
			if werr := trace.WriteFile(o.Trace, span.End()); werr != nil && err == nil {
				err = fmt.Errorf("trace: %w", werr)
			}
		}()
	}
	var sockets netopt.Stats
	gw, err := gateway.New(gateway.Options{Config: &cfg, Dial: sockets.DialAddr, Admit: gov, Log: quiet})
	if err != nil {
		return err
	}
	defer gw.Stop()
	if cfg.Backend.StatsIntervalMs > 0 {
		go gateway.NewStatsPoller(gw, gov, time.Duration(cfg.Backend.StatsIntervalMs)*time.Millisecond, quiet).Run(ctx)
	}
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", &sockets)
	if err != nil {
		return err
	}
	go gw.Serve(ln)

	type live struct {
		mu         sync.Mutex
		deliveries []sched.Delivery
	}
	lives := make([]live, len(cfg.Streams))
	payload := make([]byte, wirePayload)
	var wg sync.WaitGroup
	start := clock.Monotonic() + int64(50*time.Millisecond)
	captures := map[string]func(uint64) int64{}
	for i, s := range cfg.Streams {
		cc, err := dial(ln.Addr().String())
		if err != nil {
			return err
		}
		defer cc.Close()
		client := pb.NewGRPCInferenceServiceClient(cc)
		interval := s.FrameInterval()
		if interval <= 0 {
			interval = s.Period()
		}
		model, name, lv := s.Model, s.Name, &lives[i]
		off, iv := int64(streamOffset(i)), int64(interval)
		captures[name] = func(frame uint64) int64 { return start + off + int64(frame)*iv }
		sen := &Sensor{Interval: interval, Offset: streamOffset(i), Depth: max(o.Depth, 1), Clock: Monotonic,
			Send: func(ctx context.Context, frame uint64, capture int64) error {
				_, err := client.ModelInfer(ctx, frameRequest(model, name, frame, capture, payload))
				return err
			},
			OnResult: func(_ uint64, capture, at int64, err error) {
				if err != nil {
					return
				}
				lv.mu.Lock()
				lv.deliveries = append(lv.deliveries, sched.Delivery{At: sched.Time(at), Capture: sched.Time(capture)})
				// Keep the last demoWindow only.
				cut := 0
				for cut < len(lv.deliveries) && time.Duration(at-int64(lv.deliveries[cut].At)) > demoWindow {
					cut++
				}
				lv.deliveries = lv.deliveries[cut:]
				lv.mu.Unlock()
			}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sen.Run(ctx, start)
		}()
	}

	var snap sched.Snapshot
	accels := cfg.AcceleratorList()
	prevBusy, prevAt := make([]uint64, len(accels)), clock.Monotonic()
	slots := max(cfg.Backend.Slots, 1)
	if o.TTY {
		fmt.Fprint(o.Out, "\033[2J")
	}
	tick := time.NewTicker(o.Refresh)
	defer tick.Stop()
	draw := func(final bool) {
		gov.Snapshot(&snap)
		now := clock.Monotonic()
		// Slot busy share per accelerator, from the backend's compute time of
		// the models on it since the last refresh.
		busyNs := make([]uint64, len(accels))
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if st, err := mb.ModelStatistics(sctx, &pb.ModelStatisticsRequest{}); err == nil {
			for _, m := range st.ModelStats {
				for k, a := range accels {
					if cfg.AcceleratorOf(m.Name) == a.Name {
						busyNs[k] += m.InferenceStats.GetComputeInfer().GetNs()
					}
				}
			}
		}
		cancel()
		var busyParts []string
		for k, a := range accels {
			busy := 0.0
			if el := now - prevAt; el > 0 {
				busy = float64(busyNs[k]-prevBusy[k]) / float64(el) / float64(max(a.Slots, 1))
			}
			label := fmt.Sprintf("%.0f %%", 100*min(busy, 1))
			if a.Name != "" {
				label = a.Name + " " + label
			}
			busyParts = append(busyParts, label)
		}
		prevBusy, prevAt = busyNs, now
		var b strings.Builder
		if o.TTY {
			b.WriteString("\033[H")
		}
		el := time.Duration(now - start).Truncate(time.Second)
		ref, refMono := time.Now(), clock.Monotonic()
		mono := func(t time.Time) int64 { return refMono - int64(ref.Sub(t)) }
		idle, _ := idleWhileWaiting(mb.Timeline(), mono, captures, max(now-int64(demoWindow), start), now, slots)
		device := fmt.Sprintf("%d slot(s)", slots)
		if len(cfg.Accelerators) > 0 {
			var parts []string
			for _, a := range accels {
				parts = append(parts, fmt.Sprintf("%s %d", a.Name, a.Slots))
			}
			device = "accelerators " + strings.Join(parts, ", ") + " slot(s)"
		}
		fmt.Fprintf(&b, "vig demo — %d streams, %s, mock backend in process; %v elapsed; slot busy %s\033[K\n", len(cfg.Streams), device, max(el, 0), strings.Join(busyParts, ", "))
		fmt.Fprintf(&b, "order %s, pipelined dispatch %s: %d job(s) queued at the backend now; accelerator idle while work waits (last %v): median %.0f µs over %d jobs\033[K\n",
			cfg.Scheduler.Order, map[bool]string{true: "on", false: "off"}[cfg.Scheduler.Pipeline == nil || *cfg.Scheduler.Pipeline], snap.Committed, demoWindow, idle.P50Us, idle.Waited)
		fmt.Fprintf(&b, "%-10s %-11s %9s %11s %6s %10s %10s %12s %9s %8s\033[K\n", "stream", "class", "coverage", "AoI p95 ms", "queue", "forwarded", "superseded", "late-dropped", "deferred", "yielded")
		for i, s := range cfg.Streams {
			var ss sched.StreamStats
			for _, x := range snap.Streams {
				if x.Name == s.Name {
					ss = x
				}
			}
			lv := &lives[i]
			lv.mu.Lock()
			from := sched.Time(max(now-int64(demoWindow), start))
			aoi := sched.AoI(from, sched.Time(now), lv.deliveries)
			lv.mu.Unlock()
			cov := "–"
			if ss.CoverageWindows > 0 {
				cov = fmt.Sprintf("%.1f %%", 100*ss.Coverage)
			}
			fmt.Fprintf(&b, "%-10s %-11s %9s %11.1f %6d %10d %10d %12d %9d %8d\033[K\n", s.Name, s.Class, cov, ms(aoi.P95),
				ss.Waiting+ss.Running, ss.Forwarded, ss.Superseded, ss.LateDropped, ss.Deferred, ss.Yielded)
		}
		fmt.Fprintf(&b, "protected streams are guaranteed, not first: a high or best_effort job runs before a protected frame only if that frame still completes by min(capture + max_age, its window's end) (vig doctor: PROTECTED_GUARANTEE)\033[K\n")
		if o.TTY {
			b.WriteString("\033[J")
			if !final {
				b.WriteString("Ctrl-C to stop\033[K\n")
			}
		}
		out := b.String()
		if !o.TTY {
			out = strings.ReplaceAll(out, "\033[K", "") + "\n"
		}
		io.WriteString(o.Out, out)
	}
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			draw(true)
			return nil
		case <-tick.C:
			draw(false)
		}
	}
}
