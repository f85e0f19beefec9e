package sched

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ModelSpec describes a backend model.
type ModelSpec struct {
	Name string
	// Exec is the prior execution time (config exec_ms) that seeds the
	// estimator until measurements replace it.
	Exec time.Duration
	// Exclusive is config `corun: false`: the model runs alone on the
	// accelerator. It starts only when every slot is free and nothing
	// else starts while it runs. The zero value (may co-run) is the
	// config default. With more than one accelerator it runs alone on
	// its own accelerator; the others go on.
	Exclusive bool
	// Accelerator names the accelerator the model runs on (config `on:`),
	// one of Config.Accelerators; empty with one accelerator.
	Accelerator string
	// MaxBatch is the most frames one job of the model may carry (config
	// max_batch, else the server's max_batch_size). 0 or 1: every frame is
	// a job of its own, as before batching existed (see doc.go, Batching).
	MaxBatch int
	// BatchExec seeds the estimate per batch size (config batch_exec_ms):
	// the execution time of a batch of Size frames. Sizes between two
	// given ones are interpolated; without entries the estimator starts
	// from a prior and learns the cost of each size online.
	BatchExec []BatchCost
	// Instances is how many jobs of the model its accelerator may run at
	// once: the count of the server's instance group that binds it there
	// (Triton runs one request per model instance). 0: as many as the
	// accelerator's slots.
	Instances int
	// Variants makes the model a logical one: a frame of it runs as one of
	// these models (the same network built for several accelerators, each
	// a ModelSpec of its own with its Exec and Accelerator, at most one per
	// accelerator), the one whose result lands first unless that accelerator
	// is busy above 85 % of late and another still lands it in time; the
	// Dispatch names it
	// (Action.Model). A logical model has no Exec, Accelerator, batching,
	// Instances or Exclusive of its own (see Variants in doc.go).
	Variants []string
}

// BatchCost is the execution time of a batch of Size frames.
type BatchCost struct {
	Size int
	Exec time.Duration
}

// StreamSpec is one stream's contract.
type StreamSpec struct {
	Name  string
	Model string
	Class Class
	// Period is the result period: the coverage window.
	Period time.Duration
	// MaxAge is the freshness bound: a result older than this (delivery
	// minus capture) is worthless. The deadline of a request is
	// capture + MaxAge.
	MaxAge time.Duration
	// FrameInterval is how often the sensor sends; zero means Period.
	// Admission predicts a protected stream's next frame with it.
	FrameInterval time.Duration
	Queue         QueueKind
	// Capacity bounds a FIFO queue (≥ 1); a Latest queue has capacity 1
	// and Capacity must be 0 or 1.
	Capacity int
	// MinRateHz, for a non-protected stream, is a budget: the stream is
	// started at least this often even when admission would defer it for
	// blocking protected frames. Zero means no budget.
	MinRateHz float64
	// WindowAligned says the stream's coverage grid is told: its windows
	// are [WindowOffset + k·Period, WindowOffset + (k+1)·Period) on the
	// scheduler's clock (config window_offset_ms). Otherwise vig learns
	// the grid: windows start at the stream's first capture (see doc.go).
	WindowAligned bool
	WindowOffset  time.Duration
}

// Order selects how waiting requests are ranked (see doc.go).
type Order uint8

const (
	// OrderLaxity ranks by laxity against the end of each stream's
	// current uncovered window and its freshness deadline; protected
	// streams are guarded by admission rather than always first.
	OrderLaxity Order = iota
	// OrderClassFirst is the earlier rule: class, then earliest
	// deadline. Kept for comparison and as a fallback.
	OrderClassFirst
)

func (o Order) String() string {
	switch o {
	case OrderLaxity:
		return "laxity"
	case OrderClassFirst:
		return "class-first"
	}
	return fmt.Sprintf("Order(%d)", uint8(o))
}

// UnknownPolicy says what happens to a request whose stream is not
// configured.
type UnknownPolicy uint8

const (
	// RejectUnknown answers NotFound.
	RejectUnknown UnknownPolicy = iota
	// DefaultContract serves it under its model's default contract:
	// best_effort, FIFO, no freshness deadline, ordered by Triton
	// `priority` and bounded by Triton `timeout` (see doc.go).
	DefaultContract
)

func (p UnknownPolicy) String() string {
	switch p {
	case RejectUnknown:
		return "reject"
	case DefaultContract:
		return "default"
	}
	return fmt.Sprintf("UnknownPolicy(%d)", uint8(p))
}

// ParseUnknownPolicy parses "reject" or "default".
func ParseUnknownPolicy(s string) (UnknownPolicy, error) {
	switch s {
	case "reject":
		return RejectUnknown, nil
	case "default":
		return DefaultContract, nil
	}
	return 0, fmt.Errorf("unknown stream policy %q (want reject or default)", s)
}

// Config is the scheduler's configuration. Zero values of the optional
// fields select the documented defaults.
type Config struct {
	// Slots is the number of jobs the accelerator runs at once (≥ 1):
	// the shorthand for a device with one accelerator. Zero with
	// Accelerators.
	Slots int
	// Accelerators declares a device with more than one kind of
	// accelerator, each with its own slots and its own queue at the
	// backend; every model names its own (ModelSpec.Accelerator). The
	// scheduler then decides per accelerator (see doc.go).
	Accelerators []AcceleratorSpec
	Models       []ModelSpec
	Streams      []StreamSpec
	// SafetyMargin scales every estimate; required (zero is an error).
	SafetyMargin Margin
	// UnknownStreams selects the policy for unconfigured streams.
	UnknownStreams UnknownPolicy
	// DefaultCapacity bounds each model's default-contract FIFO queue;
	// 0 means 16.
	DefaultCapacity int
	// EstimatorWindow is the number of recent samples per (model,
	// occupancy) the estimate is the p90 of; 0 means 32.
	EstimatorWindow int
	// ProbeAfter is the number of requests of a stream that may be
	// late-dropped on the estimate alone (they would have missed even if
	// started on arrival) since its last dispatch, before one is
	// dispatched anyway to re-measure the model; 0 means 20, negative
	// disables probing.
	ProbeAfter int
	// CoverageSpan is the length of the sliding window of the coverage
	// gauge in Snapshot; 0 means 10 s.
	CoverageSpan time.Duration
	// CaptureSkew is how far in the future a capture time may lie (clock
	// skew between processes) before the request is refused; 0 means 5 ms.
	CaptureSkew time.Duration
	// CaptureHorizon is how old a capture time may be before it is refused
	// as coming from another clock domain rather than merely late;
	// 0 means one hour.
	CaptureHorizon time.Duration
	// Order selects the ranking rule; the zero value is OrderLaxity.
	Order Order
	// NoPipeline turns pipelined dispatch off: a job is then sent only
	// to a free slot, and the accelerator waits for a round trip through
	// vig between jobs.
	NoPipeline bool
	// CommitLead is how long before a running job's earliest plausible
	// end the next job is committed behind it (it covers the hop to the
	// backend and vig's own timer lateness); 0 means 2 ms.
	CommitLead time.Duration
}

// Defaults.
const (
	defaultCapacity       = 16
	defaultWindow         = 32
	maxWindow             = 1024
	defaultProbeAfter     = 20
	defaultCoverageSpan   = 10 * time.Second
	defaultCaptureSkew    = 5 * time.Millisecond
	defaultCaptureHorizon = time.Hour
	defaultCommitLead     = 2 * time.Millisecond
	maxCoverageWindows    = 1 << 14
	maxSlots              = 256
	maxInterference       = 10
	maxCapacity           = 1 << 16
)

// ErrConfig is wrapped by every validation error from New.
var ErrConfig = errors.New("invalid scheduler config")

func cfgErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// resolveAccelerators validates the accelerators and each model's placement.
// One accelerator declared is the shorthand's case (its name is returned for
// the snapshot); more than one are returned as they are, with every model's
// accelerator checked and the whole config validated as one pool (so the
// messages about models and streams are the same either way).
func (c Config) resolveAccelerators() (Config, string, error) {
	logical, err := c.validateVariants()
	if err != nil {
		return c, "", err
	}
	if len(c.Accelerators) == 0 {
		for _, m := range c.Models {
			if m.Accelerator != "" {
				return c, "", cfgErr("model %q: runs on accelerator %q, but no accelerators are declared (declare them instead of slots)", m.Name, m.Accelerator)
			}
		}
		return c, "", nil
	}
	if c.Slots != 0 {
		return c, "", cfgErr("both slots (%d) and accelerators are set: slots is the shorthand for one accelerator; declare the slots per accelerator alone", c.Slots)
	}
	names := map[string]bool{}
	total := 0
	for i, a := range c.Accelerators {
		switch {
		case a.Name == "":
			return c, "", cfgErr("accelerators[%d]: empty name", i)
		case names[a.Name]:
			return c, "", cfgErr("accelerator %q declared twice", a.Name)
		case a.Slots < 1 || a.Slots > maxSlots:
			return c, "", cfgErr("accelerator %q: %d slots: must be between 1 and %d", a.Name, a.Slots, maxSlots)
		case a.Interference != 0 && !(a.Interference >= 1 && a.Interference <= maxInterference):
			return c, "", cfgErr("accelerator %q: interference %v: must be a factor between 1 and %v (how much longer its jobs take while another accelerator runs one), or 0 for none", a.Name, a.Interference, maxInterference)
		}
		names[a.Name] = true
		total += a.Slots
	}
	for _, m := range c.Models {
		switch {
		case len(m.Variants) > 0:
			// Logical: placed by its variants (validateVariants).
		case m.Accelerator == "" && len(c.Accelerators) > 1:
			return c, "", cfgErr("model %q: no accelerator given; with %d accelerators every model names the one it runs on", m.Name, len(c.Accelerators))
		case m.Accelerator != "" && !names[m.Accelerator]:
			return c, "", cfgErr("model %q: accelerator %q is not declared", m.Name, m.Accelerator)
		}
	}
	whole := c
	whole.Accelerators, whole.Slots = nil, min(total, maxSlots)
	whole.Models = make([]ModelSpec, len(c.Models))
	for i, m := range c.Models {
		m.Accelerator = ""
		whole.Models[i] = m
	}
	if _, err := whole.withDefaults(); err != nil {
		return c, "", err
	}
	if len(c.Accelerators) == 1 && !logical {
		whole.Slots = c.Accelerators[0].Slots
		return whole, c.Accelerators[0].Name, nil
	}
	if len(c.Accelerators) == 1 {
		// Variants need the front, even over one accelerator: every
		// model is placed on it.
		models := make([]ModelSpec, len(c.Models))
		for i, m := range c.Models {
			if m.Accelerator == "" && len(m.Variants) == 0 {
				m.Accelerator = c.Accelerators[0].Name
			}
			models[i] = m
		}
		c.Models = models
	}
	return c, "", nil
}

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Slots < 1 || c.Slots > maxSlots {
		return c, cfgErr("backend.slots = %d: must be between 1 and %d", c.Slots, maxSlots)
	}
	if err := c.SafetyMargin.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.UnknownStreams > DefaultContract {
		return c, cfgErr("unknown stream policy %d", c.UnknownStreams)
	}
	if len(c.Models) == 0 {
		return c, cfgErr("no models configured")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.DefaultCapacity, defaultCapacity)
	def(&c.EstimatorWindow, defaultWindow)
	def(&c.ProbeAfter, defaultProbeAfter)
	if c.DefaultCapacity < 1 || c.DefaultCapacity > maxCapacity {
		return c, cfgErr("default queue capacity %d: must be between 1 and %d", c.DefaultCapacity, maxCapacity)
	}
	if c.EstimatorWindow < 1 || c.EstimatorWindow > maxWindow {
		return c, cfgErr("estimator window %d: must be between 1 and %d", c.EstimatorWindow, maxWindow)
	}
	if c.CoverageSpan == 0 {
		c.CoverageSpan = defaultCoverageSpan
	}
	if c.CaptureSkew == 0 {
		c.CaptureSkew = defaultCaptureSkew
	}
	if c.CaptureHorizon == 0 {
		c.CaptureHorizon = defaultCaptureHorizon
	}
	if c.CommitLead == 0 {
		c.CommitLead = defaultCommitLead
	}
	if c.CoverageSpan < 0 || c.CaptureSkew < 0 || c.CaptureHorizon < 0 || c.CommitLead < 0 {
		return c, cfgErr("coverage span, capture skew, capture horizon and commit lead must not be negative")
	}
	if c.Order > OrderClassFirst {
		return c, cfgErr("unknown order %d", c.Order)
	}
	models := make(map[string]bool, len(c.Models))
	for i, m := range c.Models {
		switch {
		case m.Name == "":
			return c, cfgErr("models[%d]: empty name", i)
		case models[m.Name]:
			return c, cfgErr("model %q configured twice", m.Name)
		case m.Exec <= 0 && len(m.Variants) == 0:
			return c, cfgErr("model %q: exec_ms must be > 0 (it seeds the estimator)", m.Name)
		case m.Instances < 0 || m.Instances > maxSlots:
			return c, cfgErr("model %q: instances = %d: must be between 0 (as many as its accelerator's slots) and %d", m.Name, m.Instances, maxSlots)
		}
		models[m.Name] = true
	}
	streams := make(map[string]bool, len(c.Streams))
	for i, s := range c.Streams {
		where := fmt.Sprintf("streams[%d] %q", i, s.Name)
		switch {
		case s.Name == "":
			return c, cfgErr("streams[%d]: empty name", i)
		case streams[s.Name]:
			return c, cfgErr("stream %q configured twice", s.Name)
		case !models[s.Model]:
			return c, cfgErr("%s: model %q is not configured under models", where, s.Model)
		case s.Class >= numClasses:
			return c, cfgErr("%s: invalid class %d", where, s.Class)
		case s.Period <= 0:
			return c, cfgErr("%s: period_ms must be > 0", where)
		case s.MaxAge <= 0:
			return c, cfgErr("%s: max_age_ms must be > 0", where)
		case s.FrameInterval < 0:
			return c, cfgErr("%s: frame_interval_ms must not be negative", where)
		case s.MinRateHz < 0 || math.IsNaN(s.MinRateHz) || math.IsInf(s.MinRateHz, 0):
			return c, cfgErr("%s: min_rate_hz must be a finite number ≥ 0", where)
		case s.MinRateHz > 0 && s.Class == Protected:
			return c, cfgErr("%s: min_rate_hz applies to high and best_effort streams; a protected stream is deferred only beyond its contract (its extra frames)", where)
		case s.MinRateHz > 1e6:
			return c, cfgErr("%s: min_rate_hz %g is absurd (max 1e6)", where, s.MinRateHz)
		case s.WindowAligned && (s.WindowOffset < 0 || s.WindowOffset >= s.Period):
			return c, cfgErr("%s: window_offset_ms must be in [0, period_ms)", where)
		}
		switch s.Queue {
		case Latest:
			if s.Capacity > 1 {
				return c, cfgErr("%s: a latest queue holds exactly one request; capacity %d needs queue: fifo", where, s.Capacity)
			}
		case FIFO:
			if s.Capacity < 1 || s.Capacity > maxCapacity {
				return c, cfgErr("%s: a fifo queue needs a capacity between 1 and %d", where, maxCapacity)
			}
		default:
			return c, cfgErr("%s: invalid queue kind %d", where, s.Queue)
		}
		streams[s.Name] = true
	}
	return c, nil
}
