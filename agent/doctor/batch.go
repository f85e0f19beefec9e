package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vig-edge/vig/agent/sched"
)

// batchPrior is the scheduler's own prior for a batch of n rows.
func batchPrior(spec sched.ModelSpec, n int) int64 { return int64(sched.BatchPrior(spec, n)) }

// batchJob is what the streams of one model that vig batches cost per period:
// one frame per stream and period, merged into as few batches as max_batch
// allows.
type batchJob struct {
	model   string
	streams []string
	rows    int   // frames per period: one per stream
	jobs    int   // batches per period: ⌈rows / max_batch⌉
	cost    int64 // ns per period: jobs × C(⌈rows / jobs⌉)
	one     int64 // ns per period with one frame per job: rows × C(1)
	period  int64 // the shortest period among the streams, ns
}

// batches returns the jobs of the batched models over the streams of class ≤
// upTo (0 protected, 1 with high, 2 all), in model order.
func (g group) batches(upTo int) []batchJob {
	var out []batchJob
	for _, s := range g.streams {
		if s.batch == 0 || s.class > upTo {
			continue
		}
		i := slices.IndexFunc(out, func(b batchJob) bool { return b.model == s.cfg.Model })
		if i < 0 {
			out = append(out, batchJob{model: s.cfg.Model, period: nanos(s.cfg.PeriodMs)})
			i = len(out) - 1
		}
		b := &out[i]
		b.streams = append(b.streams, s.cfg.Name)
		b.rows++
		b.period = min(b.period, nanos(s.cfg.PeriodMs))
	}
	for i := range out {
		b := &out[i]
		spec := g.models[b.model]
		b.jobs = (b.rows + spec.MaxBatch - 1) / spec.MaxBatch
		per := (b.rows + b.jobs - 1) / b.jobs
		b.cost = int64(b.jobs) * batchPrior(spec, per)
		b.one = int64(b.rows) * batchPrior(spec, 1)
	}
	slices.SortFunc(out, func(a, b batchJob) int { return strings.Compare(a.model, b.model) })
	return out
}

// batchCost is the cost of the job a frame of a batched model's stream runs in
// at worst: the batch of every stream of the model.
func (g group) batchCost(model string) int64 {
	for _, b := range g.batches(2) {
		if b.model == model {
			return b.cost / int64(b.jobs)
		}
	}
	return 0
}

// batchedUtilization replaces, in the contracted demand per slot (up, uph,
// uall: protected, protected+high, all), the batched streams' frames alone by
// their batches, and reports both in a BATCHING finding per model.
func (g group) batchedUtilization(up, uph, uall float64) (bp, bph, ball float64, fs []Finding) {
	m := float64(g.slots)
	adj := func(u float64, upTo int) float64 {
		for _, s := range g.streams {
			if s.batch > 0 && s.class <= upTo && s.cfg.PeriodMs > 0 {
				u -= float64(s.task.c) / 1e6 / s.cfg.PeriodMs / m
			}
		}
		for _, b := range g.batches(upTo) {
			u += float64(b.cost) / float64(b.period) / m
		}
		return max(u, 0)
	}
	bp, bph, ball = adj(up, 0), adj(uph, 1), adj(uall, 2)
	for _, b := range g.batches(2) {
		spec := g.models[b.model]
		per := (b.rows + b.jobs - 1) / b.jobs
		msg := fmt.Sprintf("vig batches %s's %d streams (%s): %d batch%s of %d per %s ms cost %s ms instead of %d × %s ms one frame per job; contracted demand per slot protected %s → %s, protected+high %s → %s, all %s → %s",
			b.model, b.rows, strings.Join(b.streams, ", "), b.jobs, pluralEs(b.jobs), per, fmtNum(msf(b.period)),
			ms(b.cost), b.rows, ms(b.one/int64(b.rows)), pct(up), pct(bp), pct(uph), pct(bph), pct(uall), pct(ball))
		sev := Info
		switch {
		case bph <= 1 && uph > 1:
			msg += ": feasible only batched"
		case bph > 1:
			sev = Warning
			msg += ": overbooked even batched"
		}
		src := "batch_exec_ms"
		if len(spec.BatchExec) == 0 {
			src = "exec_ms × (1 + 0.5·(b−1)), vig's prior without batch_exec_ms; give batch_exec_ms for a sharper analysis"
		}
		fs = append(fs, Finding{
			Code: CodeBatching, Severity: sev, Message: msg,
			Numbers: map[string]float64{"rows": float64(b.rows), "batches": float64(b.jobs), "batch_ms": msf(b.cost / int64(b.jobs)),
				"u_protected_high_batched": round3(bph), "u_protected_high_unbatched": round3(uph), "max_batch": float64(spec.MaxBatch)},
			Formula: fmt.Sprintf("U = Σ_batched ⌈n/max_batch⌉·C(⌈n/⌈n/max_batch⌉⌉)/T_min + Σ_other C_i/T_i ÷ slots; C(b) from %s", src),
		})
	}
	return bp, bph, ball, fs
}

func pluralEs(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}

// frameInterval is the shortest frame interval among the streams of model, ns.
func (g group) frameInterval(model string) int64 {
	t := int64(horizon)
	for _, s := range g.streams {
		if s.cfg.Model == model {
			t = min(t, s.task.t)
		}
	}
	return t
}
