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
// backend now — Queued ones too, see Pipelined dispatch; call Complete when it
// answers) or Answer (reply to the client with
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
// queue capacities plus twice the slots plus one, so it cannot overflow), tokens
// are found through a fixed-size open-addressing table, and estimator
// windows are fixed rings: in steady state no call allocates.
//
// A token's life ends exactly once: by an Answer action, by Complete of a
// dispatched request (started or committed), or by Cancel of a waiting one (no Answer is emitted for
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
// one superseded. Frames carrying a sequence's START or END are the
// exception (see Sequences). A FIFO queue holds up to Capacity requests in arrival
// order; an arrival finding it full is answered ResourceExhausted (rejected).
//
// # Dispatch
//
// Whenever a request arrives, a job completes, a request is cancelled or
// Tick runs, the scheduler takes every decision possible at that instant.
// A decision places one waiting request: on a free slot (it starts now), or
// — pipelined, below — committed behind a running job (it starts at that
// job's predicted end). It looks at the head of every queue and ranks them
// (Order):
//
//   - OrderLaxity (the default). Every stream has a coverage grid of
//     windows of its period (see Coverage grid). A head's target is the end
//     of the window its result would land in if it started at the decision's
//     start time s — or, when that window already has a fresh result (or a
//     job of the stream already at the backend is expected to land in it),
//     the end of the next window, and the head is then an extra (see Extra
//     frames): its result would only double a claimed window. The target is
//     capped by the freshness deadline (capture + max_age). Laxity =
//     target − (s + C), with C = estimate × margin. Heads that are not
//     extras go before extras, then smallest laxity, then class (an extra
//     counts as best_effort), Triton priority, deadline and arrival.
//     Requests without a deadline (default contract) have infinite laxity.
//   - OrderClassFirst: heads that are not extras before extras, then class
//     (protected, high, best_effort; an extra counts as best_effort), then
//     Triton priority (default contract only), then earliest deadline
//     (capture + max_age; the queue timeout for default-contract requests),
//     then arrival order — the earlier rule, kept as a fallback.
//
// For the best candidate:
//
//  1. Late: the predicted completion is s + estimate × margin, with the
//     estimate for its model at the occupancy it would start under. If that
//     is after its deadline, a request on a free slot is answered
//     DeadlineExceeded and counted late_dropped: a frame whose result would
//     be stale is never started. (One that would be late behind the running
//     job is simply not committed; it is re-evaluated when a slot frees.)
//     The only exception is a probe (below); a frame already past its
//     deadline is never dispatched, probe or not.
//  2. Capacity: at most Slots jobs run and at most one more per slot is
//     committed behind them; a model with Instances runs at most that many
//     (see Model instances). With more than one slot, a model with
//     Exclusive set (corun: false) starts only on an idle accelerator,
//     nothing starts beside it and it is never committed early (the backend
//     would start it beside the others). When such a job is the best
//     candidate and other jobs run, nothing of lower rank is started (the
//     accelerator drains for it), unless admission would defer it anyway.
//     On one slot Exclusive changes nothing.
//  3. Admission (blocking-aware, non-preemptive), for high and best_effort
//     candidates: a job of cost C placed at s occupies its slot until s + C.
//     For every protected stream the scheduler checks its waiting request,
//     if any, and its next frames, predicted from its newest capture plus
//     its frame interval (FrameInterval, else Period), beginning with the
//     first that could still meet its deadline if started on arrival. A
//     protected frame captured at a with deadline d = a + max_age has the
//     target T = min(d, end of the window it would cover) under
//     OrderLaxity (T = d under OrderClassFirst; and T = d when its window
//     is out of reach anyway). If the frame meets T without the candidate
//     but not with it — every slot it could use (all of them for an
//     exclusive model, or while an exclusive job runs) being busy until
//     after T − its own cost — the candidate is blocked. Jobs at the
//     backend are assumed to end at their predicted ends. A blocked
//     candidate is deferred: it stays queued, is counted deferred once
//     (however often it is re-evaluated), and the scheduler goes on to
//     other candidates that may fit. NextWake includes the instant the
//     blocking frame stops being reachable, so a frame that never comes does
//     not defer forever, and a protected stream silent for 2 frame
//     intervals + max_age is no longer guarded. Protected candidates are not
//     subject to admission, unless they are extras. A best_effort
//     candidate (not an extra of a higher class) is admitted against the
//     frames of high streams the same way as against protected ones: the
//     order of the classes holds across non-preemptive blocking, so a VLM on
//     an accelerator whose only contracts are high (scenario D's GPU) runs
//     on its min_rate_hz budget, not whenever its window nears its end.
//  4. Look-ahead (OrderLaxity only; an extra yields on the stricter rule
//     of Extra frames under either order): a candidate yields to the next
//     predicted frame of another contract stream (protected or high; a
//     best_effort candidate also to best_effort frames) when that frame is
//     expected before the candidate would end, would meet its own target if
//     the candidate waited and miss it if not, and the candidate would still
//     meet its own target after it. The slot then stays idle until the frame
//     comes. A frame is predicted to reach vig one smoothed arrival lag
//     (an EWMA of arrival − capture) after its predicted capture, and is
//     expected until CommitLead after that; NextWake is then.
//     On one slot, where the order of a few jobs decides, the check is
//     made on a schedule instead of frame by frame: the other streams'
//     waiting heads and next predicted frames, earliest target first,
//     after the candidate — and before it (those due before it would end
//     first, then the candidate, then the rest). The candidate yields when
//     the first schedule makes a predicted frame miss and in the second
//     every job, the candidate included, meets its target: two frames that
//     share a window end can each fit behind a loose job and still not
//     fit together. StreamStats.Yielded counts requests
//     that yielded at least once. This is what keeps a short-window stream
//     (depth in scenario B, whose frames arrive 14 ms into a 33 ms window)
//     from losing its window to a job of looser laxity that started just
//     before its frame arrived.
//  5. Dispatch: the request gets the slot, and the Dispatch action records
//     the occupancy (Busy) it was decided under.
//
// # What protected means
//
// Protected streams are guaranteed, not first: under OrderLaxity a high job
// may run before a waiting protected frame, but only when admission shows
// that the protected frame — and each protected frame predicted within the
// job — still completes by T = min(a + max_age, end of its window), given
// the jobs at the backend at their predicted ends (estimate × margin). So a
// protected frame misses only if the estimates (with margin) are wrong, if
// protected work alone overloads the accelerator (doctor's
// PROTECTED_WORKLOAD_UNSCHEDULABLE: Σ C_i/T_i > 1 over protected streams, or
// a response time R_i = B_i + C_i + interference > max_age_i), or if a
// min_rate_hz budget buys another stream the right to block it.
//
// The guarantee covers one result per window of the stream's period, not
// every frame its sensor sends: once a protected stream's window is claimed,
// a waiting frame of it is guarded only as the candidate for its next
// window (its target is that window's end, capped by its deadline), and as
// a candidate itself it is an extra (below).
//
// # Extra frames: a sensor beyond its contract
//
// A stream's contract is one fresh result per window of its period
// (StreamSpec.Period, config period_ms; FrameInterval, frame_interval_ms,
// only says when frames are expected). Its guarantees — the protected
// guard, its class, its laxity — cover at most one result per window: the
// head whose result would land in a window not yet claimed (no fresh result
// delivered in it, no job of the stream at the backend expected to land in
// it). A head whose result would land in a claimed window is an extra, and
// ranks as best_effort whatever its stream's class:
//
//   - it goes after every head that is not an extra, of any class, under
//     either order; among extras by laxity (toward the next window) under
//     OrderLaxity, then as best_effort: Triton priority, deadline, arrival;
//   - a protected extra is subject to admission like any best_effort
//     candidate: it may not make another protected stream's frame miss;
//   - it yields to the next predicted frame of any other contract stream
//     whose window is not claimed, when that frame is expected before the
//     extra would end, would start later because of it and could meet its
//     target without it — whether or not that frame would then miss, and
//     whatever waiting costs the extra (it has no guarantee of its own). It
//     is re-evaluated once that frame is overdue (NextWake) and counts
//     Yielded.
//
// Otherwise an extra is served like any request: when the accelerator
// would idle it runs (work conserving: a stream alone is served as often as
// its frames come and the slot allows), it may be committed behind a
// running job, and LATEST is unchanged (a newer frame supersedes a waiting
// extra). So an extra never takes the slot from a frame that waits or is
// expected before it would end; a frame that comes unannounced (its sensor
// off its predicted schedule) can still wait behind one running extra, as
// behind any job, since nothing is preempted. A sensor at ten times its
// contracted rate keeps its own windows and takes nothing the others are
// contracted for: in the simulation of scenario B with the detector at 10×
// (flood_test.go) every detector, pose and depth window is covered, pose
// and depth wait in vig no longer than with the detector at its contract
// (to within CommitLead, the resolution of a commit's dispatch time),
// and the detector is served ~4 times per window where the slot has room.
// Default-contract streams have no period and no window: they are never
// extras, and rank as before.
//
// # Pipelined dispatch
//
// A job answered by the backend frees its slot; sending the next one only
// then would leave the accelerator idle for the answer's way back to vig
// and the next request's way to the backend (~0.5 ms through loopback gRPC),
// while a direct client's request is already queued at the backend. So once
// a running job may end within CommitLead — at its start plus the p10 of its
// model's estimates (at its occupancy) minus CommitLead (default 2 ms, the
// hop plus vig's timer lateness) — the best waiting request is committed
// behind it: Dispatched at once with Queued set, Slot the running job's
// slot and Start its predicted end. The caller sends it like any Dispatch;
// the backend queues it and starts it the moment the slot frees. At most one
// request is committed per slot. NextWake includes the commit time while
// anything waits. Config.NoPipeline turns this off.
//
// Committing early has costs, all accepted knowingly:
//
//   - A committed frame is no longer in vig's queue: a newer frame of its
//     stream does not supersede it (LATEST still supersedes every request
//     not yet committed), and a more urgent frame arriving after the commit
//     waits behind it. CommitLead bounds this window.
//   - Its predicted start is the running job's predicted end (estimate ×
//     margin), so the late check, its rank and admission are decided at
//     that start, not at now: a commit is refused when it would be late
//     there, and a high job committed behind a running one is admitted
//     against protected frames as if it started then.
//   - The backend's queue is FIFO: when any running job completes, vig takes
//     the oldest committed request to have started on that slot at that
//     instant (it has no other signal of the start).
//
// Execution times are learnt from the observed start: the dispatch for a
// job sent to a free slot, and the predecessor's Complete for a committed
// one — so the time it spent queued at the backend is not counted, and the
// return hop, paid by both ends, cancels out. The occupancy recorded is the
// one the decision used: for a committed job, the slots predicted still busy
// at its predicted start. A committed request that completes (or fails, or
// is cancelled) before vig saw it start teaches the estimator nothing and
// leaves the running job alone. Cancel of a committed request marks it: the
// caller cancels the call at the backend and reports its end with Complete.
//
// # Coverage grid
//
// Coverage windows lie on a grid per stream: [origin + k·period, origin +
// (k+1)·period). vig is either told the grid (StreamSpec.WindowAligned with
// WindowOffset, config window_offset_ms: the origin is that offset on the
// scheduler's clock) or learns it: every stream without a told grid takes as
// origin the first capture vig sees on any such stream — the session's start,
// from which a consumer that starts with its sensors counts its periods. The
// wire benchmark counts windows from its first frame, so there the learnt
// grid is exact.
//
// A wrong grid misplaces every window end the laxity order and the
// protected guard aim at. Small errors (a few ms) cost nothing measurable;
// around half a window they are worse than no grid: the scheduler hurries a
// frame for a window end that is not there and lets the real one pass. In
// the simulation of scenario B (wiresim_test.go, TestWireSimulationWrongGrid)
// depth coverage is 100 % with the right grid or one off by 2 ms, ~98 % off
// by 5 ms, ~89 % off by 10 ms and ~75 % off by 16 ms, half its window
// (class-first ordering: ~91 %); protected coverage stays at 100 % (its
// windows are 50 ms and its frames arrive at their start). When the
// consumer's period boundaries are known, tell vig.
//
// After the candidates, every waiting request that would miss its deadline
// even if started now is answered DeadlineExceeded at once (late_dropped),
// and NextWake is the earliest instant at which another one will, at which a
// queue timeout expires, at which a deferral or yield must be re-evaluated,
// or at which a job may be committed behind a running one.
//
// # Landing in a window
//
// Under OrderLaxity, a head that is not an extra may still be about to double
// a window: its result, at the fastest execution time in its estimator window,
// would land in a window its stream already has, while its predicted result
// (estimate × margin) lands in the next one. A frame captured near the end of
// its window (scenario D's depth, 21 ms into a 33 ms window with 9–13 ms of
// execution) then covers one window or the other by chance, and every slip
// leaves one window empty and the next doubled. Such a head is held until
// windowStart − fastest, when even its fastest result lands in the next
// window, if it still meets its target from there and its sensor's next frame
// is not due first (that frame would serve the window; holding would only lose
// this one). Meanwhile other heads may take the slot. StreamStats.Held counts
// requests held at least once; NextWake includes the hold's end.
//
// A stream running late keeps its pace the same way: when a frame's result
// would land in its own capture window, already covered by an older frame's
// late result (delivered, or predicted for a job at the backend), the frame is
// an extra there, yet run at once it would double that window and leave the
// next one empty (scenario D2's lane after a detector frame on its DLA core).
// It is held until even its fastest result lands in the next window, under the
// same conditions. An extra whose window was covered by a frame of the same
// window (a sensor above its contracted rate) is served as before.
//
// Both decide from the head's earliest plausible start. On a free slot that is
// now; committed behind a running job, it is that job's earliest plausible end
// (its p10, from which the commit was allowed), not its predicted one (p90):
// the backend starts the committed job the moment the running one ends, and a
// hold judged from the predicted end alone let results land early, window
// after window (scenario D2's depth behind the GPU detector: 90 % in the
// simulation; 94 % with the earliest start).
//
// # More than one kind of accelerator
//
// With Config.Accelerators (a Jetson's GPU and two DLA cores, a phone's NPU
// and GPU) every model runs on its own accelerator and each accelerator has
// its own slots and its own queue at the backend. The Scheduler is then a
// front over one engine per accelerator — each exactly the one-accelerator
// scheduler described above, given the models placed there and their streams
// — so freshness, classes, admission, pipelined commits, windows, budgets
// and the estimator hold per accelerator: a GPU job never starts on a DLA
// slot, a DLA frame never waits behind a GPU job, a corun: false model runs
// alone on its own accelerator while the others go on, and admission guards
// a stream against the jobs on its accelerator, which can delay it — and,
// with interference (below), against those elsewhere that can slow it. The
// front routes an arrival as an engine would (stream name,
// else its model's accelerator; an unknown model is NotFound), refuses a
// token live on any accelerator as a duplicate, numbers streams as one
// engine would (configured streams in config order, then the default
// contracts in model order) and slots across accelerators in config order
// (Action.Slot; AcceleratorOf maps one back), and NextWake is the earliest
// of the engines'. An event at or after another engine's wake-up also runs
// that engine's pass (the Tick it stands for). Action.Busy is the occupancy
// of the job's own accelerator, the one its execution time is learnt under.
// Snapshot.Accelerators has each accelerator's occupancy, busy slot time
// and interference factor.
// Learnt grids share one origin: the first capture on any stream. Without
// Accelerators, Slots is the one accelerator (the config's backend.slots
// shorthand), and the Scheduler is its own engine.
//
// Model instances. Triton runs one request per model instance, so a model
// with Instances n (its instance group's count there) runs at most n jobs
// at once, whatever its accelerator's slots: a count-1 model never runs
// twice at once, and two slots of a GPU are two jobs of different models.
// An instance is claimed by a running job and by a committed one, except a
// job committed behind a running job of its own model: that is Triton's
// per-instance queue, the instance passes from one to the other. So a
// model at its cap starts nowhere, may be committed only behind its own
// running job (committed behind another model's, it would not start when
// that one ends, as the pipelined timing assumes), and a slot that frees
// promotes the oldest committed job whose model has an instance free.
// Admission predicts a guarded frame's start no earlier than an instance
// of its model frees. 0 is as many as the slots; Instances ≥ the slots
// changes nothing; an exclusive model may have instances.
//
// Interference. The accelerators of one device share its memory bandwidth
// (NVIDIA's DLA FAQ; HaX-CoNN measured up to 45 % on Orin): a job runs
// longer while another accelerator runs one. AcceleratorSpec.Interference
// (≥ 1, at most 10; 0 or 1 for none) is how much longer. When no
// accelerator has a factor above 1 vig neither prices nor learns
// interference (nothing of the below runs); otherwise:
//
//   - Pricing: a job is priced as co-running when another accelerator has
//     a job at the backend (running or committed) predicted to end after
//     the job's start — wherever an engine prices one (ranking, the late
//     check, admission's and the look-ahead's predicted frames, landing in
//     a window, commits, batches, the window a result is expected in). Each
//     engine gets the others' latest predicted end from the front once per
//     pass. Whether a job co-runs is decided at its start, as the mock
//     backend slows jobs.
//   - Learning: per (model, occupancy) a job that started while another
//     accelerator ran one goes to a co-run window (seeded with the prior ×
//     the configured factor), any other to the solo window; neither feeds
//     the other. A co-running job is priced by its co-run window; a model
//     measured alone (half a window) but not co-running by its solo
//     estimate × the factor, and one that always co-runs is priced alone
//     at its co-run estimate over the factor. The factor is the median
//     co-run time over the median solo time, averaged over the windows
//     where both are measured (a learnt factor under 1.05 is the noise of
//     two medians: 1); until then the config's. A model that always
//     co-runs cannot tell its own time from the slowdown: configure the
//     factor where the device is always shared. Snapshot.Accelerators has
//     the factor and how many co-running jobs were measured.
//   - Protection across accelerators: a job subject to admission (high,
//     best_effort, an extra) on accelerator B is also blocked when, from
//     its start to its predicted end, it would push protected work of
//     another accelerator A past its deadline, by A's factor, when that
//     work is in time without it: a protected job running on A (the rest of
//     it runs at 1/factor of its speed while the two overlap), one
//     committed on A or a protected frame predicted to start on A (its
//     waiting head, its next frames as in admission) before the job ends
//     (× the factor; a frame at its co-running price). Work that co-runs
//     anyway (another accelerator's job already at the backend overlaps
//     it) or that misses anyway is not counted. The job is deferred like
//     any blocked job — counted once, min_rate_hz budgets as in admission,
//     so it never starves beyond its budget (a budget run counts
//     BudgetCost, and A's protected requests dropped while it runs
//     BudgetBlocked) — and its engine's pass runs again after every event
//     on any accelerator while the deferral holds (the blocking job's
//     Complete frees it at once), and at NextWake: the blocking job's
//     predicted end, or the instant the guarded frame can no longer be in
//     time anyway.
//     Protected jobs are not deferred for another accelerator's protected
//     work, as they are not on their own. Only an accelerator configured
//     with a factor above 1 is protected so (its learnt factor then used):
//     on a device with interference, one configured without it has its
//     factor learnt for pricing only, so that measurement noise never
//     defers a job.
//
// # Batching
//
// A model with MaxBatch > 1 (config max_batch, else the server's
// max_batch_size) may run the frames of several of its streams as one job:
// the caller merges them into one backend request along the first dimension,
// as Triton's dynamic batcher would, and splits the answer. Only requests with
// the same non-zero Request.BatchKey join (the caller sets it for requests
// whose tensors can be merged); a batch carries at most MaxBatch rows. Its
// Dispatches come together, the lead's first, each naming the lead's token as
// Action.Batch; Complete of the lead finishes every member (Complete of a
// member is ignored; Cancel of one marks it, and it counts cancelled).
//
// When the best candidate is batchable, the batch is formed from the waiting
// heads of its model's other streams, tried largest first and shrunk from the
// least urgent until:
//
//   - it pays: each added frame costs less in the batch than as a job of its
//     own (by the medians of the estimates, with a 10 % margin for their
//     noise), so a model whose batch of b costs b single runs never batches;
//   - every member meets its target at the batch's end (its deadline, and the
//     end of the window its result lands in), and every member but the lead
//     lands in a window its stream needs — not an extra. A frame that would
//     be stale at the batch's end, or that would only double a window, does
//     not join. Largest first, because a small batch can end in a window its
//     members already have when a larger one would end in the next;
//   - admission holds: a batch with a member that is not protected (or is an
//     extra) is admitted as that member would be, with the batch's cost, and
//     shrinks until it no longer makes a protected frame miss.
//
// A batch may wait for a frame about to come (filling): when the next
// predicted frame of another stream of its model can still join — the batch
// started at its arrival instead, with it, meets every member's target and
// its own — and waiting pays: the slot's idle time until then plus the frame's
// added cost stay below what it would cost alone. So a batch never waits
// longer than the smallest slack among its frames, and never on a model where
// batching gains nothing. A frame is still expected until CommitLead plus four
// mean deviations of its stream's arrival lag after it is due. While a batch
// fills, its slot may run another job only if that job ends before the latest
// start the batch can afford; StreamStats.BatchWaits counts requests that
// waited so. A batch whose fastest plausible result would land in a window a
// member's stream already has while its predicted one lands in the next is
// held as a frame alone is (Landing in a window): cameras with one period,
// batched together, otherwise settle on a phase whose results land on a
// window boundary.
//
// The estimator keeps a window per (occupancy, batch size); a batch is learnt
// under its rows. BatchExec seeds the sizes (interpolated between the sizes
// given); without it a size's prior is exec × (1 + 0.5·(b−1)), optimistic so
// that batches are tried. Sizes measured less than half a window are refit
// after every measurement: from the per-frame slope of the size measured most
// (medians), scaled from the estimate of a batch of one, or before any batch
// is measured, the prior's shape scaled to that estimate. ObserveBackendStats
// is ignored for a model once it has run a batch (Triton reports compute time
// per execution, of any size). Snapshot.Batches counts dispatched jobs by rows.
// A model whose batches do not pay decides exactly as one that never batches.
//
// An extra of a batching model does not run alone while its model has other
// streams and batching pays: it would only double a window, on slot time the
// next batch needs; it waits to join that batch, or is superseded, or runs once
// starting it lands in its next window.
//
// In the simulation of scenario E (batchsim_test.go: six cameras at 30 Hz on
// one detector whose batch of b costs 10 ms × (1 + 0.25·(b−1)), and a depth
// model, on one slot) vig covers every window of every stream with the bench's
// hops and with 0.3 or 0.6 ms of jitter per hop, where running one frame per
// job covers 11–46 % of the high cameras' and the backend's own batcher
// 80–99 %; with 1 ms of jitter 98–100 % of the cameras' and 89 % of depth's,
// and it breaks down at 2 ms. With the batch's cost linear in b (E-linear) it
// batches nothing and matches the unbatched schedule.
//
// # Variants
//
// A model built several times — a detector with a GPU engine and an engine per
// DLA core — is a logical model (ModelSpec.Variants): each variant is a model
// of its own, with its Exec and Accelerator (at most one variant per
// accelerator). A logical model has no Exec, Accelerator, batching, instances
// or corun of its own, needs Config.Accelerators (with one accelerator, a
// logical model of one variant is an alias), and a variant belongs to one
// logical model. Streams name the logical model. Each of its streams has a copy
// in every variant's engine; the front sends each frame to the copy whose
// engine would complete it first — after the jobs at the backend (each slot
// free at the predicted end of its last job) and the waiting requests of its
// class or a stricter one, each at that engine's own cost (estimate × margin
// at the occupancy it would start under, with interference), ties to the first
// listed — unless that costs another stream a window. Among the variants that
// would complete it by its target (its deadline, and the end of the window
// where its earliest result lands) the frame goes where it lands first of
// those that cost nothing; when each costs something, to the one that costs
// least, ties to the first listed (the operator's order decides which stream
// pays). Each frame of another protected or high stream
// on that accelerator that it would push past its own target counts one (a
// schedule of the jobs at the backend, the other streams' waiting frames and
// next predicted frames, earliest target first, with and without it; a
// frame's target is its deadline and the end of the window its stream next
// needs, so a stream landing a window late keeps that pace; predicted within
// 2 ms of the target counts as pushed), and an accelerator busy more than
// 90 % of late (its slot time from dispatch to completion, averaged with a
// 250 ms decay) counts one: so busy, one late job pushes the next ones; so
// does a landing that would miss the target if the jobs ahead of it ended as
// late as their spread (p90 − p10) allows — behind a VLM's 200–340 ms. The
// fastest engine is not always where the frame costs least: in scenario D2
// the GPU's 8 ms detector fills, with pose and depth, its 33 ms windows, and
// depth's results end on its windows' edges. If no variant would complete
// the frame by its target it goes where it lands first. The Dispatch names
// the variant (Action.Model; the caller sends the request under that name) and
// the logical stream (Action.Stream). A frame of a sequence goes to the variant
// its id selects (SequenceID mod the number of variants), as its state lives
// in one model's instance.
//
// The copies are one stream. A newer frame supersedes an older one waiting at
// any variant (answered Aborted once); an arrival older than a frame waiting at
// some variant goes there and is superseded; pinned frames are kept as in one
// queue. A FIFO stream of a logical model holds up to Capacity requests per
// variant. A result delivered by any copy covers its window for all of them:
// coverage counts a window once, a window claimed by a job at one variant is
// claimed at all (a frame for it is an extra everywhere), and AoI is the
// stream's. Only the engine the next frame is expected at — the variant where
// it would land first if it came when predicted, re-evaluated after every event
// — guards it (admission, look-ahead); the others do not reserve room for a
// frame that will not come to them. Snapshot shows the stream once (the
// copies' counters summed) with its logical model, and Snapshot.Variants counts
// its jobs per variant. Streams are numbered as without variants — a logical
// stream once, in config order — except that a logical model has no default
// stream of its own.
//
// A variant is also an ordinary model: other streams may name it (they share
// its accelerator and estimator with the logical model's frames), and a
// request naming it is routed as any request (to its one configured stream,
// else its default contract), never to a logical stream's copy. Under
// DefaultContract a request of the logical model matching none of its streams
// joins the default stream of the variant where it lands first (counted there;
// Snapshot.Variants under "default/<model>").
//
// In the simulation of scenario D2 (variant_test.go: {gpu: 1, dla0: 1, dla1:
// 1}, the bench's hops) with interference (×1.3 on the GPU, ×1.15 on a DLA
// core, as the mock backend), over six seeds of the execution times, the
// mean coverage with the variants is detector 100 %, lane 97.5 %, segment
// 99.9 %, pose 94.3 %, depth 94.0 %; vig with the detector fixed on DLA0
// covers 100, 77.5, 100, 94.5, 94.3 and direct clients 99.3, 82.1, 100, 69.7,
// 68.4 (TestWireSimulationScenarioD2Seeds). Always landing first left depth
// 87 %; a frame on DLA1 while segment lands in its own window makes segment's
// next result land a window late, which the stream then keeps (Landing in a
// window).
//
// # Sequences
//
// A stateful model behind Triton's sequence batcher (a tracker) takes
// requests that carry sequence_id, sequence_start and sequence_end
// (Request.SequenceID, SequenceStart, SequenceEnd). The backend must never
// see a sequence without its START (it refuses every later frame: "must
// specify the START flag"), must not lose its END (the sequence slot stays
// taken until its idle timeout), and must see its frames in order. Freshness
// still applies to the frames in between: a stale middle frame is
// superseded or late-dropped as any other.
//
// A frame carrying START or END (with a non-zero id) is pinned: it is never
// superseded nor late-dropped, it runs even stale, and a newer frame of its
// stream waits behind it. The alternative — passing its flags to the frame
// that supersedes it — was rejected: a START late-dropped with no frame
// behind it would have nobody to pass to, an END superseded by the START of
// the next sequence cannot pass at all, and vig would have to rewrite the
// flags in the forwarded message. Pinning changes nothing in the message and
// costs one stale run per sequence boundary. A Latest queue therefore holds,
// besides its one latest frame, up to two pinned ones (the END of a sequence
// and the START of the next); a pinned arrival supersedes an unpinned waiting
// frame, and one that finds both places taken is answered ResourceExhausted
// (rejected) — the client learns it, nothing is lost silently. FIFO queues
// keep their capacity. A client's own Triton timeout still applies under
// the default contract. Drain and a backend marked down answer pinned frames
// Unavailable like the others.
//
// Order: a head whose sequence has a request at the backend (running or
// committed) is not a candidate until that request completes, so frames of
// one sequence are never at the backend together, with any number of slots
// (two frames in flight on separate backend streams may be started in either
// order). A frame of a sequence never joins a batch. Sequences are told
// apart by model and id, as in Triton, whatever their stream.
//
// # Deadlines handed on
//
// A Dispatch carries its Deadline (capture + max_age; Never under the default
// contract) so that the caller can hand the backend the time that remains as
// its queue timeout. A request the backend then drops for that timeout is
// ended with CompleteLate: counted late_dropped, like vig's own late frames,
// and nothing is learnt from it.
//
// # Minimum rate budget
//
// On one slot, a 200 ms VLM job blocks every 50 ms protected detector frame,
// so admission starves the VLM: that is the intended default. MinRateHz on a
// high or best_effort stream is the explicit trade-off: a budget of one run
// per 1/MinRateHz that starts full — the first deferred head of a stream that
// never ran is owed at once, and after that once 1/MinRateHz has passed since
// its last dispatch — is dispatched despite admission (still never
// late, never beside an exclusive job, never beyond the slots). Each such
// dispatch counts BudgetRuns, and BudgetCost adds the guarded frames it was
// predicted to make miss (protected, and high for a best_effort job);
// requests of a guarded stream late-dropped or superseded while such a
// budget job runs count BudgetBlocked on their stream. doctor and
// metrics show these next to the coverage they cost.
//
// # Estimator
//
// Execution time is estimated per (model, occupancy at dispatch) as the p90
// of a window of the last EstimatorWindow samples (observed start to Complete
// with ok; see Pipelined dispatch); the p10 of the same window is the early
// end a commit is timed against. The window starts full of copies of the model's exec prior, so one
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
// (Counters.Balanced; Running counts committed requests too, and
// Snapshot.Committed says how many). Deferred counts requests deferred at
// least once and is not an outcome. Requests that match no stream count in
// Snapshot.Unrouted.
//
// # Drain and backend state
//
// Drain answers every waiting request Unavailable (rejected) and every later
// arrival too; running and committed requests complete normally, and Drained
// reports when nothing is left. SetBackendAvailable(false) does the same until the
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
