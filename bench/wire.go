package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/gateway/restfront"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/agent/servermodel"
	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// The policies of the wire benchmark (SCENARIOS.md).
const (
	PolicyDirect = "direct"        // sensors → mock backend (FIFO in its queue)
	PolicyTriton = "triton-policy" // an emulation of Triton's queue policy, not Triton
	PolicyVig    = "vig"           // sensors → vig's gateway with the freshness governor
	// PolicyVigHTTP is vig with some sensors on its HTTP/REST frontend
	// (WireOptions.HTTPStreams) and the others on gRPC, beside PolicyVig's
	// all-gRPC runs of the same scenario.
	PolicyVigHTTP = "vig-http"
	// PolicyVigServer is vig reading the server: a scenario's
	// <name>.server.yaml, with no accelerators: and no on:, its layout derived
	// from the mock backend's ModelConfig (instance groups) before the
	// governor is built, as `vig serve` does.
	PolicyVigServer = "vig-server"
)

// fromServer completes a config that leaves the layout to the server (no
// accelerators:, no on:) from the backend's ModelConfig of each model, as
// `vig serve` does before it builds the scheduler.
func fromServer(cfg *config.Config, models map[string]*wire.ModelConfig) (*config.Config, error) {
	c := *cfg
	if _, err := c.Resolve(models); err != nil {
		return nil, err
	}
	return &c, nil
}

// Policies lists the policies in the order runs interleave them.
var Policies = []string{PolicyDirect, PolicyTriton, PolicyVig}

// The ablations of a scenario with a batching model (max_batch above 1): vig
// with batching off (every model max_batch: 1), and vig given only max_batch
// (no batch_exec_ms: the batch costs learnt online) whose first
// learnWarmUp is not counted.
const (
	PolicyVigUnbatched = "vig-unbatched"
	PolicyVigLearnt    = "vig-learnt"
	learnWarmUp        = 5 * time.Second
)

// The ablation of a scenario with more than one kind of accelerator: vig
// configured as one pool of N slots (backend.slots: N, no accelerators), in
// front of the same device.
const policyOnePool = "vig-one-pool-"

// PoliciesFor lists the policies of a scenario: Policies, and with more than one
// accelerator declared vig as one pool of 1 slot and of all the slots.
// With a batching model, vig-unbatched, and vig-learnt if batch_exec_ms is given.
func PoliciesFor(cfg *config.Config) []string {
	out := Policies
	if len(cfg.Accelerators) >= 2 {
		out = append(slices.Clone(out), policyOnePool+"1", fmt.Sprintf("%s%d", policyOnePool, cfg.Backend.Slots))
	}
	batching, costs := false, false
	for _, m := range cfg.Models {
		if m.MaxBatch != nil && *m.MaxBatch > 1 {
			batching = true
			costs = costs || len(m.BatchExecMs) > 0
		}
	}
	if batching {
		out = append(slices.Clone(out), PolicyVigUnbatched)
		if costs {
			out = append(out, PolicyVigLearnt)
		}
	}
	return out
}

// batchAblation is cfg as a batching ablation policy configures vig: every model
// max_batch: 1 (vig-unbatched), or without batch_exec_ms (vig-learnt). Only the
// governor sees it; the backend keeps its batcher.
func batchAblation(cfg *config.Config, policy string) *config.Config {
	c := *cfg
	c.Models = map[string]config.Model{}
	one := 1
	for name, m := range cfg.Models {
		m.BatchExecMs = nil
		if policy == PolicyVigUnbatched {
			m.MaxBatch = &one
		}
		c.Models[name] = m
	}
	return &c
}

// policiesOf lists the policies of a scenario: with a model repository (the
// backend binds models as Triton does) direct, the emulation, vig configured
// per core and, given a server config, vig reading the server; else
// PoliciesFor.
func policiesOf(sc Scenario) []string {
	if sc.Repository == nil && !sc.HasServer {
		return PoliciesFor(sc.Config)
	}
	out := slices.Clone(Policies)
	if sc.HasServer {
		out = append(out, PolicyVigServer)
	}
	return out
}

// onePool returns the slots of a one-pool ablation policy, or 0.
func onePool(p string) int {
	var n int
	if rest, ok := strings.CutPrefix(p, policyOnePool); ok {
		fmt.Sscanf(rest, "%d", &n)
	}
	return n
}

// PolicyLabel is a policy's name for people: the emulation says so.
func PolicyLabel(p string) string {
	if p == PolicyTriton {
		return "triton-policy (emulation)"
	}
	if n := onePool(p); n > 0 {
		return fmt.Sprintf("vig as one pool, `slots: %d`", n)
	}
	switch p {
	case PolicyVigServer:
		return "vig reading the server"
	case PolicyVigHTTP:
		return "vig, HTTP + gRPC sensors"
	case PolicyVigUnbatched:
		return "vig, `max_batch: 1`"
	case PolicyVigLearnt:
		return "vig, only `max_batch` (costs learnt)"
	}
	return p
}

// governed reports whether policy runs vig's governor (its counters apply).
func governed(p string) bool {
	return p == PolicyVig || p == PolicyVigHTTP || p == PolicyVigUnbatched || p == PolicyVigLearnt || p == PolicyVigServer || onePool(p) > 0
}

// wirePayload is the input tensor each frame carries on the wire benchmark: small,
// because this benchmark is about scheduling, not bytes.
const wirePayload = 1024

// WireOptions configures the wire benchmark.
type WireOptions struct {
	// Scenarios are the workloads by name ("A", "B", "C"), from
	// examples/scenarios/*.yaml. Backend addresses and listeners are ignored: the
	// benchmark starts its own mock backend and gateway in process.
	Scenarios []Scenario
	Depths    []int         // client buffer depths, default 1, 4, 16
	Duration  time.Duration // per run, default 15 s
	// HTTPStreams, when set, adds the policy vig-http: vig with these streams'
	// sensors on its HTTP/REST frontend (Triton's binary tensor data extension,
	// kept-alive connections, as tritonclient.http sends) and the others on
	// gRPC. "all" names every stream. A scenario without one of the streams is
	// an error.
	HTTPStreams []string
	// Policies, when set, runs only these policies (in the usual order).
	Policies []string
	// Rounds, above 1, splits every (policy, depth) run into this many rounds
	// of Duration/Rounds, the whole sequence of runs repeated round after round
	// and each run's rounds pooled: on a machine whose load drifts, every
	// policy then sees the same stretches of it.
	Rounds int
	// Progress, if set, is told what runs next.
	Progress func(format string, args ...any)
	// TraceDir, when set, receives the scheduling trace of each run of vig's
	// governor (its first round): wire-SCENARIO-POLICY-dDEPTH.trace.json.
	TraceDir string
}

// Scenario is one named workload.
type Scenario struct {
	Name   string
	Config *config.Config
	// Phases are the sensors' first captures after a run's start, by stream
	// (<name>.sensors.yaml); without them stream i starts at i × 7 ms.
	Phases map[string]time.Duration
	// Repository, when set, places the mock backend's models as Triton binds
	// them (<name>.repository.yaml): per-core DLA engines, instance counts,
	// interference. Config is then vig configured per core.
	Repository *mockbackend.Repository
	// Server is the config of vig reading the server (<name>.server.yaml,
	// PolicyVigServer); HasServer says the file exists, ServerErr why it
	// did not parse.
	Server    *config.Config
	HasServer bool
	ServerErr error
}

// offsets is each stream's phase, in config order.
func (sc Scenario) offsets() []time.Duration {
	out := make([]time.Duration, len(sc.Config.Streams))
	for i, s := range sc.Config.Streams {
		if d, ok := sc.Phases[s.Name]; ok {
			out[i] = d
		} else {
			out[i] = streamOffset(i)
		}
	}
	return out
}

// StreamResult is one stream's figures in one run (or the best run of its policy).
type StreamResult struct {
	Stream string `json:"stream"`
	Class  string `json:"class"`
	Depth  int    `json:"depth"`
	// Protocol is "http" for a sensor on vig's HTTP/REST frontend (vig-http),
	// empty for gRPC.
	Protocol string  `json:"protocol,omitempty"`
	Coverage float64 `json:"coverage"` // fraction of complete period windows covered
	Windows  int     `json:"windows"`
	Covered  int     `json:"covered"`
	// Empty windows got no fresh result; Doubled ones two or more (the spare one
	// usually belonged to a neighbouring window left empty).
	Empty   int     `json:"empty_windows"`
	Doubled int     `json:"doubled_windows"`
	AoIP50  float64 `json:"aoi_p50_ms"`
	AoIP95  float64 `json:"aoi_p95_ms"`
	AoIP99  float64 `json:"aoi_p99_ms"`
	// Delivered counts results the sensor received; Errors the calls that failed
	// (superseded, late-dropped, rejected, cancelled at the end of the run).
	Delivered uint64 `json:"delivered"`
	Errors    uint64 `json:"errors"`
	// Checked counts answers of a batching model whose rows the client
	// recomputed (each frame's content is its own); Mixed those that were not
	// the frame's own (another frame's row or id). A mixed-up answer is not a
	// delivery.
	Checked uint64 `json:"checked,omitempty"`
	Mixed   uint64 `json:"mixed_up,omitempty"`
	SensorStats
	// Inferences is the backend's inference_count for the stream's model.
	Inferences uint64 `json:"inferences"`
	// vig's counters (governor snapshot).
	Superseded  uint64 `json:"superseded"`
	LateDropped uint64 `json:"late_dropped"`
	Deferred    uint64 `json:"deferred"`
	Rejected    uint64 `json:"rejected"`
	// The Triton-policy emulation's counters.
	QueueFull uint64 `json:"queue_full,omitempty"`
	TimedOut  uint64 `json:"queue_timeout,omitempty"`
	// AoICDF holds the AoI quantiles at 0, 1, …, 100 % of the time (ms), for plots.
	AoICDF []float64 `json:"aoi_quantiles_ms,omitempty"`
}

// StreamSpec is one stream of a scenario as configured.
type StreamSpec struct {
	Name     string  `json:"name"`
	Class    string  `json:"class"`
	Model    string  `json:"model"`
	FrameMs  float64 `json:"frame_ms"`
	PeriodMs float64 `json:"period_ms"`
	MaxAgeMs float64 `json:"max_age_ms"`
	ExecMs   float64 `json:"exec_ms"`
	PhaseMs  float64 `json:"phase_ms"`
	// MaxBatch and BatchExecMs are the model's batching as configured.
	MaxBatch    int             `json:"max_batch,omitempty"`
	BatchExecMs map[int]float64 `json:"batch_exec_ms,omitempty"`
}

func specsOf(sc Scenario) []StreamSpec {
	var out []StreamSpec
	off := sc.offsets()
	for i, s := range sc.Config.Streams {
		frame := s.FrameInterval()
		if frame <= 0 {
			frame = s.Period()
		}
		m := sc.Config.Models[s.Model]
		spec := StreamSpec{Name: s.Name, Class: s.Class, Model: s.Model, FrameMs: ms(frame),
			PeriodMs: ms(s.Period()), MaxAgeMs: ms(s.MaxAge()), ExecMs: m.ExecMs, PhaseMs: ms(off[i]), BatchExecMs: m.BatchExecMs}
		if m.MaxBatch != nil {
			spec.MaxBatch = *m.MaxBatch
		}
		out = append(out, spec)
	}
	return out
}

// WireRun is one (policy, depth) run of a scenario.
type WireRun struct {
	Policy  string         `json:"policy"`
	Depth   int            `json:"depth"`
	Streams []StreamResult `json:"streams"`
	Idle    IdleStats      `json:"accelerator_idle"`
	// Busy is each accelerator's busy share of its slot time in the run (%),
	// from the mock backend's timeline.
	Busy map[string]float64 `json:"busy_share_pct"`
	// Batches counts the backend's executions by model and batch size (rows),
	// from its timeline, when a model ran a batch of more than one row.
	Batches map[string]map[int]int `json:"batches,omitempty"`
	// Models is the backend's inference_count per model in the run (its
	// ModelStatistics): where the frames ran, e.g. on which engine of a
	// detector built for several accelerators.
	Models map[string]uint64 `json:"model_inferences,omitempty"`
	// Skipped, when set, says why the policy did not run (the run has no
	// streams).
	Skipped string `json:"skipped,omitempty"`

	idle []time.Duration // the samples of Idle, pooled per policy
}

// AcceleratorSpec is one accelerator of a scenario's device.
type AcceleratorSpec struct {
	Name  string `json:"name"`
	Slots int    `json:"slots"`
}

// IdleStats is how long the accelerator sat idle while work waited, from the mock
// backend's per-slot timeline: for every job whose frame had been sent (captured)
// before the previous job on its slot ended, the slot's gap between that end and the
// job's start. A direct client's queued frame starts at once; a frame waiting in a
// gateway pays the answer's way back and the next request's way in unless the
// gateway sent it ahead.
type IdleStats struct {
	Jobs   int     `json:"jobs"`           // jobs started in the run
	Waited int     `json:"waited"`         // jobs whose frame waited when their slot freed
	P50Us  float64 `json:"idle_p50_us"`    // their slot's idle gap, median
	P90Us  float64 `json:"idle_p90_us"`    //   and 90th percentile
	SumMs  float64 `json:"idle_total_ms"`  // all idle time while a frame for the slot waited
	Share  float64 `json:"idle_share_pct"` // SumMs as a share of the run × slots
}

// WireScenario holds every run of a scenario and each policy's best depth per
// stream.
type WireScenario struct {
	Name    string                    `json:"name"`
	Slots   int                       `json:"slots"`
	Streams []StreamSpec              `json:"streams"` // the workload, from its YAML
	Runs    []WireRun                 `json:"runs"`
	Best    map[string][]StreamResult `json:"best"` // policy → streams in config order
	// Idle is each policy's accelerator idle time while work waited, pooled over
	// its depth runs.
	Idle map[string]IdleStats `json:"accelerator_idle"`
	// Accelerators is the device (one, named "", for backend.slots), Policies
	// the policies run (PoliciesFor), and Busy each policy's busy share per
	// accelerator, averaged over its depth runs.
	Accelerators []AcceleratorSpec             `json:"accelerators"`
	Policies     []string                      `json:"policies"`
	Busy         map[string]map[string]float64 `json:"busy_share_pct"`
	// HTTPStreams are the streams whose sensors used HTTP/REST under vig-http.
	HTTPStreams []string `json:"http_streams,omitempty"`
	// Skipped are the policies that could not run, with the reason.
	Skipped map[string]string `json:"skipped,omitempty"`
	// Repository is the mock backend's model repository, when the scenario
	// binds models as Triton does.
	Repository *mockbackend.Repository `json:"repository,omitempty"`
	// Batches is each policy's executions by model and batch size, every depth
	// pooled (see WireRun.Batches).
	Batches map[string]map[string]map[int]int `json:"batches,omitempty"`
}

// WireResult is the wire benchmark's output.
type WireResult struct {
	Duration  time.Duration  `json:"run_ns"`
	Rounds    int            `json:"rounds,omitempty"` // WireOptions.Rounds, when above 1
	Depths    []int          `json:"depths"`
	Payload   int            `json:"payload_bytes"`
	Scenarios []WireScenario `json:"scenarios"`
}

// RunWire runs every scenario: for each depth, the policies one after the other
// (direct, triton-policy, vig, direct, …), each on a fresh backend.
func RunWire(ctx context.Context, o WireOptions) (*WireResult, error) {
	if len(o.Depths) == 0 {
		o.Depths = []int{1, 4, 16}
	}
	if o.Duration <= 0 {
		o.Duration = 15 * time.Second
	}
	rounds := max(o.Rounds, 1)
	res := &WireResult{Duration: o.Duration, Depths: o.Depths, Payload: wirePayload}
	if rounds > 1 {
		res.Rounds = rounds
	}
	piece := o.Duration / time.Duration(rounds)
	if o.TraceDir != "" {
		if err := os.MkdirAll(o.TraceDir, 0o755); err != nil {
			return nil, err
		}
	}
	// Every scenario's options are checked before the first run.
	httpOf, policiesOf := make([][]string, len(o.Scenarios)), make([][]string, len(o.Scenarios))
	for i, sc := range o.Scenarios {
		var err error
		if httpOf[i], err = httpStreamsOf(sc, o.HTTPStreams); err != nil {
			return nil, err
		}
		if policiesOf[i], err = wirePolicies(sc, len(httpOf[i]) > 0, o.Policies); err != nil {
			return nil, err
		}
	}
	for i, sc := range o.Scenarios {
		httpStreams := httpOf[i]
		ws := WireScenario{Name: sc.Name, Slots: sc.Config.Backend.Slots, Streams: specsOf(sc),
			Policies: policiesOf[i], Busy: map[string]map[string]float64{}, HTTPStreams: httpStreams, Repository: sc.Repository}
		for _, a := range sc.Config.AcceleratorList() {
			ws.Accelerators = append(ws.Accelerators, AcceleratorSpec{Name: a.Name, Slots: a.Slots})
		}
		if sc.Repository != nil {
			// The device is the repository's: the mock backend's accelerators.
			mcfg := mockbackend.FromConfig(sc.Config)
			if err := sc.Repository.Apply(&mcfg); err != nil {
				return nil, fmt.Errorf("wire %s: %w", sc.Name, err)
			}
			ws.Accelerators = ws.Accelerators[:0]
			for _, a := range mcfg.Accelerators {
				ws.Accelerators = append(ws.Accelerators, AcceleratorSpec{Name: a.Name, Slots: a.Slots})
			}
		}
		for round := range rounds {
			k := 0
			for _, d := range o.Depths {
				for _, p := range ws.Policies {
					if o.Progress != nil {
						of := ""
						if rounds > 1 {
							of = fmt.Sprintf(", round %d of %d", round+1, rounds)
						}
						o.Progress("wire %s: %s, depth %d (%v%s)", sc.Name, PolicyLabel(p), d, piece, of)
					}
					tracePath := ""
					if o.TraceDir != "" && round == 0 && governed(p) {
						tracePath = filepath.Join(o.TraceDir, fmt.Sprintf("wire-%s-%s-d%d.trace.json", strings.ToLower(sc.Name), p, d))
					}
					run, err := runWireOnce(ctx, sc, p, d, piece, httpStreams, tracePath)
					if err != nil {
						return nil, fmt.Errorf("wire %s %s depth %d: %w", sc.Name, p, d, err)
					}
					if run.Skipped != "" {
						if ws.Skipped == nil {
							ws.Skipped = map[string]string{}
						}
						if _, said := ws.Skipped[p]; !said && o.Progress != nil {
							o.Progress("wire %s: %s not run: %s", sc.Name, PolicyLabel(p), run.Skipped)
						}
						ws.Skipped[p] = run.Skipped
					}
					if round == 0 {
						ws.Runs = append(ws.Runs, *run)
					} else {
						poolRun(&ws.Runs[k], run, round)
					}
					k++
				}
			}
		}
		ws.Best = map[string][]StreamResult{}
		ws.Idle = map[string]IdleStats{}
		for _, p := range ws.Policies {
			var runs []WireRun
			var pooled IdleStats
			var samples []time.Duration
			busy := map[string]float64{}
			for _, r := range ws.Runs {
				if r.Policy == p {
					for a, v := range r.Busy {
						busy[a] += v / float64(len(o.Depths))
					}
					runs = append(runs, r)
					samples = append(samples, r.idle...)
					pooled.Jobs += r.Idle.Jobs
					pooled.SumMs += r.Idle.SumMs
					pooled.Share += r.Idle.Share / float64(len(o.Depths))
				}
			}
			ws.Best[p] = BestDepth(runs)
			ws.Busy[p] = busy
			for _, r := range runs {
				if len(r.Batches) > 0 {
					addBatches(ws.batchesOf(p), r.Batches)
				}
			}
			pooled.Waited, pooled.P50Us, pooled.P90Us = idleQuantiles(samples)
			ws.Idle[p] = pooled
		}
		// The per-run AoI quantiles are only kept for the best runs.
		for i := range ws.Runs {
			for j := range ws.Runs[i].Streams {
				ws.Runs[i].Streams[j].AoICDF = nil
			}
		}
		res.Scenarios = append(res.Scenarios, ws)
	}
	return res, nil
}

// batchesOf is policy p's batch counts, made on first use.
func (ws *WireScenario) batchesOf(p string) map[string]map[int]int {
	if ws.Batches == nil {
		ws.Batches = map[string]map[string]map[int]int{}
	}
	if ws.Batches[p] == nil {
		ws.Batches[p] = map[string]map[int]int{}
	}
	return ws.Batches[p]
}

// addBatches adds the executions of from to into.
func addBatches(into, from map[string]map[int]int) {
	for model, sizes := range from {
		if into[model] == nil {
			into[model] = map[int]int{}
		}
		for size, n := range sizes {
			into[model][size] += n
		}
	}
}

// poolRun adds round n (counted from 0) of a run to the rounds before it in
// into: windows, deliveries and counters add up (coverage is then covered over
// all the rounds' windows); AoI percentiles, their quantiles and busy shares
// are the mean over the rounds; idle samples are pooled.
func poolRun(into, r *WireRun, n int) {
	mean := func(a, b float64) float64 { return (a*float64(n) + b) / float64(n+1) }
	for i := range into.Streams {
		if i >= len(r.Streams) {
			break
		}
		a, b := &into.Streams[i], r.Streams[i]
		a.Windows += b.Windows
		a.Covered += b.Covered
		a.Empty += b.Empty
		a.Doubled += b.Doubled
		if a.Windows > 0 {
			a.Coverage = float64(a.Covered) / float64(a.Windows)
		}
		a.AoIP50, a.AoIP95, a.AoIP99 = mean(a.AoIP50, b.AoIP50), mean(a.AoIP95, b.AoIP95), mean(a.AoIP99, b.AoIP99)
		switch {
		case len(a.AoICDF) == len(b.AoICDF):
			for q := range a.AoICDF {
				a.AoICDF[q] = mean(a.AoICDF[q], b.AoICDF[q])
			}
		case len(a.AoICDF) == 0:
			a.AoICDF = b.AoICDF
		}
		a.Delivered += b.Delivered
		a.Errors += b.Errors
		a.Checked += b.Checked
		a.Mixed += b.Mixed
		a.Scheduled += b.Scheduled
		a.Sent += b.Sent
		a.Dropped += b.Dropped
		a.Inferences += b.Inferences
		a.Superseded += b.Superseded
		a.LateDropped += b.LateDropped
		a.Deferred += b.Deferred
		a.Rejected += b.Rejected
		a.QueueFull += b.QueueFull
		a.TimedOut += b.TimedOut
	}
	if len(r.Models) > 0 && into.Models == nil {
		into.Models = map[string]uint64{}
	}
	for m, n := range r.Models {
		into.Models[m] += n
	}
	if len(r.Batches) > 0 && into.Batches == nil {
		into.Batches = map[string]map[int]int{}
	}
	addBatches(into.Batches, r.Batches)
	into.idle = append(into.idle, r.idle...)
	into.Idle.Jobs += r.Idle.Jobs
	into.Idle.SumMs += r.Idle.SumMs
	into.Idle.Share = mean(into.Idle.Share, r.Idle.Share)
	into.Idle.Waited, into.Idle.P50Us, into.Idle.P90Us = idleQuantiles(into.idle)
	if into.Busy == nil {
		into.Busy = map[string]float64{}
	}
	for a, v := range r.Busy {
		into.Busy[a] = mean(into.Busy[a], v)
	}
}

// httpStreamsOf checks the names of WireOptions.HTTPStreams against the
// scenario's streams and returns them in config order ("all": every stream).
func httpStreamsOf(sc Scenario, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var have []string
	for _, s := range sc.Config.Streams {
		have = append(have, s.Name)
	}
	if slices.Contains(names, "all") {
		return have, nil
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return nil, fmt.Errorf("wire %s: no stream %q to put on HTTP (its streams: %s, or all)", sc.Name, n, strings.Join(have, ", "))
		}
	}
	var out []string
	for _, n := range have {
		if slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// wirePolicies is the policies a scenario runs: PoliciesFor, vig-http after
// them when some streams go over HTTP, narrowed to only when it is set.
func wirePolicies(sc Scenario, withHTTP bool, only []string) ([]string, error) {
	all := policiesOf(sc)
	if withHTTP {
		all = append(slices.Clone(all), PolicyVigHTTP)
	}
	if len(only) == 0 {
		return all, nil
	}
	for _, p := range only {
		if !slices.Contains(all, p) {
			hint := ""
			if p == PolicyVigHTTP {
				hint = " (vig-http runs when some streams go over HTTP: give --http-streams)"
			}
			return nil, fmt.Errorf("wire %s: unknown policy %q (want some of %s)%s", sc.Name, p, strings.Join(all, ", "), hint)
		}
	}
	var out []string
	for _, p := range all {
		if slices.Contains(only, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// BestDepth picks, for every stream, the run in which it did best: the highest
// coverage, then the lowest AoI p95, then the smallest depth. runs are runs of one
// policy at different depths; the result lists the streams in the order of the
// first run.
func BestDepth(runs []WireRun) []StreamResult {
	if len(runs) == 0 {
		return nil
	}
	var out []StreamResult
	for i, s := range runs[0].Streams {
		best := s
		for _, r := range runs[1:] {
			if i >= len(r.Streams) || r.Streams[i].Stream != s.Stream {
				continue
			}
			if better(r.Streams[i], best) {
				best = r.Streams[i]
			}
		}
		out = append(out, best)
	}
	return out
}

func better(a, b StreamResult) bool {
	switch {
	case a.Coverage != b.Coverage:
		return a.Coverage > b.Coverage
	case a.AoIP95 != b.AoIP95:
		// No delivery at all has AoI 0: never prefer it for its AoI.
		if a.Delivered == 0 || b.Delivered == 0 {
			return a.Delivered > b.Delivered
		}
		return a.AoIP95 < b.AoIP95
	}
	return a.Depth < b.Depth
}

// runWireOnce runs one policy at one depth on a fresh mock backend; under
// vig-http the sensors of httpStreams use vig's HTTP/REST frontend.
func runWireOnce(ctx context.Context, sc Scenario, policy string, depth int, dur time.Duration, httpStreams []string, tracePath string) (_ *WireRun, err error) {
	cfg := *sc.Config // shallow: the backend address is the only field written
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if policy == PolicyVigServer && sc.ServerErr != nil {
		// One line: the reason goes into a table and the targets.
		why := strings.Join(strings.Fields(strings.ReplaceAll(sc.ServerErr.Error(), "\n", "; ")), " ")
		return &WireRun{Policy: policy, Depth: depth, Skipped: "its config does not parse in this build (" + why + ")"}, nil
	}
	mcfg := mockbackend.FromConfig(&cfg)
	if sc.Repository != nil {
		if err := sc.Repository.Apply(&mcfg); err != nil {
			return nil, err
		}
	}
	mcfg.Timeline = true
	mb, err := startMock(ctx, "127.0.0.1:0", mcfg)
	if err != nil {
		return nil, err
	}
	defer mb.Stop()
	cfg.Backend.Address = mb.Addr()
	cfg.Backend.Embedded = false
	device := cfg.AcceleratorList()
	if len(mcfg.Accelerators) > 0 {
		device = device[:0:0]
		for _, a := range mcfg.Accelerators {
			device = append(device, config.Accelerator{Name: a.Name, Slots: a.Slots})
		}
	}

	target, httpTarget := mb.Addr(), ""
	var gov *gateway.Governor
	var tp *TritonPolicy
	gwCfg := &cfg
	if policy == PolicyVigUnbatched || policy == PolicyVigLearnt {
		gwCfg = batchAblation(&cfg, policy)
	}
	if policy == PolicyVigServer {
		scfg := *sc.Server
		scfg.Backend.Address, scfg.Backend.Embedded = mb.Addr(), false
		mcs, err := modelConfigs(ctx, mb, mcfg.Models)
		if err != nil {
			return nil, err
		}
		if gwCfg, err = fromServer(&scfg, mcs); err != nil {
			return nil, fmt.Errorf("vig reading the server: %w", err)
		}
		cfg = *gwCfg // the sensors drive its streams (the scenario's, by name)
	}
	if policy != PolicyDirect {
		var admit gateway.Admitter
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		if governed(policy) {
			gcfg := gwCfg
			if n := onePool(policy); n > 0 {
				gcfg = onePoolConfig(&cfg, n)
			}
			rec, err := traceRecorder(tracePath, gcfg)
			if err != nil {
				return nil, err
			}
			gov, err = gateway.NewGovernor(gateway.GovernorOptions{Config: gcfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset, Log: quiet,
				Recorder: rec})
			if err != nil {
				return nil, err
			}
			if rec != nil {
				span := rec.Begin()
				defer func() { // after the gateway stopped: every call answered
					if werr := trace.WriteFile(tracePath, span.End()); werr != nil && err == nil {
						err = fmt.Errorf("trace: %w", werr)
					}
				}()
			}
			admit = gov
		} else {
			tp = NewTritonPolicy(&cfg)
			admit = tp
		}
		var sockets netopt.Stats
		gw, err := gateway.New(gateway.Options{Config: gwCfg, Dial: sockets.DialAddr, Admit: admit, Log: quiet})
		if err != nil {
			return nil, err
		}
		defer gw.Stop()
		if gov != nil && cfg.Backend.StatsIntervalMs > 0 {
			// As `vig serve` does: the estimator is corrected from the backend's
			// statistics.
			poller := gateway.NewStatsPoller(gw, gov, time.Duration(cfg.Backend.StatsIntervalMs)*time.Millisecond, quiet)
			go poller.Run(ctx)
		}
		ln, err := netopt.Listen("tcp", "127.0.0.1:0", &sockets)
		if err != nil {
			return nil, err
		}
		go gw.Serve(ln)
		target = ln.Addr().String()
		if policy == PolicyVigHTTP {
			// As `vig serve` does for listen.http: the REST frontend into the
			// same gateway.
			hln, err := netopt.Listen("tcp", "127.0.0.1:0", &sockets)
			if err != nil {
				return nil, err
			}
			rest := restfront.New(gw, restfront.Options{Log: quiet, MaxBody: int64(cfg.GRPC.MaxMessageMiB) << 20})
			defer rest.Close()
			go rest.Serve(hln)
			httpTarget = hln.Addr().String()
		}
	}
	if httpTarget == "" {
		httpStreams = nil
	}
	var warm time.Duration
	if policy == PolicyVigLearnt {
		warm = learnWarmUp
	}
	return driveSensors(ctx, &cfg, device, sc.offsets(), policy, depth, warm, dur, target, httpTarget, httpStreams, mb, gov, tp)
}

// modelConfigs reads every model's ModelConfig from the backend, as vig
// reads a server's; every model must be described.
func modelConfigs(ctx context.Context, mb *mockbackend.Running, models []mockbackend.Model) (map[string]*wire.ModelConfig, error) {
	out := map[string]*wire.ModelConfig{}
	for _, m := range models {
		r := servermodel.Read(ctx, servermodel.Func(mb.ModelConfig), m.Name)
		switch r.Outcome {
		case servermodel.Described:
		case servermodel.Undecodable:
			return nil, r.Err // it names the model
		default:
			return nil, fmt.Errorf("model config of %s: %w", m.Name, r.Err)
		}
		out[m.Name] = r.Config
	}
	return out, nil
}

// onePoolConfig is cfg as vig was configured before accelerators: one pool of
// slots, every model on it (corun: false then means alone on the whole device).
// Only the governor sees it; the mock backend keeps the device as it is.
func onePoolConfig(cfg *config.Config, slots int) *config.Config {
	c := *cfg
	c.Accelerators = nil
	c.Backend.Slots = slots
	c.Models = map[string]config.Model{}
	for name, m := range cfg.Models {
		m.On = ""
		c.Models[name] = m
	}
	return &c
}

// streamOffset staggers the sensors' first frames (deterministically, the same for
// every policy): real cameras are not phase-locked.
func streamOffset(i int) time.Duration { return time.Duration(i) * 7 * time.Millisecond }

// driveSensors runs the sensors for warm + dur and counts the last dur.
func driveSensors(ctx context.Context, cfg *config.Config, device []config.Accelerator, offsets []time.Duration, policy string, depth int, warm, dur time.Duration,
	target, httpTarget string, httpStreams []string, mb *mockbackend.Running, gov *gateway.Governor, tp *TritonPolicy) (*WireRun, error) {
	type streamState struct {
		mu             sync.Mutex
		deliveries     []sched.Delivery
		errors         uint64
		checked, mixed uint64
		stats          SensorStats
	}
	n := len(cfg.Streams)
	states := make([]streamState, n)
	conns := make([]interface{ Close() error }, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	payload := make([]byte, wirePayload)
	sensors := make([]*Sensor, n)
	for i, s := range cfg.Streams {
		model, name := s.Model, s.Name
		var send SendFunc
		if slices.Contains(httpStreams, name) {
			hc := newHTTPFrameClient(httpTarget, depth)
			conns = append(conns, hc)
			// Its connections open before the clock starts, as gRPC's do.
			lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
			err := hc.connect(lctx)
			lcancel()
			if err != nil {
				return nil, fmt.Errorf("connect http://%s: %w", httpTarget, err)
			}
			send = func(ctx context.Context, frame uint64, capture int64) error {
				return hc.infer(ctx, model, name, frame, capture, payload)
			}
		} else {
			cc, err := dial(target)
			if err != nil {
				return nil, err
			}
			conns = append(conns, cc)
			client := pb.NewGRPCInferenceServiceClient(cc)
			// Connect before the clock starts. Waiting for the connection to be
			// ready, with a bound: one connect attempt that times out on a loaded
			// machine (1 s, DialOptions) is retried, not the end of the run.
			lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
			_, err = client.ServerLive(lctx, &pb.ServerLiveRequest{}, grpc.WaitForReady(true))
			lcancel()
			if err != nil {
				return nil, fmt.Errorf("connect %s: %w", target, err)
			}
			send = func(ctx context.Context, frame uint64, capture int64) error {
				_, err := client.ModelInfer(ctx, frameRequest(model, name, frame, capture, payload))
				return err
			}
			if batchingModel(cfg, model) {
				st := &states[i]
				send = func(ctx context.Context, frame uint64, capture int64) error {
					row := framePayload(name, frame)
					resp, err := client.ModelInfer(ctx, batchFrameRequest(model, name, frame, capture, row))
					if err != nil {
						return err
					}
					if ownAnswer(resp, name, frame, row) {
						st.mu.Lock()
						st.checked++
						st.mu.Unlock()
						return nil
					}
					st.mu.Lock()
					st.checked++
					st.mixed++
					st.mu.Unlock()
					return errMixedUp
				}
			}
		}
		st := &states[i]
		interval := s.FrameInterval()
		if interval <= 0 {
			interval = s.Period()
		}
		sensors[i] = &Sensor{Interval: interval, Offset: offsets[i], Depth: depth, Clock: Monotonic,
			Send: send,
			OnResult: func(_ uint64, capture, at int64, err error) {
				st.mu.Lock()
				defer st.mu.Unlock()
				if err != nil {
					if err != errMixedUp {
						st.errors++
					}
					return
				}
				st.deliveries = append(st.deliveries, sched.Delivery{At: sched.Time(at), Capture: sched.Time(capture)})
			}}
	}
	first := clock.Monotonic() + int64(50*time.Millisecond) // the sensors' clock starts
	start := first + int64(warm)                            // the counts start
	end := start + int64(dur)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	timer := time.AfterFunc(time.Duration(end-clock.Monotonic()), stop)
	defer timer.Stop()
	var wg sync.WaitGroup
	for i := range sensors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := sensors[i].Run(runCtx, first)
			states[i].mu.Lock()
			states[i].stats = st
			states[i].mu.Unlock()
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	inferences := map[string]uint64{}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if ms, err := mb.ModelStatistics(sctx, &pb.ModelStatisticsRequest{}); err == nil {
		for _, m := range ms.ModelStats {
			inferences[m.Name] += m.InferenceCount
		}
	} else {
		return nil, fmt.Errorf("model statistics: %w", err)
	}
	var snap sched.Snapshot
	if gov != nil {
		gov.Snapshot(&snap)
	}
	var tstats map[string]TritonStats
	if tp != nil {
		tstats = tp.Stats()
	}
	run := &WireRun{Policy: policy, Depth: depth}
	captures := map[string]func(frame uint64) int64{}
	for i, s := range cfg.Streams {
		off, iv := int64(offsets[i]), int64(sensors[i].Interval)
		captures[s.Name] = func(frame uint64) int64 { return first + off + int64(frame)*iv }
	}
	// The timeline is in time.Time (with Go's monotonic reading): place it on
	// CLOCK_MONOTONIC from one pair of readings.
	ref, refMono := time.Now(), clock.Monotonic()
	mono := func(t time.Time) int64 { return refMono - int64(ref.Sub(t)) }
	raw := mb.Timeline()
	jobs := executions(raw)
	if warm > 0 {
		// The backend's inference_count includes the warm-up: count the rows
		// that started after it instead.
		clear(inferences)
		for _, j := range raw {
			if s := mono(j.Start); s >= start && s < end {
				inferences[j.Model] += uint64(max(j.Rows, 1))
			}
		}
	}
	run.Idle, run.idle = idleWhileWaiting(jobs, mono, captures, start, end, cfg.Backend.Slots)
	run.Busy = busyShare(jobs, mono, start, end, device)
	run.Models = map[string]uint64{}
	for m, n := range inferences {
		if n > 0 {
			run.Models[m] = n
		}
	}
	byStream := map[string]uint64{} // rows run per stream, for a stream naming a logical model
	for _, j := range raw {
		if s := mono(j.Start); warm == 0 || s >= start && s < end {
			byStream[j.Stream] += uint64(max(j.Rows, 1))
		}
	}
	run.Batches = batchCounts(jobs, mono, start, end)
	for i, s := range cfg.Streams {
		st := &states[i]
		if warm > 0 {
			st.deliveries = slices.DeleteFunc(st.deliveries, func(d sched.Delivery) bool { return int64(d.At) < start })
		}
		cov := sched.Coverage(sched.Time(start), sched.Time(end), s.Period(), s.MaxAge(), st.deliveries)
		aoi := sched.AoI(sched.Time(start), sched.Time(end), st.deliveries)
		r := StreamResult{Stream: s.Name, Class: s.Class, Depth: depth,
			Coverage: cov.Ratio(), Windows: cov.Windows, Covered: cov.Covered, Empty: cov.Empty(), Doubled: cov.Doubled,
			AoIP50: ms(aoi.P50), AoIP95: ms(aoi.P95), AoIP99: ms(aoi.P99),
			Delivered: uint64(len(st.deliveries)), Errors: st.errors, Checked: st.checked, Mixed: st.mixed, SensorStats: st.stats,
			Inferences: inferences[s.Model],
			AoICDF:     AoIQuantiles(sched.Time(start), sched.Time(end), st.deliveries)}
		if _, served := inferences[s.Model]; !served {
			r.Inferences = byStream[s.Name] // its frames ran as other models (variants)
		}
		if slices.Contains(httpStreams, s.Name) {
			r.Protocol = "http"
		}
		for _, ss := range snap.Streams {
			if ss.Name == s.Name {
				r.Superseded, r.LateDropped, r.Deferred, r.Rejected = ss.Superseded, ss.LateDropped, ss.Deferred, ss.Rejected
			}
		}
		if t, ok := tstats[s.Name]; ok {
			r.QueueFull, r.TimedOut = t.QueueFull, t.TimedOut
		}
		run.Streams = append(run.Streams, r)
	}
	return run, nil
}

// AoIQuantiles samples the age of information every millisecond over
// [max(start, first delivery), end) — the sawtooth of sched.AoI — and returns its
// quantiles at 0, 1, …, 100 % in milliseconds (nil without a delivery).
func AoIQuantiles(start, end sched.Time, ds []sched.Delivery) []float64 {
	if len(ds) == 0 || end <= start {
		return nil
	}
	sorted := slices.Clone(ds)
	slices.SortFunc(sorted, func(a, b sched.Delivery) int { return cmp.Compare(a.At, b.At) })
	const step = sched.Time(time.Millisecond)
	var samples []float64
	newest, have, j := sched.Time(0), false, 0
	for t := start; t < end; t += step {
		for j < len(sorted) && sorted[j].At <= t {
			if !have || sorted[j].Capture > newest {
				newest, have = sorted[j].Capture, true
			}
			j++
		}
		if have {
			samples = append(samples, ms(t.Sub(newest)))
		}
	}
	if len(samples) == 0 {
		return nil
	}
	slices.Sort(samples)
	q := make([]float64, 101)
	for i := range q {
		q[i] = percentileSorted(samples, float64(i)/100)
	}
	return q
}

// idleWhileWaiting reads the mock backend's timeline (jobs ordered by slot and
// start; mono places their times on CLOCK_MONOTONIC) of a run from start to end
// (CLOCK_MONOTONIC ns): for every job after the
// first on its slot, the slot was idle from the previous job's end to its start; if
// the job's frame had been sent by then (capture gives a frame's send time), that
// gap was idle time while work waited. Jobs whose frame is unknown are counted but
// not judged.
func idleWhileWaiting(jobs []mockbackend.Job, mono func(time.Time) int64, capture map[string]func(uint64) int64, start, end int64, slots int) (IdleStats, []time.Duration) {
	var st IdleStats
	var samples []time.Duration
	var sum time.Duration
	for i, j := range jobs {
		s := mono(j.Start)
		if s < start || s >= end {
			continue
		}
		st.Jobs++
		if i == 0 || jobs[i-1].Slot != j.Slot {
			continue
		}
		f, ok := capture[j.Stream]
		if !ok {
			continue
		}
		sent, prevEnd := f(j.Frame), mono(jobs[i-1].End)
		if sent <= prevEnd {
			samples = append(samples, time.Duration(max(s-prevEnd, 0)))
		}
		if gap := s - max(prevEnd, sent); gap > 0 {
			sum += time.Duration(gap)
		}
	}
	st.Waited, st.P50Us, st.P90Us = idleQuantiles(samples)
	st.SumMs = ms(sum)
	if end > start && slots > 0 {
		st.Share = 100 * float64(sum) / float64((end-start)*int64(slots))
	}
	return st, samples
}

// busyShare is each accelerator's busy time in [start, end) (CLOCK_MONOTONIC ns)
// as a share of its slot time, in percent, from the mock backend's timeline.
func busyShare(jobs []mockbackend.Job, mono func(time.Time) int64, start, end int64, accels []config.Accelerator) map[string]float64 {
	busy := map[string]int64{}
	for _, j := range jobs {
		if s, e := max(mono(j.Start), start), min(mono(j.End), end); e > s {
			busy[j.Accelerator] += e - s
		}
	}
	out := map[string]float64{}
	for _, a := range accels {
		if end > start && a.Slots > 0 {
			out[a.Name] = 100 * float64(busy[a.Name]) / float64((end-start)*int64(a.Slots))
		}
	}
	return out
}

func idleQuantiles(d []time.Duration) (n int, p50, p90 float64) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	us := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))]) / float64(time.Microsecond) }
	return len(s), us(0.5), us(0.9)
}
