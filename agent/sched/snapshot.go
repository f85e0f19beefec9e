package sched

import "time"

// Counters are the outcome counters of one stream. Deferred is a flag count
// (requests deferred at least once), not an outcome. Waiting and Running are
// gauges filled by Snapshot.
type Counters struct {
	Received     uint64
	Forwarded    uint64
	Superseded   uint64
	LateDropped  uint64
	Rejected     uint64
	BackendError uint64
	Cancelled    uint64
	Deferred     uint64
	Waiting      uint64
	Running      uint64
}

func (c *Counters) add(o Outcome) {
	switch o {
	case Forwarded:
		c.Forwarded++
	case Superseded:
		c.Superseded++
	case LateDropped:
		c.LateDropped++
	case Rejected:
		c.Rejected++
	case BackendError:
		c.BackendError++
	case Cancelled:
		c.Cancelled++
	}
}

// Outcomes returns the sum of the terminal outcomes.
func (c Counters) Outcomes() uint64 {
	return c.Forwarded + c.Superseded + c.LateDropped + c.Rejected + c.BackendError + c.Cancelled
}

// InFlight returns Waiting + Running.
func (c Counters) InFlight() uint64 { return c.Waiting + c.Running }

// Balanced reports the invariant received = Σ outcomes + in flight, which
// holds after every call into the scheduler.
func (c Counters) Balanced() bool { return c.Received == c.Outcomes()+c.InFlight() }

// StreamStats is one stream's state in a Snapshot.
type StreamStats struct {
	Name  string
	Model string
	Class Class
	// Default is set for a model's default-contract stream.
	Default bool
	Counters
	// CoverageWindows and CoveredWindows are the complete period windows
	// in the last CoverageSpan and how many had a fresh result; Coverage
	// is their ratio (0 without a complete window).
	CoverageWindows int
	CoveredWindows  int
	Coverage        float64
	// AoI is now minus the capture time of the newest delivered result;
	// HasAoI is false before the first delivery. LastAge is the age of
	// the last result at its delivery.
	AoI     time.Duration
	HasAoI  bool
	LastAge time.Duration
	// BudgetRuns counts dispatches made on the min_rate_hz budget against
	// admission; BudgetCost the frames those dispatches were predicted to
	// make miss among the streams admission guards them against
	// (protected streams, and high ones for a best_effort stream's job);
	// and, on a guarded stream, BudgetBlocked its requests late-dropped or
	// superseded while a budget job guarded against it ran.
	BudgetRuns    uint64
	BudgetCost    uint64
	BudgetBlocked uint64
	// Probes counts dispatches made despite a predicted miss to
	// re-measure the model (see ProbeAfter).
	Probes uint64
	// Yielded counts requests that waited at least once for a predicted
	// frame of another stream: one with a tighter window, or, for an extra
	// frame, any one whose window is open (see doc.go).
	Yielded uint64
	// Held counts requests that waited at least once so that their result
	// would land inside the window it is for rather than double the one
	// before (see doc.go, Landing in a window).
	Held uint64
	// BatchWaits counts requests that waited at least once for a frame of
	// another stream to join their batch (see doc.go, Batching).
	BatchWaits uint64
}

// EstimateStats is the estimator state of one (model, occupancy) pair.
type EstimateStats struct {
	Model string
	Busy  int
	// Estimate is the value decisions use before the margin.
	Estimate time.Duration
	// Samples counts measurements in the window (the rest are seeds).
	Samples int
	// Backend is the mean compute time last reported by the backend, 0 if
	// none.
	Backend time.Duration
}

// Snapshot is the scheduler state exported for metrics and diagnostics.
type Snapshot struct {
	Now   Time
	Slots int
	Busy  int
	// Committed counts pipelined jobs queued at the backend behind a
	// running one (at most one per slot); Busy counts the started ones.
	Committed    int
	Exclusive    bool // a corun:false job is running
	Draining     bool
	BackendDown  bool
	SafetyMargin Margin
	Streams      []StreamStats
	Estimates    []EstimateStats
	// Unrouted counts requests that matched no stream (all rejected).
	Unrouted Counters
	// Accelerators is the occupancy per accelerator, in config order; one
	// entry (named "" for the backend.slots shorthand) on one accelerator.
	// Slots, Busy, Committed and Exclusive above are their totals.
	Accelerators []AcceleratorStats
	// Batches counts the jobs of every batching model by size.
	Batches []BatchStats
	// Variants counts, per stream of a logical model and variant, the
	// jobs sent to that variant (see Variants in doc.go).
	Variants []VariantStats
}

// busyTimeAt is the slot time busy up to now (as far as vig can tell: from
// each job's observed start to its Complete).
func (s *Scheduler) busyTimeAt(now Time) time.Duration {
	if now > s.busyAt {
		return s.busyTime + time.Duration(s.busy)*now.Sub(s.busyAt)
	}
	return s.busyTime
}

// Snapshot fills dst with the state at now, reusing dst's slices.
func (s *Scheduler) Snapshot(now Time, dst *Snapshot) {
	if s.multi() {
		s.frontSnapshot(now, dst)
		return
	}
	dst.Now = now
	dst.Slots = s.slots
	dst.Busy = s.busy
	dst.Committed = s.committed
	dst.Exclusive = s.exclRunning
	dst.Draining = s.draining
	dst.BackendDown = s.backendDown
	dst.SafetyMargin = s.margin
	dst.Unrouted = s.unrouted
	dst.Accelerators = append(dst.Accelerators[:0], AcceleratorStats{Name: s.accelName, Slots: s.slots,
		Busy: s.busy, Committed: s.committed, Exclusive: s.exclRunning, BusyTime: s.busyTimeAt(now),
		Interference: s.factor(), InterferenceSamples: s.ifr.n})
	dst.Streams = dst.Streams[:0]
	for i := range s.streams {
		st := &s.streams[i]
		ss := StreamStats{
			Name:          st.name,
			Model:         st.spec.Model,
			Class:         st.class,
			Default:       st.adhoc,
			Counters:      st.c,
			LastAge:       st.lastAge,
			BudgetRuns:    st.budgetRuns,
			BudgetCost:    st.budgetCost,
			BudgetBlocked: st.budgetBlocked,
			Probes:        st.probes,
			Yielded:       st.yielded,
			Held:          st.held,
			BatchWaits:    st.batchWaits,
		}
		ss.Waiting = uint64(len(st.q))
		ss.Running = uint64(st.running)
		if !st.adhoc {
			ss.CoveredWindows, ss.CoverageWindows = st.cov.ratio(now)
			if ss.CoverageWindows > 0 {
				ss.Coverage = float64(ss.CoveredWindows) / float64(ss.CoverageWindows)
			}
		}
		if st.delivered {
			ss.AoI, ss.HasAoI = now.Sub(st.newest), true
		}
		dst.Streams = append(dst.Streams, ss)
	}
	dst.Batches = s.batchSnapshot(dst.Batches[:0])
	dst.Variants = dst.Variants[:0]
	dst.Estimates = dst.Estimates[:0]
	for i := range s.models {
		m := &s.models[i]
		for o := range m.est {
			dst.Estimates = append(dst.Estimates, EstimateStats{
				Model:    m.spec.Name,
				Busy:     o,
				Estimate: m.estimate(o),
				Samples:  m.est[o].real,
				Backend:  m.backendMean,
			})
		}
	}
}
