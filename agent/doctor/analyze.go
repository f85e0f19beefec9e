package doctor

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
)

// stream is a configured stream with the numbers the analysis uses.
type stream struct {
	cfg   config.Stream
	task  task
	class int // 0 protected, 1 high, 2 best_effort
	// batch is the model's max_batch when vig batches the model's frames
	// (max_batch > 1 in the config), else 0.
	batch int
	// logical is the logical model the stream names when cfg.Model is the
	// variant the analysis placed it on.
	logical string
}

// group is the set of streams that share an accelerator's slots, in priority
// order: the backend's with backend.slots, one per declared accelerator.
type group struct {
	slots   int
	accel   string // the accelerator's name; "" for backend.slots
	named   bool   // accelerators are declared: remedies name accelerators.<accel>
	streams []stream
	models  map[string]sched.ModelSpec // the models vig batches, by name
	// factor is the interference factor its jobs' exec_ms are multiplied
	// by (1: none): another accelerator runs work beside it.
	factor float64
	l      *layout
}

// slotsKey is the config setting that gives the group n slots.
func (g group) slotsKey(n int) string {
	if g.named {
		return fmt.Sprintf("accelerators: {%s: %d}", g.accel, n)
	}
	return fmt.Sprintf("backend.slots: %d", n)
}

// moreSlots is the remedy that gives the group n slots, followed by tail, or,
// when the device has fewer, why that is no remedy.
func (g group) moreSlots(n int, tail string) string {
	var p *Profile
	if g.l != nil {
		p = g.l.profile
	}
	if lim, why := slotLimit(g.accel, p); g.named && why != "" && n > lim {
		return fmt.Sprintf("not %s: %s", g.slotsKey(n), why)
	}
	return g.slotsKey(n) + tail
}

func classRank(c string) int {
	switch c {
	case config.ClassProtected:
		return 0
	case config.ClassHigh:
		return 1
	}
	return 2
}

func newGroup(c *config.Config, l *layout) group {
	return newAccelGroup(c, l, AcceleratorSlots{Slots: max(c.Backend.Slots, 1)}, nil, 1)
}

// placed is where the analysis runs a stream's frames: its model's
// accelerator, or, for a logical model, one of its variants.
type placed struct {
	accel, model string
}

// newAccelGroup is the group of the streams placed on accelerator a (all of
// them when at is nil), their exec_ms times factor.
func newAccelGroup(c *config.Config, l *layout, a AcceleratorSlots, at map[string]placed, factor float64) group {
	g := group{slots: max(a.Slots, 1), accel: a.Name, named: at != nil, models: map[string]sched.ModelSpec{}, factor: max(factor, 1), l: l}
	for _, s := range c.Streams {
		model := s.Model
		if at != nil {
			p, ok := at[s.Name]
			if !ok || p.accel != a.Name {
				continue
			}
			model = p.model
		}
		logical := ""
		if model != s.Model {
			logical, s.Model = s.Model, model
		}
		m := c.Models[model]
		batch := 0
		if m.MaxBatch != nil && *m.MaxBatch > 1 {
			batch = *m.MaxBatch
			costs := m.BatchCosts()
			for k := range costs {
				costs[k].Exec = time.Duration(float64(costs[k].Exec) * g.factor)
			}
			g.models[model] = sched.ModelSpec{Name: model, Exec: time.Duration(float64(m.Exec()) * g.factor), MaxBatch: batch, BatchExec: costs}
		}
		frame := s.FrameIntervalMs
		if frame <= 0 {
			frame = s.PeriodMs
		}
		g.streams = append(g.streams, stream{
			cfg:     s,
			logical: logical,
			batch:   batch,
			class:   classRank(s.Class),
			task: task{
				name:  s.Name,
				c:     clamp(nanos(m.ExecMs*g.factor), 1, horizon),
				t:     clamp(nanos(frame), minInterval, horizon),
				d:     clamp(nanos(s.MaxAgeMs), 1, horizon),
				alone: !m.RunsBeside(),
			},
		})
	}
	// Class, then deadline-monotonic inside a class (see the package comment).
	slices.SortStableFunc(g.streams, func(a, b stream) int {
		return cmp.Or(cmp.Compare(a.class, b.class), cmp.Compare(a.cfg.MaxAgeMs, b.cfg.MaxAgeMs),
			cmp.Compare(a.cfg.PeriodMs, b.cfg.PeriodMs), cmp.Compare(a.cfg.Name, b.cfg.Name))
	})
	return g
}

// Analyze runs the static analysis over a config that config.Parse accepted and
// returns its findings, worst first. It is pure: no I/O, no clock.
//
// With accelerators declared (or derived from the server), each is analysed
// on its own (its slots, the streams whose models run there: a job on one
// never blocks another's), and every finding names its accelerator. Remedies
// keep to the limits every device shares (a DLA core runs one engine at a
// time; no Jetson has more than two DLA cores); AnalyzeFor knows the device.
func Analyze(c *config.Config) []Finding { return analyze(c, layoutOf(c, nil)) }

// AnalyzeFor is Analyze for a known device: remedies stay within its
// accelerators, and accelerators it does not have are errors.
func AnalyzeFor(c *config.Config, p *Profile) []Finding { return analyze(c, layoutOf(c, p)) }

func analyze(c *config.Config, l *layout) []Finding {
	if !l.named() {
		return analyzeGroup(newGroup(c, l))
	}
	fs := deviceLimits(l)
	at := l.place(c)
	for _, s := range c.Streams {
		if _, ok := at[s.Name]; !ok {
			fs = append(fs, Finding{Code: CodeStreamUnplaced, Severity: Warning, Stream: s.Name, Line: s.Line,
				Message: fmt.Sprintf("%s names model %s, which runs on no accelerator of the layout: doctor cannot analyse it", s.Name, s.Model),
				Remedy:  []string{fmt.Sprintf("give %s on: (one of the accelerators), or variants that have one", s.Model)}})
		}
	}
	busy := map[string]bool{}
	for _, p := range at {
		busy[p.accel] = true
	}
	l.groups = nil
	for _, a := range l.accels {
		f := 1.0
		if a.Interference > 1 && len(busy) > 1 {
			f = a.Interference // another accelerator runs beside this one
		}
		if g := newAccelGroup(c, l, a, at, f); len(g.streams) > 0 {
			l.groups = append(l.groups, g)
		}
	}
	for _, g := range l.groups {
		gfs := analyzeGroup(g)
		if g.factor > 1 {
			gfs = append(gfs, g.interference(c, at, gfs)...)
		}
		for _, f := range gfs {
			f.Accelerator = g.accel
			if len(l.accels) > 1 {
				f.Message = g.accel + ": " + f.Message
			}
			fs = append(fs, f)
		}
	}
	sortFindings(fs)
	return fs
}

func analyzeGroup(g group) []Finding {
	var fs []Finding
	overbooked, u := g.utilization()
	fs = append(fs, u...)
	fs = append(fs, g.instances()...)
	fs = append(fs, g.sensorRate()...)
	fs = append(fs, g.frameSlowerThanPeriod()...)
	if !overbooked {
		// With U > 1 no schedule exists; response times would only repeat that.
		fs = append(fs, g.responseTimes()...)
		fs = append(fs, g.budgetBlocksHigh()...)
	}
	fs = append(fs, g.starvation()...)
	sortFindings(fs)
	return fs
}

// ConfigFindings turns the error of config.Parse into CONFIG_INVALID findings, one
// per problem, each with its file:line.
func ConfigFindings(err error) []Finding {
	if err == nil {
		return nil
	}
	var fs []Finding
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		f := Finding{Code: CodeConfigInvalid, Severity: Error, Message: err.Error(),
			Remedy: []string{"fix the key at the line shown; `vig doctor -c FILE` re-checks it"}}
		var ce *config.Error
		if errors.As(err, &ce) {
			f.Line = ce.Line
		}
		fs = append(fs, f)
	}
	walk(err)
	return fs
}

// utilization reports the contracted demand per slot and says whether the protected
// contracts alone exceed the slots.
func (g group) utilization() (overbooked bool, fs []Finding) {
	var up, uph, uall float64
	var terms []string
	for _, s := range g.streams {
		u := s.cfg.PeriodMs
		if u <= 0 {
			continue
		}
		u = float64(s.task.c) / 1e6 / u
		switch s.class {
		case 0:
			up += u
			uph += u
			terms = append(terms, fmt.Sprintf("%s/%s", ms(s.task.c), fmtNum(s.cfg.PeriodMs)))
		case 1:
			uph += u
		}
		uall += u
	}
	m := float64(g.slots)
	up, uph, uall = up/m, uph/m, uall/m
	nums := map[string]float64{"slots": m, "u_protected": round3(up), "u_protected_high": round3(uph), "u_all": round3(uall)}
	fs = append(fs, Finding{
		Code: CodeUtilization, Severity: Info, Numbers: nums,
		Message: fmt.Sprintf("contracted demand per slot (%d slot%s): protected %s, protected+high %s, all streams %s",
			g.slots, plural(g.slots), pct(up), pct(uph), pct(uall)),
		Formula: "U = Σ C_i/T_i ÷ slots, C = exec_ms of the stream's model, T = period_ms",
	})
	if g.factor > 1 {
		u := &fs[len(fs)-1]
		u.Numbers["interference"] = g.factor
		u.Message += fmt.Sprintf(" (exec_ms × %s: interference while another accelerator runs)", fmtNum(g.factor))
		u.Formula += fmt.Sprintf("; C × %s (interference)", fmtNum(g.factor))
	}
	if len(g.models) > 0 {
		// vig batches these models: their streams' demand is what their
		// batches cost, and that is what must fit.
		bp, bph, ball, f := g.batchedUtilization(up, uph, uall)
		fs = append(fs, f...)
		up, uph, uall = bp, bph, ball
		nums = map[string]float64{"slots": m, "u_protected": round3(up), "u_protected_high": round3(uph), "u_all": round3(uall)}
		terms = terms[:0]
		for _, s := range g.streams {
			if s.class == 0 && s.batch == 0 {
				terms = append(terms, fmt.Sprintf("%s/%s", ms(s.task.c), fmtNum(s.cfg.PeriodMs)))
			}
		}
		for _, b := range g.batches(0) {
			terms = append(terms, fmt.Sprintf("%s/%s", ms(b.cost), fmtNum(msf(b.period))))
		}
	}
	if up > 1 {
		overbooked = true
		fs = append(fs, Finding{
			Code: CodeProtectedUnsched, Severity: Error, Numbers: nums,
			Message: fmt.Sprintf("protected contracts need %s of %d slot%s: no schedule gives every protected stream a fresh result every period",
				pct(up), g.slots, plural(g.slots)),
			Formula: fmt.Sprintf("U = Σ_protected C_i/T_i ÷ slots = (%s) ÷ %d = %.3f > 1", strings.Join(terms, " + "), g.slots, up),
			Remedy: []string{
				g.moreSlots(int(math.Ceil(up*m)), ", if the accelerator runs that many jobs side by side"),
				"lengthen period_ms of a protected stream, or move one to class: high",
				"use faster models (exec_ms) for the protected streams",
			},
		})
		fs[len(fs)-1].Remedy = append(fs[len(fs)-1].Remedy, g.moves(0)...)
	}
	if uph > 1 {
		fs = append(fs, Finding{
			Code: CodeHighOverbooked, Severity: Warning, Numbers: nums,
			Message: fmt.Sprintf("protected and high contracts together need %s of %d slot%s: high streams will miss windows whenever the protected ones run",
				pct(uph), g.slots, plural(g.slots)),
			Formula: "U = Σ_{protected,high} C_i/T_i ÷ slots > 1",
			Remedy:  append([]string{"lengthen period_ms of high streams, or move one to best_effort", g.addSlot()}, g.moves(1)...),
		})
	}
	return overbooked, fs
}

// instances checks the models whose instances bound them below the
// accelerator's slots: their streams' contracts must fit in that many jobs
// at once, whatever the other slots do.
func (g group) instances() []Finding {
	if g.l == nil {
		return nil
	}
	type need struct {
		u, up float64
		names []string
	}
	needs := map[string]*need{}
	var order []string
	for _, s := range g.streams {
		k := g.l.models[s.cfg.Model].Instances
		if k <= 0 || k >= g.slots || s.cfg.PeriodMs <= 0 || s.class > 1 {
			continue
		}
		n := needs[s.cfg.Model]
		if n == nil {
			n = &need{}
			needs[s.cfg.Model] = n
			order = append(order, s.cfg.Model)
		}
		u := float64(s.task.c) / 1e6 / s.cfg.PeriodMs
		n.u += u
		if s.class == 0 {
			n.up += u
		}
		n.names = append(n.names, s.cfg.Name)
	}
	var fs []Finding
	for _, m := range order {
		n, k := needs[m], g.l.models[m].Instances
		if n.u <= float64(k) {
			continue
		}
		sev := Warning
		if n.up > float64(k) {
			sev = Error
		}
		fs = append(fs, Finding{
			Code: CodeInstancesOverbooked, Severity: sev,
			Message: fmt.Sprintf("model %s runs at most %d job%s at once (instances), but the protected and high contracts of %s need %s of that: their frames queue behind each other whatever the accelerator's %d slots do",
				m, k, plural(k), strings.Join(n.names, ", "), pct(n.u/float64(k)), g.slots),
			Numbers: map[string]float64{"instances": float64(k), "slots": float64(g.slots), "u_model": round3(n.u)},
			Formula: "Σ_{streams of the model} C_i/T_i ≤ instances",
			Remedy: []string{
				fmt.Sprintf("more instances of %s (instance_group count: %d in its config.pbtxt, or instances: %d), if the accelerator runs them side by side", m, int(math.Ceil(n.u)), int(math.Ceil(n.u))),
				fmt.Sprintf("or a variant of %s on another accelerator", m),
				"or lengthen period_ms of its streams",
			},
		})
	}
	return fs
}

// sensorRate compares what the sensors send with what the slots can run.
func (g group) sensorRate() []Finding {
	var demand, contract float64
	var fifo []string
	for _, s := range g.streams {
		demand += float64(s.task.c) / float64(s.task.t)
		if s.cfg.PeriodMs > 0 && s.class < 2 {
			contract += float64(s.task.c) / 1e6 / s.cfg.PeriodMs
		}
		if s.cfg.Queue == config.QueueFIFO {
			fifo = append(fifo, s.cfg.Name)
		}
	}
	demand /= float64(g.slots)
	contract /= float64(g.slots)
	if len(g.models) > 0 {
		// Batched models: their frames cost what their batches do.
		for _, s := range g.streams {
			if s.batch > 0 {
				demand -= float64(s.task.c) / float64(s.task.t) / float64(g.slots)
			}
		}
		for _, b := range g.batches(2) {
			demand += float64(b.cost) / float64(g.frameInterval(b.model)) / float64(g.slots)
		}
		_, contract, _, _ = g.batchedUtilization(0, contract, 0)
	}
	if demand <= 1 {
		return nil
	}
	msg := fmt.Sprintf("the sensors send %s of what %d slot%s can run (the protected and high contracts need %s): vig will supersede frames — a latest queue answers an older waiting frame ABORTED when a newer one arrives — and runs only frames that can still be fresh",
		pct(demand), g.slots, plural(g.slots), pct(contract))
	if len(fifo) > 0 {
		msg += fmt.Sprintf("; fifo streams (%s) will fill and answer RESOURCE_EXHAUSTED", strings.Join(fifo, ", "))
	}
	return []Finding{{
		Code: CodeSensorRateExceeds, Severity: Warning, Message: msg,
		Numbers: map[string]float64{"frame_demand": round3(demand), "contract_demand": round3(contract), "slots": float64(g.slots)},
		Formula: "per-frame demand = Σ C_i/frame_interval_i ÷ slots > 1",
		Remedy: []string{
			"nothing is required: this is what latest queues are for",
			"to save sensor and transport work, lower the sensors' rate towards period_ms",
		},
	}}
}

// frameSlowerThanPeriod flags sensors that send less often than their coverage
// window: some windows can then never hold a result.
func (g group) frameSlowerThanPeriod() []Finding {
	var fs []Finding
	for _, s := range g.streams {
		if s.cfg.FrameIntervalMs <= s.cfg.PeriodMs || s.cfg.PeriodMs <= 0 {
			continue
		}
		cov := s.cfg.PeriodMs / s.cfg.FrameIntervalMs
		fs = append(fs, Finding{
			Code: CodeFrameSlowerThanPeriod, Severity: Warning, Stream: s.cfg.Name, Line: s.cfg.Line,
			Message: fmt.Sprintf("%s sends a frame every %s ms but its period is %s ms: at most %s of its windows can hold a result",
				s.cfg.Name, fmtNum(s.cfg.FrameIntervalMs), fmtNum(s.cfg.PeriodMs), pct(cov)),
			Numbers: map[string]float64{"frame_interval_ms": s.cfg.FrameIntervalMs, "period_ms": s.cfg.PeriodMs, "max_coverage": round3(cov)},
			Formula: "coverage ≤ period/frame_interval",
			Remedy:  []string{fmt.Sprintf("period_ms: %s on %s (or make the sensor faster)", fmtNum(s.cfg.FrameIntervalMs), s.cfg.Name)},
		})
	}
	return fs
}

// rtaFormula is the formula shown with response-time findings.
func (g group) rtaFormula() string {
	f := "R(q) = w(q) − q·T + C with w(q) = B + q·C + Σ_hp (⌊w/T_j⌋+1)·C_j, for every job q < ⌈t/T⌉ of the busy period t = B + Σ_hep ⌈t/T_j⌉·C_j; B = longest lower-priority job; T = frame interval; fresh iff max_q R(q) ≤ max_age"
	if g.slots > 1 {
		f += fmt.Sprintf("; %d slots (approximation, not a proven bound): B = the %s longest lower-priority job (a model with corun: false blocks for its whole length), queued work ÷ %d", g.slots, ordinal(g.slots), g.slots)
	}
	return f
}

// responseTimes runs the response-time analysis for every protected stream.
func (g group) responseTimes() []Finding {
	var fs []Finding
	for k, s := range g.streams {
		if s.class != 0 {
			break
		}
		i := s.task
		hpS, lower := g.streams[:k], g.streams[k+1:]
		if s.batch > 0 {
			// Its frame runs in its model's batch, at worst of every
			// stream of the model: that batch is its job, and the other
			// streams of the model ride in it rather than before or
			// after it.
			i.c = g.batchCost(s.cfg.Model)
			s.task = i
			hpS, lower = othersThan(hpS, s.cfg.Model), othersThan(lower, s.cfg.Model)
		}
		hp := tasks(hpS)
		b := blocking(i, tasks(lower), g.slots)
		a := responseTime(i, hp, b, g.slots)
		if a.unbounded {
			fs = append(fs, Finding{
				Code: CodeProtectedUnsched, Severity: Error, Stream: s.cfg.Name, Line: s.cfg.Line,
				Message: fmt.Sprintf("%s and the protected streams before it arrive faster than %d slot%s can run them (at their frame intervals): its busy period never ends",
					s.cfg.Name, g.slots, plural(g.slots)),
				Formula: "Σ_{hep} C_j/frame_interval_j ≥ slots",
				Remedy:  []string{"lower the protected sensors' frame rate, lengthen their periods, or add a slot"},
			})
			continue
		}
		fs = append(fs, g.guarantee(s, hp)...)
		nums := map[string]float64{
			"r_ms": msf(a.maxR()), "r_first_ms": msf(a.r[0]), "max_age_ms": s.cfg.MaxAgeMs,
			"blocking_ms": msf(b), "busy_period_ms": msf(a.busy), "jobs": float64(len(a.r)), "worst_job": float64(a.worst),
		}
		if a.maxR() <= i.d {
			fs = append(fs, Finding{
				Code: CodeResponseTime, Severity: Info, Stream: s.cfg.Name, Numbers: nums, Formula: g.rtaFormula(),
				Message: fmt.Sprintf("%s: worst response %s ms ≤ max_age %s ms (blocking %s ms, busy period %s ms, %d job%s checked)",
					s.cfg.Name, ms(a.maxR()), fmtNum(s.cfg.MaxAgeMs), ms(b), ms(a.busy), len(a.r), plural(len(a.r))),
			})
			continue
		}
		later := ""
		if a.worst > 0 {
			later = fmt.Sprintf(" (job %d of the %s ms busy period; the first job's response is %s ms)", a.worst, ms(a.busy), ms(a.r[0]))
		}
		tol := tolerableBlocking(i, hp, b, g.slots)
		if tol < 0 {
			fs = append(fs, Finding{
				Code: CodeProtectedUnsched, Severity: Error, Stream: s.cfg.Name, Line: s.cfg.Line, Numbers: nums, Formula: g.rtaFormula(),
				Message: fmt.Sprintf("%s misses max_age %s ms even without blocking: worst response %s ms%s, from the higher-priority protected streams and its own earlier frames",
					s.cfg.Name, fmtNum(s.cfg.MaxAgeMs), ms(a.maxR()), later),
				Remedy: []string{
					fmt.Sprintf("max_age_ms: %s on %s", ceilMs(a.maxR()), s.cfg.Name),
					"lengthen the periods or frame intervals of the protected streams, or add a slot",
				},
			})
			continue
		}
		fs = append(fs, g.blockedFinding(s, hp, lower, a, b, tol, nums, later))
	}
	return fs
}

// guaranteeFormula states what vig promises a protected stream (agent/sched's
// admission under the laxity order).
const guaranteeFormula = "T_f = min(a_f + max_age, end of the window f covers); a high or best_effort job J starts, or is committed behind a running job, only if every protected frame f (waiting, or predicted at a_f = last capture + k·frame_interval) still has start_f(with J) + C_f ≤ T_f, jobs at the backend ending at their predicted ends (C = estimate × safety margin); so lower classes add no blocking and a protected stream keeps every window iff R⁰ = C_i + Σ_{protected j before i} ⌈R⁰/T_j⌉·C_j ≤ min(max_age_i, period_i − φ_i), φ_i = how far into its window a frame is captured"

// guarantee says what vig's admission promises a protected stream: not to run
// first, but never to lose a frame's window or deadline to a lower class. It
// holds when the protected streams alone meet it (R⁰, no blocking term); frames
// captured later than period − R⁰ into their window can still miss that window
// (they are fresh, in the next one).
func (g group) guarantee(s stream, hp []task) []Finding {
	a := responseTime(s.task, hp, 0, g.slots)
	if a.unbounded || a.maxR() > s.task.d {
		return nil // PROTECTED_WORKLOAD_UNSCHEDULABLE says why
	}
	r0 := a.maxR()
	p := int64(math.Round(s.cfg.PeriodMs * 1e6))
	nums := map[string]float64{"r0_ms": msf(r0), "max_age_ms": s.cfg.MaxAgeMs, "period_ms": s.cfg.PeriodMs,
		"latest_capture_phase_ms": msf(max(p-r0, 0))}
	f := Finding{Code: CodeProtectedGuarantee, Severity: Info, Stream: s.cfg.Name, Numbers: nums, Formula: guaranteeFormula}
	if r0 > p {
		f.Severity = Warning
		f.Line = s.cfg.Line
		f.Message = fmt.Sprintf("%s: its protected work alone takes R⁰ = %s ms, longer than its %s ms window: results stay fresh (≤ max_age %s ms) but land in the next window, and windows go empty",
			s.cfg.Name, ms(r0), fmtNum(s.cfg.PeriodMs), fmtNum(s.cfg.MaxAgeMs))
		f.Remedy = []string{fmt.Sprintf("period_ms: %s on %s, or a faster model", ceilMs(r0), s.cfg.Name)}
		return []Finding{f}
	}
	f.Message = fmt.Sprintf("%s is guaranteed, not first: vig runs a high or best_effort job before it only when each of its frames still completes by min(capture + %s ms, its window's end); its protected work alone takes R⁰ = %s ms, so every frame captured up to %s ms into its %s ms window keeps that window",
		s.cfg.Name, fmtNum(s.cfg.MaxAgeMs), ms(r0), ms(max(p-r0, 0)), fmtNum(s.cfg.PeriodMs))
	return []Finding{f}
}

// blockedFinding describes a protected stream that misses because of non-preemptive
// lower-priority jobs, names them and prices the remedies.
func (g group) blockedFinding(s stream, hp []task, lower []stream, a rta, b, tol int64, nums map[string]float64, later string) Finding {
	i := s.task
	nums["tolerable_blocking_ms"] = msf(tol)
	f := Finding{
		Code: CodeLongJobBlocks, Severity: Warning, Stream: s.cfg.Name, Line: s.cfg.Line, Numbers: nums, Formula: g.rtaFormula(),
	}
	var names, desc []string
	allAlone := true
	for _, l := range lower {
		if l.task.c <= tol {
			continue
		}
		names = append(names, l.cfg.Name)
		desc = append(desc, fmt.Sprintf("%s (%s ms, %s)", l.cfg.Name, ms(l.task.c), l.cfg.Class))
		allAlone = allAlone && l.task.alone
		if l.class < 2 {
			// vig's admission would defer the blocker to keep the protected stream
			// fresh, so a contract breaks either way.
			f.Severity = Error
		}
	}
	f.Blockers = names
	r0 := responseTime(i, hp, 0, g.slots).maxR()
	f.Message = fmt.Sprintf("%s can miss max_age %s ms: worst response %s ms%s, because %s cannot be preempted; without blocking it is %s ms, and %s tolerates at most %s ms of blocking",
		s.cfg.Name, fmtNum(s.cfg.MaxAgeMs), ms(a.maxR()), later, strings.Join(desc, ", "), ms(r0), s.cfg.Name, ms(tol))
	if f.Severity == Warning {
		f.Message += fmt.Sprintf(". vig's admission defers %s to keep %s fresh", strings.Join(names, ", "), s.cfg.Name)
	}

	// Remedy 1: one more slot.
	switch {
	case i.alone:
		f.Remedy = append(f.Remedy, fmt.Sprintf("another slot does not help: %s's model runs alone (corun: false)", s.cfg.Name))
	case allAlone:
		f.Remedy = append(f.Remedy, fmt.Sprintf("another slot does not help: %s run%s alone (corun: false)", strings.Join(names, ", "), pluralVerb(len(names))))
	default:
		m := g.slots + 1
		a2 := responseTime(i, hp, blocking(i, tasks(lower), m), m)
		if more := g.moreSlots(m, ""); more != g.slotsKey(m) {
			f.Remedy = append(f.Remedy, more)
		} else if !a2.unbounded && a2.maxR() <= i.d {
			f.Remedy = append(f.Remedy, fmt.Sprintf("%s, if the accelerator runs %d jobs side by side (worst response then ≈ %s ms)", g.slotsKey(m), m, ms(a2.maxR())))
		} else {
			f.Remedy = append(f.Remedy, fmt.Sprintf("%s is not enough on its own", g.slotsKey(m)))
		}
	}
	// Remedy 2: a freshness bound the schedule can keep.
	f.Remedy = append(f.Remedy, fmt.Sprintf("max_age_ms: %s on %s (its worst response time)", ceilMs(a.maxR()), s.cfg.Name))
	// Remedy 3: a budgeted minimum rate for a best-effort blocker, with its price.
	perSec := 1e9 / float64(i.t)
	for _, l := range lower {
		if l.task.c <= tol || l.class != 2 {
			continue
		}
		late := lateFramesPerRun(l.task.c, i)
		rate := l.cfg.MinRateHz
		if rate > 0 {
			f.Remedy = append(f.Remedy, fmt.Sprintf("%s has min_rate_hz %s: each of its runs makes ≤ %d %s result%s late, ≤ %s of %s results/s (%s) — accepted by this config",
				l.cfg.Name, fmtNum(rate), late, s.cfg.Name, plural(int(late)), fmtNum(round3(rate*float64(late))), fmtNum(math.Round(perSec*10)/10), pct(rate*float64(late)/perSec)))
			continue
		}
		rate = suggestedRate(l.cfg)
		f.Remedy = append(f.Remedy, fmt.Sprintf("min_rate_hz: %s on %s runs it anyway at a price: each run makes ≤ %d %s result%s late, ≤ %s of %s results/s (%s)",
			fmtNum(rate), l.cfg.Name, late, s.cfg.Name, plural(int(late)), fmtNum(round3(rate*float64(late))), fmtNum(math.Round(perSec*10)/10), pct(rate*float64(late)/perSec)))
	}
	return f
}

// budgetBlocksHigh prices what a budgeted best_effort job costs the high streams
// of its accelerator. vig admits a best_effort job only if no protected or high
// frame misses for it, so a long one runs only on its min_rate_hz budget; each such
// run holds the slots it needs for its whole length, and a high stream whose
// response time then exceeds its max_age gets no result while it runs: about
// ⌈C/period⌉ of its windows per run. Blockers without a budget are starved
// instead (STREAM_STARVES, or they never block: admission defers them).
func (g group) budgetBlocksHigh() []Finding {
	var fs []Finding
	for _, l := range g.streams {
		if l.class != 2 || l.cfg.MinRateHz <= 0 {
			continue
		}
		var names, parts []string
		nums := map[string]float64{"exec_ms": msf(l.task.c), "min_rate_hz": l.cfg.MinRateHz}
		worst := 0.0
		for k, s := range g.streams {
			if s.class != 1 {
				continue
			}
			i := s.task
			hp := tasks(g.streams[:k])
			if a := responseTime(i, hp, blocking(i, []task{l.task}, g.slots), g.slots); !a.unbounded && a.maxR() <= i.d {
				continue
			}
			p := nanos(s.cfg.PeriodMs)
			if p <= 0 {
				continue
			}
			win := ceilDiv(l.task.c, p)
			share := l.cfg.MinRateHz * float64(win) * s.cfg.PeriodMs / 1000
			worst = max(worst, share)
			names = append(names, s.cfg.Name)
			parts = append(parts, fmt.Sprintf("%s ≤ %d of its %s ms windows (≤ %d result%s late)", s.cfg.Name, win, fmtNum(s.cfg.PeriodMs),
				lateFramesPerRun(l.task.c, i), plural(int(lateFramesPerRun(l.task.c, i)))))
			nums["windows_per_run_"+s.cfg.Name] = float64(win)
			nums["window_share_"+s.cfg.Name] = round3(share)
		}
		if len(names) == 0 {
			continue
		}
		f := Finding{
			Code: CodeLongJobBlocksHigh, Severity: Warning, Stream: l.cfg.Name, Line: l.cfg.Line, Blockers: []string{l.cfg.Name}, Numbers: nums,
			Message: fmt.Sprintf("%s (%s ms, best_effort) cannot be preempted and blocks %s: vig runs it only on its budget (min_rate_hz %s), and each run costs %s; at %s runs/s that is at most %s of those windows — accepted by this config",
				l.cfg.Name, ms(l.task.c), strings.Join(names, " and "), fmtNum(l.cfg.MinRateHz), strings.Join(parts, ", "),
				fmtNum(l.cfg.MinRateHz), pct(worst)),
			Formula: "windows lost per run ≈ ⌈C_blocker/period_i⌉ for each high stream i whose response time with the blocker, R = B + C_i + interference (B = C_blocker), exceeds max_age_i; share = min_rate_hz × windows × period",
			Remedy: []string{
				fmt.Sprintf("pay less: a lower min_rate_hz on %s", l.cfg.Name),
			},
		}
		if moves := texts(g.elsewhere(l, true)); len(moves) > 0 {
			f.Remedy = append(f.Remedy, moves...)
		} else {
			f.Remedy = append(f.Remedy, fmt.Sprintf("or run %s on an accelerator of its own (on: …), if it is built for one", l.cfg.Name))
		}
		if l.task.alone {
			f.Remedy = append(f.Remedy, fmt.Sprintf("another slot does not help: %s runs alone (corun: false)", l.cfg.Name))
		} else {
			f.Remedy = append(f.Remedy, "or "+g.moreSlots(g.slots+1, fmt.Sprintf(", if the accelerator runs %d jobs side by side", g.slots+1)))
		}
		fs = append(fs, f)
	}
	return fs
}

// lateFramesPerRun bounds how many frames of protected task i one run of a blocking
// job of length c makes late: frames that arrive in the first c + C_i − max_age of
// the blocking job cannot complete in time, ⌈(c + C_i − D_i)/T_i⌉ of them at most.
func lateFramesPerRun(c int64, i task) int64 {
	return ceilDiv(c+i.c-i.d, i.t)
}

// suggestedRate proposes a budget of one result every ten periods.
func suggestedRate(s config.Stream) float64 {
	if s.PeriodMs <= 0 {
		return 0.1
	}
	return round3(1000 / (10 * s.PeriodMs))
}

// starvation finds streams that admission would never start. A best_effort
// job starts only if the next frame of every protected and high stream of its
// accelerator still meets its max_age, a high job only if every protected
// one's does; the longest window a guarded stream i ever leaves is
// (T_i − C_i) + (max_age_i − C_i), right after its own job completes, and
// with several guarded streams the window is at most the smallest of theirs.
// A job longer than that never starts.
func (g group) starvation() []Finding {
	var fs []Finding
	for _, s := range g.streams {
		if s.class == 0 || s.cfg.MinRateHz > 0 || (g.slots > 1 && !s.task.alone) {
			continue
		}
		gap, blockers := admissionWindow(g.streams, s.class)
		if len(blockers) == 0 || s.task.c <= gap {
			continue
		}
		by := blockers[0]
		var names []string
		for _, b := range blockers {
			if b.task.t-b.task.c+b.task.d-b.task.c < s.task.c {
				names = append(names, b.cfg.Name)
			}
		}
		guards, unless := "protected", "as configured"
		if s.class == 2 {
			guards, unless = "protected and high", "without min_rate_hz"
		}
		f := Finding{
			Code: CodeStreamStarves, Severity: Warning, Stream: s.cfg.Name, Line: s.cfg.Line, Blockers: names,
			Message: fmt.Sprintf("%s (%s ms, %s) can never be admitted: vig starts its job only if the next frame of every %s stream of the accelerator still meets its max_age, and %s never leave%s more than %s ms; %s %s starves",
				s.cfg.Name, ms(s.task.c), s.cfg.Class, guards, strings.Join(names, " and "), pluralVerb(len(names)), ms(gap), unless, s.cfg.Name),
			Numbers: map[string]float64{"exec_ms": msf(s.task.c), "window_ms": msf(gap)},
			Formula: fmt.Sprintf("admission window ≤ min over guarded i of (T_i − C_i) + (max_age_i − C_i) = (%s − %s) + (%s − %s) = %s ms < C = %s ms (%s)",
				ms(by.task.t), ms(by.task.c), ms(by.task.d), ms(by.task.c), ms(gap), ms(s.task.c), by.cfg.Name),
		}
		if s.class == 2 {
			f.Remedy = append(f.Remedy, g.budgetRemedy(s, blockers))
		} else {
			f.Remedy = append(f.Remedy, fmt.Sprintf("make it best_effort with a budget (class: best_effort, min_rate_hz: %s on %s), or raise the protected streams' max_age", fmtNum(suggestedRate(s.cfg)), s.cfg.Name))
		}
		f.Remedy = append(f.Remedy, texts(g.elsewhere(s, true))...)
		if !s.task.alone {
			f.Remedy = append(f.Remedy, "or give it its own slot: "+g.moreSlots(g.slots+1, ", corun allowed"))
		}
		f.Remedy = append(f.Remedy, fmt.Sprintf("or a model faster than %s ms", ms(gap)))
		fs = append(fs, f)
	}
	return fs
}

// admissionWindow is the longest start window the streams of a class below
// class leave a job (see starvation), and those streams, the one leaving the
// smallest window first. A stream whose own job exceeds its max_age is not
// guarded: admission leaves alone what it cannot keep.
func admissionWindow(ss []stream, class int) (int64, []stream) {
	var guards []stream
	for _, p := range ss {
		if p.class < class && p.task.c <= p.task.d {
			guards = append(guards, p)
		}
	}
	w := func(p stream) int64 { return p.task.t - p.task.c + p.task.d - p.task.c }
	slices.SortStableFunc(guards, func(a, b stream) int { return cmp.Compare(w(a), w(b)) })
	if len(guards) == 0 {
		return math.MaxInt64, nil
	}
	return w(guards[0]), guards
}

// contractDemand is Σ C_i/period_i over the streams, in slots: what their
// contracts need.
func contractDemand(ss []stream) float64 {
	var u float64
	for _, s := range ss {
		if s.cfg.PeriodMs > 0 {
			u += float64(s.task.c) / 1e6 / s.cfg.PeriodMs
		}
	}
	return u
}

// budgetRemedy proposes a min_rate_hz for starving best_effort stream s that
// fits in what the streams it waits for leave of the accelerator (all of it
// per run when its model runs alone), priced per run in their results.
func (g group) budgetRemedy(s stream, blockers []stream) string {
	left := float64(g.slots) - contractDemand(blockers)
	per := float64(s.task.c) / 1e9
	if s.task.alone {
		per *= float64(g.slots)
	}
	if left <= 0 {
		return fmt.Sprintf("no budget fits: the streams it waits for need all of the accelerator's %d slot%s", g.slots, plural(g.slots))
	}
	maxRate := math.Floor(left/per*1000) / 1000
	rate := min(suggestedRate(s.cfg), maxRate)
	if rate <= 0 {
		return fmt.Sprintf("no budget fits: the streams it waits for leave %s of the accelerator, less than one %s ms run per 1000 s", pct(left/float64(g.slots)), ms(s.task.c))
	}
	var price []string
	for _, b := range blockers {
		if n := lateFramesPerRun(s.task.c, b.task); n > 0 {
			price = append(price, fmt.Sprintf("≤ %d %s result%s late", n, b.cfg.Name, plural(int(n))))
		}
	}
	msg := fmt.Sprintf("budget it: min_rate_hz: %s on %s (one result every %s s; it fits: the streams it waits for leave %s of the accelerator, each run takes %s ms",
		fmtNum(rate), s.cfg.Name, fmtNum(round3(1/rate)), pct(left/float64(g.slots)), ms(s.task.c))
	if len(price) > 0 {
		msg += ", and makes " + strings.Join(price, ", ")
	}
	return msg + ")"
}

// moves suggests moving a stream of class off an overbooked accelerator,
// the least urgent first, to each accelerator with room for it: a variant
// of its model there, or the model itself if it is built for it.
func (g group) moves(class int) []string {
	var out []string
	taken := map[string]bool{}
	for k := len(g.streams) - 1; k >= 0; k-- {
		s := g.streams[k]
		if s.class != class {
			continue
		}
		for _, m := range g.elsewhere(s, false) {
			if to := m.to; !taken[to] {
				taken[to] = true
				out = append(out, m.text)
			}
		}
	}
	return out
}

// addSlot is the remedy of one more slot, or why the device has none.
func (g group) addSlot() string {
	if more := g.moreSlots(g.slots+1, ""); more != g.slotsKey(g.slots+1) {
		return more
	}
	return "add a slot (" + g.slotsKey(g.slots+1) + ")"
}

// uAll is the contracted demand per slot of every stream of the group.
func (g group) uAll() float64 { return contractDemand(g.streams) / float64(g.slots) }

// move is a remedy that moves a stream to accelerator to.
type move struct{ to, text string }

func texts(ms []move) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.text)
	}
	return out
}

// elsewhere suggests another accelerator with room for stream s: one of its
// model's variants that runs there, or its model itself if it is built for
// it. admit also asks that admission would start s's job there.
func (g group) elsewhere(s stream, admit bool) []move {
	if g.l == nil || !g.named {
		return nil
	}
	var out []move
	model := s.logical
	if model == "" {
		model = s.cfg.Model
	}
	variants := g.l.models[model].Variants
	for _, a := range g.l.accels {
		if a.Name == g.accel {
			continue
		}
		run := model
		if len(variants) > 0 {
			run = ""
			for _, v := range variants {
				if g.l.models[v].Accelerator == a.Name {
					run = v
					break
				}
			}
			if run == "" {
				continue
			}
		}
		o, _ := g.l.group(a.Name)
		if o.l == nil {
			o = group{slots: max(a.Slots, 1), accel: a.Name, named: true, factor: 1, l: g.l}
		}
		factor := 1.0
		if a.Interference > 1 {
			factor = a.Interference
		}
		c := s.task.c
		if em, ok := g.l.exec[run]; ok {
			c = clamp(nanos(em*factor), 1, horizon)
		}
		u := o.uAll() + float64(c)/1e6/max(s.cfg.PeriodMs, 1e-3)/float64(o.slots)
		if u > 1 {
			continue
		}
		why := fmt.Sprintf("%s is at %s of its %d slot%s, with %s at %s", a.Name, pct(o.uAll()), o.slots, plural(o.slots), s.cfg.Name, pct(u))
		if admit && !(o.slots > 1 && !s.task.alone) {
			gap, _ := admissionWindow(o.streams, s.class)
			if c > gap {
				continue
			}
			if gap != math.MaxInt64 {
				why += fmt.Sprintf(", and leaves its %s ms job a %s ms window", ms(c), ms(gap))
			}
		}
		if run != model {
			out = append(out, move{a.Name, fmt.Sprintf("or its variant %s on %s: %s", run, a.Name, why)})
		} else {
			out = append(out, move{a.Name, fmt.Sprintf("or run %s on %s (on: %s), if %s is built for it: %s", s.cfg.Name, a.Name, a.Name, model, why)})
		}
	}
	return out
}

// othersThan returns the streams of ss that do not run model.
func othersThan(ss []stream, model string) []stream {
	var out []stream
	for _, s := range ss {
		if s.cfg.Model != model {
			out = append(out, s)
		}
	}
	return out
}

func tasks(ss []stream) []task {
	ts := make([]task, len(ss))
	for k, s := range ss {
		ts[k] = s.task
	}
	return ts
}

// nanos converts milliseconds; out-of-range values (a hostile config) saturate.
func nanos(ms float64) int64 {
	v := math.Round(ms * 1e6)
	switch {
	case math.IsNaN(v) || v < 0:
		return 0
	case v > math.MaxInt64/2:
		return math.MaxInt64 / 2
	}
	return int64(v)
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

func msf(ns int64) float64 { return math.Round(float64(ns)/1e4) / 100 }

// ms formats nanoseconds as milliseconds with at most two decimals.
func ms(ns int64) string { return fmtNum(msf(ns)) }

// ceilMs rounds nanoseconds up to whole milliseconds.
func ceilMs(ns int64) string { return strconv.FormatInt(ceilDiv(ns, 1e6), 10) }

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func pct(v float64) string { return fmt.Sprintf("%.0f%%", v*100) }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return fmt.Sprintf("%dth", n)
	case n%10 == 1:
		return fmt.Sprintf("%dst", n)
	case n%10 == 2:
		return fmt.Sprintf("%dnd", n)
	case n%10 == 3:
		return fmt.Sprintf("%drd", n)
	}
	return fmt.Sprintf("%dth", n)
}

func pluralVerb(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}
