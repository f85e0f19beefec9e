package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/platform/proc"
	pb "github.com/vig-edge/vig/proto/inference"
)

// IdleOptions configures the idle benchmark.
type IdleOptions struct {
	VigBinary string
	Clients   []int         // attached idle clients, default 1, 5, 10
	Settle    time.Duration // default 4 s
	Sample    time.Duration // default 10 s
	Samples   int           // default 3
	Probes    int           // idle-settled round trips per client count, default 200
	Exec      time.Duration // the probe model's compute, default 5 ms
	// Pause is the silence before each first-request probe (default 1 s);
	// PauseRuns runs of PauseProbes probes per path (default 5 × 20).
	Pause       time.Duration
	PauseRuns   int
	PauseProbes int
	Pin         bool
	TempDir     string
	Progress    func(format string, args ...any)
}

// IdleRow is vig's idle cost with some clients attached.
type IdleRow struct {
	Clients int `json:"clients"` // idle gRPC clients
	// RingClients is the number of idle ring sessions attached beside them.
	RingClients int `json:"ring_clients"`
	// CPU as a fraction of one core per sample: from /proc/<pid>/stat (user +
	// system ticks, 10 ms resolution: one tick in a 10 s sample is 0.1 %) and from
	// the threads' schedstat (nanoseconds), which resolves what the ticks cannot.
	CPUStat        []float64 `json:"cpu_stat"`
	CPUSched       []float64 `json:"cpu_schedstat"`
	CPUStatMedian  float64   `json:"cpu_stat_median"`
	CPUSchedMedian float64   `json:"cpu_schedstat_median"`
	Wakeups        []uint64  `json:"ctxt_switches"` // per sample: vig's threads blocked or preempted
	// Idle-settled round trips: each after a quiet period of
	// 50 + (seq × 5) mod 17 ms, through vig and directly, alternating.
	Via      Dist    `json:"via"`
	Direct   Dist    `json:"direct"`
	AddedP50 float64 `json:"added_p50_ms"`
	AddedP95 float64 `json:"added_p95_ms"`
	AddedP99 float64 `json:"added_p99_ms"`
	AddedMax float64 `json:"added_max_ms"`
	// Pair is the distribution of (VIA − DIRECT) of the same probe pair.
	Pair Dist `json:"pair_diff"`
}

// IdleResult is the idle benchmark's output.
type IdleResult struct {
	Settle  time.Duration `json:"settle_ns"`
	Sample  time.Duration `json:"sample_ns"`
	Samples int           `json:"samples"`
	Pinned  bool          `json:"pinned"`
	Rows    []IdleRow     `json:"rows"`
	// RingClients says how ring clients were attached, or why none were.
	RingClients string `json:"ring_clients"`
	// AfterPause is the first request after a pause, with the last row's
	// clients attached.
	AfterPause *PauseResult `json:"after_pause,omitempty"`
}

// PauseResult is the first request after Pause of silence: each probe is one
// pause, then one request through vig (the paths take turns) and one straight
// to a second mock backend (the same model and seed, as silent), the order
// flipping every probe. The second backend lets both halves of a pair follow
// the same pause, so one pause makes one pair.
type PauseResult struct {
	Pause  time.Duration `json:"pause_ns"`
	Runs   int           `json:"runs"`
	Probes int           `json:"probes_per_run"`
	Paths  []PausePath   `json:"paths"`
}

// PausePath is one path's probes: per run, the VIA percentile minus the
// DIRECT one; the figures are the medians over the runs, so that one
// scheduling hiccup of a shared machine in one run does not decide them.
type PausePath struct {
	Path     string    `json:"path"` // grpc or ring
	RunP50   []float64 `json:"run_added_p50_ms"`
	RunP99   []float64 `json:"run_added_p99_ms"`
	AddedP50 float64   `json:"added_p50_ms"`
	AddedP99 float64   `json:"added_p99_ms"`
}

func (o *IdleOptions) defaults() {
	if len(o.Clients) == 0 {
		o.Clients = []int{1, 5, 10}
	}
	if o.Settle <= 0 {
		o.Settle = 4 * time.Second
	}
	if o.Sample <= 0 {
		o.Sample = 10 * time.Second
	}
	if o.Samples <= 0 {
		o.Samples = 3
	}
	if o.Probes <= 0 {
		o.Probes = 200
	}
	if o.Exec <= 0 {
		o.Exec = 5 * time.Millisecond
	}
	if o.Pause <= 0 {
		o.Pause = time.Second
	}
	if o.PauseRuns <= 0 {
		o.PauseRuns = 5
	}
	if o.PauseProbes <= 0 {
		o.PauseProbes = 20
	}
}

// Quiescence is the quiet time before idle-settled probe seq: 50 + (seq × 5) mod
// 17 ms, so that probes do not phase-lock with any polling interval.
func Quiescence(seq int) time.Duration {
	return time.Duration(50+(seq*5)%17) * time.Millisecond
}

// RunIdle measures vig's idle CPU and idle-settled latency with growing numbers of
// idle clients attached (one vig process; clients are added, never removed): as
// many gRPC clients as ring clients, each ring client a session with its own
// shared-memory region, held open and silent.
func RunIdle(ctx context.Context, o IdleOptions) (*IdleResult, error) {
	o.defaults()
	res := &IdleResult{Settle: o.Settle, Sample: o.Sample, Samples: o.Samples,
		RingClients: "as many as gRPC clients, each a ring session (its own shared-memory region, default ring sizes) attached to vig's ring listener and held open, silent"}
	ring := ringAddr()
	if err := ringSupport(); err != nil {
		ring, res.RingClients = "", "not attached: "+err.Error()
	}
	dir, err := os.MkdirTemp(o.TempDir, "vigbench-idle-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mb, err := startMock(mctx, "127.0.0.1:0", mockbackend.Config{Models: []mockbackend.Model{{Name: benchModel, Exec: o.Exec}}, Slots: 1, Seed: 1})
	if err != nil {
		return nil, err
	}
	defer mb.Stop()
	vig, err := StartVig(ctx, o.VigBinary, dir, vigDatapathConfig("127.0.0.1:0", "off", ring, mb.Addr(), o.Exec), o.Pin)
	if err != nil {
		return nil, err
	}
	defer vig.Stop()
	res.Pinned = vig.Pinned

	var idle []*grpc.ClientConn
	var rings []*ringSensor
	defer func() {
		for _, c := range idle {
			c.Close()
		}
		for _, r := range rings {
			r.Close()
		}
	}()
	probeVia, err := dial(vig.Addrs["grpc"])
	if err != nil {
		return nil, err
	}
	defer probeVia.Close()
	probeDirect, err := dial(mb.Addr())
	if err != nil {
		return nil, err
	}
	defer probeDirect.Close()
	seq := 0
	for _, n := range o.Clients {
		for len(idle) < n {
			cc, err := dial(vig.Addrs["grpc"])
			if err != nil {
				return nil, err
			}
			idle = append(idle, cc)
			// One call connects the client; then it stays attached and silent.
			if _, err := pb.NewGRPCInferenceServiceClient(cc).ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
				return nil, fmt.Errorf("attach idle client: %w", err)
			}
		}
		// Dial completes the ring handshake: the session is established and
		// vig serves it (waits on its request ring) from then on.
		for ring != "" && len(rings) < n {
			r, err := dialRing(vig.Addrs["ring"], true)
			if err != nil {
				return nil, err
			}
			rings = append(rings, r)
		}
		row := IdleRow{Clients: n, RingClients: len(rings)}
		if o.Progress != nil {
			o.Progress("idle: %d gRPC + %d ring clients, settling %v", n, len(rings), o.Settle)
		}
		if err := sleepCtx(ctx, o.Settle); err != nil {
			return nil, err
		}
		for i := range o.Samples {
			if o.Progress != nil {
				o.Progress("idle: %d clients, CPU sample %d/%d (%v)", n, i+1, o.Samples, o.Sample)
			}
			before, err := proc.ReadSample(vig.PID)
			if err != nil {
				return nil, err
			}
			if err := sleepCtx(ctx, o.Sample); err != nil {
				return nil, err
			}
			after, err := proc.ReadSample(vig.PID)
			if err != nil {
				return nil, err
			}
			u := proc.Delta(before, after)
			el := float64(u.Elapsed)
			row.CPUStat = append(row.CPUStat, float64(u.User+u.System)/el)
			row.CPUSched = append(row.CPUSched, float64(u.OnCPU)/el)
			row.Wakeups = append(row.Wakeups, u.Voluntary+u.Involuntary)
		}
		row.CPUStatMedian, row.CPUSchedMedian = Median(row.CPUStat), Median(row.CPUSched)
		if o.Progress != nil {
			o.Progress("idle: %d clients, %d idle-settled round trips", n, o.Probes)
		}
		var via, direct, added []float64
		for range o.Probes {
			req := frameRequest(benchModel, "idle", uint64(seq), 0, nil)
			req.Parameters = nil // the loose contract needs no capture time
			b, err := proto.Marshal(req)
			if err != nil {
				return nil, err
			}
			var tv, td time.Duration
			if err := sleepCtx(ctx, Quiescence(seq)); err != nil {
				return nil, err
			}
			if tv, err = call(ctx, probeVia, b); err != nil {
				return nil, err
			}
			if err := sleepCtx(ctx, Quiescence(seq)); err != nil {
				return nil, err
			}
			if td, err = call(ctx, probeDirect, b); err != nil {
				return nil, err
			}
			via, direct = append(via, ms(tv)), append(direct, ms(td))
			added = append(added, ms(tv)-ms(td))
			seq++
		}
		row.Via, row.Direct = Summarize(via), Summarize(direct)
		row.AddedP50, row.AddedP95 = row.Via.P50-row.Direct.P50, row.Via.P95-row.Direct.P95
		row.AddedP99, row.AddedMax = row.Via.P99-row.Direct.P99, row.Via.Max-row.Direct.Max
		row.Pair = Summarize(added)
		res.Rows = append(res.Rows, row)
	}
	var ring1 *ringSensor
	if len(rings) > 0 {
		ring1 = rings[0]
	}
	if res.AfterPause, err = afterPause(ctx, &o, probeVia, ring1, seq); err != nil {
		return nil, err
	}
	return res, nil
}

// afterPause measures the first request after a pause (PauseResult), through
// vig's gRPC listener and, when ring is set, its ring.
func afterPause(ctx context.Context, o *IdleOptions, via *grpc.ClientConn, ring *ringSensor, seq int) (*PauseResult, error) {
	mb2, err := startMock(ctx, "127.0.0.1:0", mockbackend.Config{Models: []mockbackend.Model{{Name: benchModel, Exec: o.Exec}}, Slots: 1, Seed: 1})
	if err != nil {
		return nil, err
	}
	defer mb2.Stop()
	direct, err := dial(mb2.Addr())
	if err != nil {
		return nil, err
	}
	defer direct.Close()
	data := make([]byte, 64)
	// One warm call each, so that no probe pays for a first connection.
	warm := frameRequest(benchModel, ringStream, uint64(seq), 0, data)
	warm.Parameters = nil
	b, err := proto.Marshal(warm)
	if err != nil {
		return nil, err
	}
	if _, err := call(ctx, direct, b); err != nil {
		return nil, err
	}
	paths := []string{"grpc"}
	if ring != nil {
		paths = append(paths, "ring")
	}
	res := &PauseResult{Pause: o.Pause, Runs: o.PauseRuns, Probes: o.PauseProbes}
	for _, p := range paths {
		res.Paths = append(res.Paths, PausePath{Path: p})
	}
	for run := range o.PauseRuns {
		vs := make([][]float64, len(paths))
		ds := make([][]float64, len(paths))
		for i := range o.PauseProbes * len(paths) {
			k := i % len(paths)
			if o.Progress != nil && i%10 == 0 {
				o.Progress("idle: first request after a %v pause, run %d/%d, probe %d/%d", o.Pause, run+1, o.PauseRuns, i+1, o.PauseProbes*len(paths))
			}
			seq++
			frame := uint64(seq)
			req := frameRequest(benchModel, ringStream, frame, 0, data) // the ring's id too
			req.Parameters = nil
			b, err := proto.Marshal(req)
			if err != nil {
				return nil, err
			}
			if err := sleepCtx(ctx, o.Pause); err != nil {
				return nil, err
			}
			viaCall := func() (time.Duration, error) {
				if paths[k] == "ring" {
					d, _, err := ring.call(frame, data)
					return d, err
				}
				return call(ctx, via, b)
			}
			var tv, td time.Duration
			if i/len(paths)%2 == 0 {
				if tv, err = viaCall(); err == nil {
					td, err = call(ctx, direct, b)
				}
			} else if td, err = call(ctx, direct, b); err == nil {
				tv, err = viaCall()
			}
			if err != nil {
				return nil, fmt.Errorf("request after a pause (%s): %w", paths[k], err)
			}
			vs[k], ds[k] = append(vs[k], ms(tv)), append(ds[k], ms(td))
		}
		for k := range paths {
			v, d := Summarize(vs[k]), Summarize(ds[k])
			pp := &res.Paths[k]
			pp.RunP50 = append(pp.RunP50, v.P50-d.P50)
			pp.RunP99 = append(pp.RunP99, v.P99-d.P99)
		}
	}
	for k := range res.Paths {
		pp := &res.Paths[k]
		pp.AddedP50, pp.AddedP99 = Median(pp.RunP50), Median(pp.RunP99)
	}
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
