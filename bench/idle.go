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
	Pin       bool
	TempDir   string
	Progress  func(format string, args ...any)
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
