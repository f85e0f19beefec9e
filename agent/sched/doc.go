// Package sched is vig's freshness scheduler: a pure state machine that
// decides which inference request runs on the accelerator, which waits, and
// which is answered at once because its result could no longer be fresh.
//
// # Driving it
//
// The scheduler has no goroutines, reads no clock, does no I/O and takes no
// lock. The caller (the gateway) holds a mutex around every call — never
// across I/O — and passes the time of each event as a Time (nanoseconds on a
// monotonic clock, never going back). Every event method takes a
// caller-owned []Action and returns it with the decisions appended:
//
//	acts = s.Arrive(now, req, acts[:0])       // a request arrived
//	acts = s.Complete(now, tok, ok, acts[:0]) // the backend answered (ok) or failed
//	acts = s.Cancel(now, tok, acts[:0])       // the client went away
//	acts = s.Tick(now, acts[:0])              // the time NextWake asked for came
//	acts = s.SetBackendAvailable(now, up, acts[:0])
//	acts = s.Drain(now, acts[:0])             // shutting down
//
// An Action is either Dispatch (send the request with this token to the
// backend; call Complete when it answers) or Answer (reply to the client with
// Code now — the values are gRPC code numbers — and Reason as the message;
// the request is finished). A Dispatch carries the slot, the occupancy it was
// decided under, the capture time used and the time spent queued, which with
// the delivery time give the caller's latency and age histograms. After each
// call NextWake says when Tick is due if nothing else happens; it returns
// false when no waiting request depends on time, so an idle vig arms no
// timer. Snapshot(now, &snap) copies counters, gauges and estimates for
// metrics into a reused value.
//
// Requests live in a table allocated by New (its size is the sum of the
// queue capacities plus the slots plus one, so it cannot overflow), tokens
// are found through a fixed-size open-addressing table, and estimator
// windows are fixed rings: in steady state no call allocates.
//
// A token's life ends exactly once: by an Answer action, by Complete of a
// dispatched request, or by Cancel of a waiting one (no Answer is emitted for
// a cancelled request: its client is gone). Complete of a token that is not
// running and Cancel of an unknown token are ignored. Tokens must be unique
// among requests in flight (use a counter): an arrival reusing a live token
// is answered InvalidArgument with ReasonDuplicateToken — checked before
// anything else, so that Answer is never mistaken for one about the live
// request, which is unaffected.
//
// # Streams and routing
//
// A request names its stream with the vig_stream parameter, else the stream
// is named like the model. If no stream has that name and the request gave
// no vig_stream, the one stream configured for its model (if there is exactly
// one) is used. A stream configured for another model than the request's is
// InvalidArgument. Otherwise the request has no contract: with
// UnknownStreams = RejectUnknown it is answered NotFound; with
// DefaultContract it joins its model's default stream ("default/<model>"):
// best_effort, FIFO of DefaultCapacity, no freshness deadline. Triton's own
// parameters apply there and only there: `priority` orders such requests
// among themselves (1 first; 0 or absent is the default level, last), and
// `timeout` is a queue timeout as in Triton — a request not started within
// it is answered Unavailable (Triton's code for a queue timeout) and counted
// late_dropped. Contract streams go before default-contract requests of the
// same class. Unknown models are NotFound under either policy: the scheduler
// cannot estimate a model it does not know (the gateway may configure models
// it discovers on the backend with a prior).
//
// Capture time is vig_capture_ns, else the arrival time. A capture more than
// CaptureSkew in the future or more than CaptureHorizon in the past is
// InvalidArgument (a different clock domain, not a late frame); a capture
// slightly in the future is clamped to now. Negative Triton timeouts are
// InvalidArgument.
//
// # Queues
//
// A Latest queue holds one waiting request. A newer frame supersedes the
// waiting one, which is answered Aborted at once (superseded); if the
// arrival's capture is older than the waiting frame's, the arrival is the
// one superseded. A FIFO queue holds up to Capacity requests in arrival
// order; an arrival finding it full is answered ResourceExhausted (rejected).
//
// # Dispatch
//
// Whenever a request arrives, a slot frees, a request is cancelled or Tick
// runs, the scheduler takes every decision possible at that instant. It looks
// at the head of every queue and considers them by class (protected, high,
// best_effort), then Triton priority (default contract only), then earliest
// deadline (capture + max_age; the queue timeout for default-contract
// requests), then arrival order. For the best candidate:
//
//  1. Late: the predicted completion is now + estimate × margin, with the
//     estimate for its model at the occupancy it would start under (the
//     number of jobs already running). If that is after its deadline, the
//     request is answered DeadlineExceeded and counted late_dropped: a
//     frame whose result would be stale is never started. The only
//     exception is a probe (below); a frame already past its deadline is
//     never dispatched, probe or not.
//  2. Capacity: at most Slots jobs run. A model with Exclusive set
//     (corun: false) starts only on an idle accelerator and nothing starts
//     beside it. When such a job is the best candidate and other jobs run,
//     nothing of lower rank is started (the accelerator drains for it),
//     unless admission would defer it anyway.
//  3. Admission (blocking-aware, non-preemptive), for high and best_effort
//     candidates: a job of cost C = estimate × margin started now occupies
//     a slot until now + C. For every protected stream, the scheduler
//     predicts its next frames from its newest capture plus its frame
//     interval (FrameInterval, else Period), beginning with the first frame
//     that could still meet its deadline if started on arrival. A frame
//     captured at a < now + C that would meet its deadline without the
//     candidate but not with it — because every slot it could use (all of
//     them for an exclusive model, or while an exclusive job runs) is busy
//     until after a + max_age − its own cost — blocks the candidate. Running
//     jobs are assumed to end at their predicted ends. A blocked candidate is
//     deferred: it stays queued, is counted deferred once (however often it
//     is re-evaluated), and the scheduler goes on to smaller candidates that
//     may fit. NextWake includes the instant the blocking frame stops being
//     reachable, so a frame that never comes does not defer forever, and a
//     protected stream silent for 2 frame intervals + max_age is no longer
//     guarded. Protected candidates are not subject to admission: among
//     protected streams, earliest deadline first decides.
//  4. Dispatch: the request gets the lowest free slot, and the Dispatch
//     action records the occupancy (Busy) it was decided under.
//
// After the candidates, every waiting request that would miss its deadline
// even if started now is answered DeadlineExceeded at once (late_dropped),
// and NextWake is the earliest instant at which another one will, at which a
// queue timeout expires, or at which a deferral must be re-evaluated.
//
// # Minimum rate budget
//
// On one slot, a 200 ms VLM job blocks every 50 ms protected detector frame,
// so admission starves the VLM: that is the intended default. MinRateHz on a
// high or best_effort stream is the explicit trade-off: once 1/MinRateHz has
// passed since the stream's last dispatch (or since its first deferral, if it
// never ran), its deferred head is dispatched despite admission (still never
// late, never beside an exclusive job, never beyond the slots). Each such
// dispatch counts BudgetRuns, and BudgetCost adds the protected frames it was
// predicted to make miss; protected requests late-dropped or superseded
// while a budget job runs count BudgetBlocked on their stream. doctor and
// metrics show these next to the coverage they cost.
//
// # Estimator
//
// Execution time is estimated per (model, occupancy at dispatch) as the p90
// of a window of the last EstimatorWindow samples (dispatch to Complete with
// ok). The window starts full of copies of the model's exec prior, so one
// outlier moves nothing; the estimate rises after ~window/10 slow samples and
// falls after ~9·window/10 fast ones. The occupancy a sample is learnt under
// is the one recorded when the dispatch was decided, not the one at
// completion: with two slots, a job started alone and finished beside
// another is an occupancy-0 sample. ObserveBackendStats feeds the backend's
// mean compute time: it replaces the prior in windows with no sample yet and
// is a floor of every estimate of the model (pure compute never exceeds what
// the scheduler measures around it).
//
// An estimate that grows past what a stream can afford would late-drop all
// its requests and so never be measured again. To break that loop, once
// ProbeAfter requests of a stream have been late-dropped since its last
// dispatch on the estimate alone — they would have missed even if started
// on arrival, yet their deadline had not passed — the next request that is
// late only by prediction and finds a slot free is dispatched anyway as a
// probe (Action.Probe, StreamStats.Probes); its measurement corrects the
// window. A frame already past its deadline is never a probe.
//
// # Safety margin
//
// The margin is an integer percentage (Margin): 100 is none, 110 is +10 %.
// ParseMargin accepts "110" or "110%" and String formats "110%"; values
// below 100 or above 1000 are errors, and so is the zero value in Config,
// so an unset margin can never silently become some default.
//
// # Counters
//
// Every request routed to a stream counts Received on it and ends in exactly
// one outcome: Forwarded, Superseded, LateDropped, Rejected (queue full,
// draining, backend down, bad input), BackendError (Complete with !ok) or
// Cancelled. After every call, per stream,
//
//	Received = Forwarded + Superseded + LateDropped + Rejected + BackendError + Cancelled + Waiting + Running
//
// (Counters.Balanced). Deferred counts requests deferred at least once and
// is not an outcome. Requests that match no stream count in
// Snapshot.Unrouted.
//
// # Drain and backend state
//
// Drain answers every waiting request Unavailable (rejected) and every later
// arrival too; running requests complete normally, and Drained reports when
// nothing is left. SetBackendAvailable(false) does the same until the
// backend is marked up again, so clients learn promptly that it is down.
//
// # Freshness measurement
//
// Coverage and AoI are the success metrics, as pure functions reused by the
// benchmark. Coverage cuts time from a start into consecutive windows of the
// stream's period; a complete window is covered if a result delivered inside
// it had age (delivery − capture) < max_age. AoI at t is t minus the capture
// of the newest delivered result; AoI integrates this sawtooth exactly (no
// sampling) for its mean and p50/p95/p99. Snapshot reports, per stream, the
// coverage of the complete windows in the last CoverageSpan (a ring of one
// bit per window, counted from the stream's first capture) and the current
// AoI.
package sched
