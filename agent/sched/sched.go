package sched

import (
	"math"
	"time"
)

type reqState uint8

const (
	stFree reqState = iota
	stWaiting
	stRunning   // started on the accelerator (as far as vig can tell)
	stCommitted // dispatched behind a running job: queued at the backend
)

// request is one entry of the pre-allocated request table.
type request struct {
	token     uint64
	stream    int32
	state     reqState
	deferred  bool // counted as deferred (once per request)
	yielded   bool // counted as yielded to a predicted frame (once per request)
	held      bool // counted as held to land in its own window (once per request)
	filled    bool // counted as waiting for its batch to fill (once per request)
	budget    bool // running on a min_rate_hz budget
	cancelled bool // the client went away while it ran
	variant   bool // a frame of a logical model: its Dispatch names the variant (variant.go)
	coStart   bool // started while another accelerator ran a job (interference.go)
	coPriced  bool // its predicted end includes the interference factor
	capture   Time
	arrival   Time
	deadline  Time   // capture + MaxAge; Never under the default contract
	startBy   Time   // Triton timeout under the default contract; Never otherwise
	rank      uint64 // 0 under a contract; Triton priority order otherwise
	seq       uint64 // arrival order, the last tie-break
	dispatch  Time
	start     Time // observed start: dispatch to a free slot, or the predecessor's Complete
	predEnd   Time // start + cost (margin included): what admission plans with
	expEnd    Time // start + estimate (no margin): the window it is expected to land in
	commitAt  Time // when the job behind it may be committed (see commitAt)
	occ       int32
	slot      int32
	next      int32  // free-list link
	deferPass uint64 // pass in which it was last deferred
	recheck   Time   // when a deferral must be re-evaluated
	key       uint64 // Request.BatchKey: 0 runs alone
	rows      int32  // Request.Rows, at least 1
	bsize     int32  // a dispatched lead's rows: the size its time is learnt under
	bnext     int32  // next member of its batch, -1 at the end
	blead     int32  // a member's lead, -1 for a lead or a request alone
	seqID     uint64 // Request.SequenceID: 0 belongs to no sequence
	seqStart  bool   // carries the sequence's START (sequence.go)
	seqEnd    bool   // carries its END
	deferFor  int32  // the stream it was last reported deferred for + 1 (trace.go)
}

type model struct {
	spec        ModelSpec
	est         []window        // indexed by occupancy at dispatch
	costs       []time.Duration // estimate × margin per occupancy, kept current by refresh
	backendMean time.Duration

	// Interference (interference.go); empty on one accelerator.
	co      []window        // per occupancy: jobs started while another accelerator ran one
	cocosts []time.Duration // their margin-scaled estimates, kept current by refresh
	pm      int64           // its accelerator's factor, per mille

	capped bool // fewer instances than slots (instance.go)

	// Batching (batch.go); empty when MaxBatch ≤ 1.
	maxBatch int
	bat      []window        // per (occupancy, size 2..maxBatch)
	bcost    []time.Duration // their margin-scaled estimates
	batches  []uint64        // jobs dispatched by rows
	scratch  []int64
}

// estimate is the current execution-time estimate at occupancy occ,
// without margin.
func (m *model) estimate(occ int) time.Duration {
	if m.co != nil && !measured(&m.est[occ]) && measured(&m.co[occ]) {
		// Its jobs co-run too often to measure it alone: what they
		// measure, less the factor.
		return max(time.Duration(int64(m.co[occ].p90)*1000/m.pm), m.backendMean)
	}
	return max(m.est[occ].p90, m.backendMean)
}

// refresh recomputes the margin-scaled costs after an estimate changed (a
// division per estimate change, not per decision).
func (m *model) refresh(margin Margin) {
	for o := range m.costs {
		m.costs[o] = margin.Apply(m.estimate(o))
	}
	for o := range m.co {
		m.cocosts[o] = margin.Apply(m.coEstimate(o))
	}
}

type stream struct {
	spec     StreamSpec
	name     string
	idx      int32
	model    int32
	class    Class
	adhoc    bool
	maxAge   time.Duration // 0 under the default contract (no freshness deadline)
	interval time.Duration // frame interval used to predict the next frame
	capacity int
	q        []int32 // waiting requests in queue order (fixed capacity)

	lastCapture Time // newest capture received (protected prediction)
	seen        bool
	lag         time.Duration // arrival − capture, smoothed: when a predicted frame reaches vig
	lagDev      time.Duration // its mean deviation, smoothed: how late a frame may still come

	minRate  time.Duration // budget interval, 1/min_rate_hz; 0 = no budget
	anchor   Time          // last dispatch, or first deferral before any
	anchored bool

	pass       uint64 // pass in which the head was deferred
	bmark      uint64 // pass in which it joined the batch being formed
	lastKey    uint64 // batch key of its newest request: its next frame's, predicted
	running    int
	lateStreak int

	c             Counters
	budgetRuns    uint64
	budgetCost    uint64
	budgetBlocked uint64
	probes        uint64
	yielded       uint64
	held          uint64
	batchWaits    uint64

	// The coverage grid: windows [origin + k·period, …). Told by the
	// config (gridKnown) or learnt at the first capture.
	origin    Time
	gridSet   bool
	period    int64
	delivWin  int64 // newest window with a fresh delivery
	cov       coverageGauge
	newest    Time // newest delivered capture (AoI)
	delivered bool
	lastAge   time.Duration

	lc *copyState // a copy of a logical model's stream in one variant's engine (variant.go); nil otherwise
}

// Scheduler is the freshness scheduler. It is not safe for concurrent use:
// the caller serialises every call (see doc.go).
type Scheduler struct {
	cfg    Config
	slots  int
	margin Margin

	models       []model
	modelByName  map[string]int32
	streams      []stream
	streamByName map[string]int32
	byModel      []int32 // the only configured stream of a model, or -1
	adhoc        []int32 // default-contract stream per model, or -1
	protected    []int32
	guarded      []int32 // protected, then high: what a best_effort job is admitted against

	reqs     []request
	batch    []int32 // the batch being formed (batch.go), lead first
	bid      uint64  // the batch being formed: streams with bmark == bid are in it
	forming  int32   // model of the batchable candidate being decided, or -1
	free     int32
	tokens   tokenIndex
	slotRun  []int32 // request started on each slot, or -1 (a batch: its lead)
	slotNext []int32 // request committed behind it, or -1
	commitQ  []int32 // committed requests in dispatch order (the backend's FIFO)

	candModel  int32 // model of the candidate being decided, or -1 (instance.go)
	ifr        interference
	coDeferred bool // its last pass deferred a job for another accelerator's protected work

	busy          int // started jobs
	committed     int // committed jobs not yet started
	exclRunning   bool
	budgetRunning int
	seq           uint64
	passID        uint64
	draining      bool
	backendDown   bool
	wake          Time
	unrouted      Counters
	epoch         Time // first capture on a stream with a learnt grid
	epochSet      bool
	accelName     string        // the accelerator's name; "" for the backend.slots shorthand
	busyTime      time.Duration // slot time busy up to busyAt: Σ busy × dt
	busyAt        Time
	onDefer       func(now Time, token uint64, stream, forStream int) bool // trace.go
	blockedBy     int32                                                    // the stream admission last found blocked

	// budgetRunningBE counts the running budget jobs of best_effort
	// streams: they are admitted against high frames too, so high
	// losses while one runs are theirs (BudgetBlocked).
	budgetRunningBE int

	// A scheduler over more than one accelerator is a front: one engine —
	// a Scheduler of one accelerator — per accelerator (see Accelerators in
	// doc.go). The front keeps only cfg, margin, slots (the total),
	// draining, backendDown, wake (the earliest of its engines') and the
	// learnt-grid epoch; the tables above stay empty.
	accels       []accel
	streamAt     []streamRef      // front stream index → engine and its index
	partOfName   map[string]int32 // configured stream name → accelerator
	partOfModel  map[string]int32 // model name → accelerator
	fallbackPart int32            // the accelerator whose engine answers an unknown model
	vars         *variants        // logical models and their streams' copies (variant.go); nil without
}

// New validates cfg and builds a scheduler with every table allocated up
// front.
func New(cfg Config) (*Scheduler, error) {
	cfg, name, err := cfg.resolveAccelerators()
	if err != nil {
		return nil, err
	}
	if len(cfg.Accelerators) > 0 {
		return newFront(cfg)
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:          cfg,
		slots:        cfg.Slots,
		margin:       cfg.SafetyMargin,
		modelByName:  make(map[string]int32, len(cfg.Models)),
		streamByName: make(map[string]int32, len(cfg.Streams)),
		slotRun:      make([]int32, cfg.Slots),
		slotNext:     make([]int32, cfg.Slots),
		commitQ:      make([]int32, 0, cfg.Slots),
		wake:         Never,
		accelName:    name,
		forming:      -1,
		candModel:    -1,
		ifr:          interference{pm: 1000},
	}
	for i := range s.slotRun {
		s.slotRun[i], s.slotNext[i] = -1, -1
	}
	w := cfg.EstimatorWindow
	estBuf := make([]int64, len(cfg.Models)*cfg.Slots*2*w)
	maxB := 1
	s.models = make([]model, len(cfg.Models))
	for i, spec := range cfg.Models {
		m := &s.models[i]
		m.spec = spec
		m.capped = spec.Instances > 0 && spec.Instances < cfg.Slots
		m.est = make([]window, cfg.Slots)
		m.costs = make([]time.Duration, cfg.Slots)
		for o := range m.est {
			m.est[o].init(estBuf[:2*w:2*w], spec.Exec)
			estBuf = estBuf[2*w:]
		}
		m.refresh(cfg.SafetyMargin)
		m.initBatch(cfg.Slots, w)
		m.refreshBatch(cfg.SafetyMargin)
		s.modelByName[spec.Name] = int32(i)
		maxB = max(maxB, m.maxBatch)
	}

	nStreams := len(cfg.Streams)
	if cfg.UnknownStreams == DefaultContract {
		nStreams += len(cfg.Models)
	}
	s.streams = make([]stream, 0, nStreams)
	s.byModel = make([]int32, len(cfg.Models))
	s.adhoc = make([]int32, len(cfg.Models))
	for i := range s.byModel {
		s.byModel[i], s.adhoc[i] = -1, -1
	}
	perModel := make([]int, len(cfg.Models))
	// Running and committed jobs (each of up to maxB requests), plus an
	// arrival before it supersedes.
	tableSize := 2*cfg.Slots*maxB + 1
	for _, spec := range cfg.Streams {
		mi := s.modelByName[spec.Model]
		st := stream{
			spec:     spec,
			name:     spec.Name,
			idx:      int32(len(s.streams)),
			model:    mi,
			class:    spec.Class,
			maxAge:   spec.MaxAge,
			interval: spec.FrameInterval,
			capacity: max(spec.Capacity, 1),
			period:   int64(spec.Period),
			delivWin: math.MinInt64,
		}
		if spec.WindowAligned {
			st.origin, st.gridSet = Time(spec.WindowOffset), true
		}
		if st.interval == 0 {
			st.interval = spec.Period
		}
		if spec.Queue == Latest {
			st.capacity = 1 + pinSlots // room for frames carrying START or END (sequence.go)
		}
		if spec.MinRateHz > 0 {
			st.minRate = time.Duration(math.Ceil(float64(time.Second) / spec.MinRateHz))
		}
		idx := int32(len(s.streams))
		s.streams = append(s.streams, st)
		s.streamByName[spec.Name] = idx
		if spec.Class == Protected {
			s.protected = append(s.protected, idx)
		}
		perModel[mi]++
		s.byModel[mi] = idx
		tableSize += st.capacity
	}
	s.guarded = append(s.guarded, s.protected...)
	for i := range s.streams {
		if s.streams[i].class == High {
			s.guarded = append(s.guarded, int32(i))
		}
	}
	for mi, n := range perModel {
		if n != 1 {
			s.byModel[mi] = -1
		}
	}
	if cfg.UnknownStreams == DefaultContract {
		for mi, m := range cfg.Models {
			s.adhoc[mi] = int32(len(s.streams))
			s.streams = append(s.streams, stream{
				spec: StreamSpec{
					Name: "default/" + m.Name, Model: m.Name, Class: BestEffort,
					Queue: FIFO, Capacity: cfg.DefaultCapacity,
				},
				name:     "default/" + m.Name,
				idx:      int32(len(s.streams)),
				model:    int32(mi),
				class:    BestEffort,
				adhoc:    true,
				capacity: cfg.DefaultCapacity,
			})
			tableSize += cfg.DefaultCapacity
		}
	}
	qBuf := make([]int32, tableSize)
	for i := range s.streams {
		st := &s.streams[i]
		st.q = qBuf[:0:st.capacity]
		qBuf = qBuf[st.capacity:]
		if !st.adhoc {
			n := int64(cfg.CoverageSpan / st.spec.Period)
			n = min(max(n, 1), maxCoverageWindows)
			st.cov.init(make([]uint64, (n+63)/64), n, st.spec.Period)
		}
	}
	s.batch = make([]int32, 0, len(s.streams)+1)
	s.reqs = make([]request, tableSize)
	for i := range s.reqs {
		s.reqs[i].next = int32(i + 1)
	}
	s.reqs[len(s.reqs)-1].next = -1
	s.tokens = newTokenIndex(tableSize)
	return s, nil
}

// NumStreams returns the number of streams, default-contract streams
// included; Action.Stream and Snapshot.Streams index them.
func (s *Scheduler) NumStreams() int {
	if s.multi() {
		return len(s.streamAt)
	}
	return len(s.streams)
}

// StreamName returns the name of stream i (as in Action.Stream), or "" for
// an index out of range such as -1 (unrouted).
func (s *Scheduler) StreamName(i int) string {
	if s.multi() {
		if i < 0 || i >= len(s.streamAt) {
			return ""
		}
		ref := s.streamAt[i]
		return s.accels[ref.part].e.streams[ref.local].name
	}
	if i < 0 || i >= len(s.streams) {
		return ""
	}
	return s.streams[i].name
}

// StreamClass returns the class of stream i (as in Action.Stream), or
// BestEffort for an index out of range such as -1 (unrouted).
func (s *Scheduler) StreamClass(i int) Class {
	if s.multi() {
		if i < 0 || i >= len(s.streamAt) {
			return BestEffort
		}
		ref := s.streamAt[i]
		return s.accels[ref.part].e.streams[ref.local].class
	}
	if i < 0 || i >= len(s.streams) {
		return BestEffort
	}
	return s.streams[i].class
}

// Margin returns the configured safety margin.
func (s *Scheduler) Margin() Margin { return s.margin }

// Estimate returns the current execution-time estimate of model at
// occupancy busy (jobs already running at dispatch), without margin.
func (s *Scheduler) Estimate(model string, busy int) (time.Duration, bool) {
	if s.multi() {
		if e := s.engineOf(model); e != nil {
			return e.Estimate(model, busy)
		}
		return 0, false
	}
	mi, ok := s.modelByName[model]
	if !ok || busy < 0 || busy >= s.slots {
		return 0, false
	}
	return s.models[mi].estimate(busy), true
}

// cost is the margin-scaled estimate of model mi started at occupancy occ.
func (s *Scheduler) cost(mi int32, occ int) time.Duration {
	m := &s.models[mi]
	if m.spec.Exclusive || occ < 0 {
		occ = 0
	}
	if occ >= s.slots {
		occ = s.slots - 1
	}
	return m.costs[occ]
}

// route maps a request to a stream index, or returns a reason to refuse it.
func (s *Scheduler) route(r *Request) (int32, Code, Reason) {
	name := r.Stream
	if name == "" {
		name = r.Model
	}
	if si, ok := s.streamByName[name]; ok {
		if s.streams[si].spec.Model != r.Model {
			return si, InvalidArgument, ReasonModelMismatch
		}
		return si, OK, NoReason
	}
	mi, ok := s.modelByName[r.Model]
	if !ok {
		return -1, NotFound, ReasonUnknownModel
	}
	if r.Stream == "" && s.byModel[mi] >= 0 {
		// No vig_stream, and exactly one stream is configured for the
		// model: that is the stream the client means.
		return s.byModel[mi], OK, NoReason
	}
	if s.adhoc[mi] >= 0 {
		return s.adhoc[mi], OK, NoReason
	}
	return -1, NotFound, ReasonUnknownStream
}

// Arrive admits a request and returns the actions it causes: possibly an
// Answer for it (refused, superseded on arrival), an Answer superseding the
// older waiting frame, and any Dispatch the arrival makes possible.
func (s *Scheduler) Arrive(now Time, r Request, acts []Action) []Action {
	if s.multi() {
		return s.frontArrive(now, r, acts)
	}
	return s.arrive(now, r, false, acts)
}

// arrive is Arrive on one accelerator; dup says the token is live on
// another accelerator's engine.
func (s *Scheduler) arrive(now Time, r Request, dup bool, acts []Action) []Action {
	si, code, reason := s.route(&r)
	if dup || s.tokens.get(r.Token) >= 0 {
		// First, so the caller can tell this answer from one about the
		// live request with the same token.
		code, reason = InvalidArgument, ReasonDuplicateToken
	}
	if si < 0 {
		s.unrouted.Received++
		s.unrouted.Rejected++
		return append(acts, Action{Kind: Answer, Token: r.Token, Stream: -1, Code: code, Outcome: Rejected, Reason: reason})
	}
	st := &s.streams[si]
	st.c.Received++
	capture := r.Capture
	if capture == 0 {
		capture = now
	}
	switch {
	case code != OK:
	case s.draining:
		code, reason = Unavailable, ReasonDraining
	case s.backendDown:
		code, reason = Unavailable, ReasonBackendDown
	case r.Timeout < 0:
		code, reason = InvalidArgument, ReasonBadTimeout
	case capture > now.Add(s.cfg.CaptureSkew):
		code, reason = InvalidArgument, ReasonCaptureFuture
	case capture < now-Time(s.cfg.CaptureHorizon): // no overflow for hostile captures
		code, reason = InvalidArgument, ReasonCaptureTooOld
	case st.spec.Queue == FIFO && len(st.q) == st.capacity:
		code, reason = ResourceExhausted, ReasonQueueFull
	case st.spec.Queue == Latest && s.latestFull(st):
		code, reason = ResourceExhausted, ReasonQueueFull
	case s.free < 0:
		code, reason = ResourceExhausted, ReasonTableFull
	}
	if code != OK {
		st.c.Rejected++
		return append(acts, Action{Kind: Answer, Token: r.Token, Stream: int(si), Code: code, Outcome: Rejected, Reason: reason})
	}
	capture = min(capture, now) // within the tolerated skew

	ri := s.free
	q := &s.reqs[ri]
	s.free = q.next
	s.seq++
	*q = request{
		token: r.Token, stream: si, state: stWaiting, capture: capture, arrival: now,
		deadline: Never, startBy: Never, seq: s.seq, next: -1, slot: -1,
		rows: int32(max(r.Rows, 1)), bnext: -1, blead: -1,
		seqID: r.SequenceID, seqStart: r.SequenceStart && r.SequenceID != 0, seqEnd: r.SequenceEnd && r.SequenceID != 0,
		variant: r.variant,
	}
	if s.models[st.model].maxBatch > 1 && r.SequenceID == 0 {
		// A frame of a sequence runs alone: its state lives in the
		// backend's sequence slot.
		q.key = r.BatchKey
		st.lastKey = r.BatchKey
	}
	s.tokens.put(r.Token, ri)
	if st.adhoc {
		q.rank = math.MaxUint64 // Triton's default priority level comes last
		if r.HasPriority && r.Priority > 0 {
			q.rank = r.Priority // 1 is Triton's highest priority
		}
		if r.Timeout > 0 {
			q.startBy = now.Add(r.Timeout)
		}
	} else {
		q.deadline = capture.Add(st.maxAge)
		if !st.seen || capture > st.lastCapture {
			st.lastCapture, st.seen = capture, true
		}
		// An EWMA with gain 1/8 of how late frames reach vig after their
		// capture; the look-ahead expects predicted frames that much later.
		d := now.Sub(capture) - st.lag
		st.lag += d / 8
		st.lagDev += (max(d, -d) - st.lagDev) / 4
		if !st.gridSet {
			// Learnt: the grid of every stream without a told one starts
			// at the first capture vig sees on any of them (the session's
			// start).
			if !s.epochSet {
				s.epoch, s.epochSet = capture, true
			}
			st.origin, st.gridSet = s.epoch, true
		}
		st.cov.start(st.windowStart(st.win(capture)))
	}

	if st.spec.Queue == Latest {
		var gone bool
		if acts, gone = s.latestArrive(st, ri, acts); gone {
			return s.pass(now, acts)
		}
	}
	if st.adhoc {
		// Triton's priority levels: FIFO within a level, lower levels
		// first.
		j := len(st.q)
		for j > 0 && s.reqs[st.q[j-1]].rank > q.rank {
			j--
		}
		st.q = append(st.q, 0)
		copy(st.q[j+1:], st.q[j:])
		st.q[j] = ri
		return s.pass(now, acts)
	}
	st.q = append(st.q, ri)
	return s.pass(now, acts)
}

// answer finishes a waiting request (already removed from its queue) with
// an Answer.
func (s *Scheduler) answer(ri int32, code Code, out Outcome, reason Reason, acts []Action) []Action {
	r := &s.reqs[ri]
	st := &s.streams[r.stream]
	st.c.add(out)
	if (out == LateDropped || out == Superseded) && (st.class == Protected && (s.budgetRunning > 0 || s.coBudget()) || st.class == High && s.budgetRunningBE > 0) {
		st.budgetBlocked++
	}
	acts = append(acts, Action{Kind: Answer, Token: r.token, Stream: int(r.stream), Code: code, Outcome: out, Reason: reason})
	s.release(ri)
	return acts
}

func (s *Scheduler) release(ri int32) {
	r := &s.reqs[ri]
	s.tokens.del(r.token)
	r.state = stFree
	r.next = s.free
	s.free = ri
}

// win is the index of the coverage window containing t (floor division, so
// times before the origin have negative indices).
func (st *stream) win(t Time) int64 {
	d := int64(t - st.origin)
	k := d / st.period
	if d < 0 && d%st.period != 0 {
		k--
	}
	return k
}

func (st *stream) windowStart(k int64) Time { return st.origin + Time(k*st.period) }
func (st *stream) windowEnd(k int64) Time   { return st.origin + Time((k+1)*st.period) }

// claimed is the newest window of st that has a fresh result or is expected
// to get one from a job of st already at the backend — on any accelerator,
// for a copy of a logical model's stream.
func (s *Scheduler) claimed(st *stream) int64 {
	k := s.claimedHere(st)
	if st.lc != nil {
		for _, t := range st.lc.twins {
			k = max(k, t.e.claimedHere(&t.e.streams[t.st]))
		}
	}
	return k
}

// claimedHere is claimed counting the jobs of this engine only.
func (s *Scheduler) claimedHere(st *stream) int64 {
	k := st.delivWin
	if st.running == 0 {
		return k
	}
	for i := range s.slotRun {
		for _, x := range [2]int32{s.slotRun[i], s.slotNext[i]} {
			if x < 0 {
				continue
			}
			for ; x >= 0; x = s.reqs[x].bnext {
				r := &s.reqs[x]
				if r.stream == st.idx && r.expEnd < r.deadline {
					k = max(k, st.win(r.expEnd))
				}
			}
		}
	}
	return k
}

// rankKey is what the ranking compares (see doc.go, Dispatch and Extra
// frames).
type rankKey struct {
	// extra: its result would land in a window of its stream already
	// claimed (a frame beyond the contract); it then ranks as best_effort.
	extra bool
	lax   int64 // target − predicted completion; MaxInt64 without a deadline
}

// key computes the rank of st's head if it started at start with cost c.
func (s *Scheduler) key(st *stream, r *request, start Time, c time.Duration) rankKey {
	if r.deadline == Never {
		return rankKey{lax: math.MaxInt64}
	}
	tc := start.Add(c)
	w := st.win(tc)
	k := rankKey{}
	if cl := s.claimed(st); w <= cl {
		k.extra, w = true, cl+1
	}
	k.lax = int64(min(r.deadline, st.windowEnd(w))) - int64(tc)
	return k
}

// before reports whether the head of stream a goes before the head of b,
// given their rank keys: a head that is not an extra before every extra,
// then under OrderLaxity smallest laxity; then class (every extra counts as
// best_effort), Triton priority (default contract only), earliest
// deadline, arrival.
func (s *Scheduler) before(a, b *stream, ka, kb rankKey) bool {
	if ka.extra != kb.extra {
		return kb.extra
	}
	if s.cfg.Order == OrderLaxity && ka.lax != kb.lax {
		return ka.lax < kb.lax
	}
	if a.class != b.class && !ka.extra {
		return a.class < b.class
	}
	ra, rb := &s.reqs[a.q[0]], &s.reqs[b.q[0]]
	if ra.rank != rb.rank {
		return ra.rank < rb.rank
	}
	da, db := min(ra.deadline, ra.startBy), min(rb.deadline, rb.startBy)
	if da != db {
		return da < db
	}
	return ra.seq < rb.seq
}

// place finds where the next job can go at now: the lowest free slot
// (start now), or — pipelined — a busy slot with nothing committed behind
// it whose running job may end within CommitLead (start at its predicted
// end). It returns slot -1 when nothing can be placed.
//
// A slot held for a batch that fills (avoid, see Batching in doc.go) is
// taken only when no other slot is.
func (s *Scheduler) place(now Time, avoid int) (slot int, start Time, queued bool) {
	if s.exclRunning && s.slots > 1 {
		return -1, 0, false // the accelerator is reserved for the exclusive job
	}
	if s.busy < s.slots {
		held := false
		for i, x := range s.slotRun {
			if x < 0 {
				if i != avoid {
					return i, now, false
				}
				held = true
			}
		}
		if held {
			return avoid, now, false
		}
	}
	if s.cfg.NoPipeline {
		return -1, 0, false
	}
	slot, start = -1, Never
	for i, x := range s.slotRun {
		if x < 0 || s.slotNext[i] >= 0 || s.reqs[x].commitAt > now {
			continue
		}
		e := max(s.reqs[x].predEnd, now)
		if i == avoid {
			e = Never - 1 // last resort
		}
		if e < start {
			slot, start = i, e
		}
	}
	if slot == avoid && slot >= 0 {
		start = max(s.reqs[s.slotRun[slot]].predEnd, now)
	}
	return slot, start, slot >= 0
}

// commitAt is when the job behind a request started at start may be
// committed: its earliest plausible end (the p10 of its model's estimates at
// its occupancy) minus CommitLead.
func (s *Scheduler) commitAt(m *model, occ int32, start Time) Time {
	return start.Add(s.coScale(m.est[occ].p10, start) - s.cfg.CommitLead)
}

// occAt is the occupancy a job placed on slot at start would run under:
// the other slots still busy then.
func (s *Scheduler) occAt(now, start Time, slot int) int {
	n := 0
	for i := range s.slotRun {
		if i != slot && s.slotFree(i, now) > start {
			n++
		}
	}
	return n
}

// pass takes every decision possible at now: it dispatches, commits, drops
// and defers waiting requests, then recomputes the next wake-up.
func (s *Scheduler) pass(now Time, acts []Action) []Action {
	s.account(now)
	s.syncCo(now)
	s.coDeferred = false
	s.passID++
	holdSlot, holdAt := -1, Never // a slot held for a batch that fills, and until when
	defer func() { s.forming, s.candModel = -1, -1 }()
	for !s.draining && !s.backendDown {
		slot, start, queued := s.place(now, holdSlot)
		if slot < 0 {
			break
		}
		occ := s.busy
		if queued {
			occ = s.occAt(now, start, slot)
		}
		var st *stream
		var sk rankKey
		for i := range s.streams {
			c := &s.streams[i]
			if len(c.q) == 0 || c.pass == s.passID {
				continue
			}
			h := &s.reqs[c.q[0]]
			if s.seqBusy(c.model, h.seqID) {
				continue // its sequence's previous frame is still at the backend
			}
			cc := s.costAt(c.model, occ, start)
			if s.batchable(c, h) {
				cc = s.costNAt(c.model, occ, s.heads(c, h, occ), start)
			}
			ck := s.key(c, h, start, cc)
			if st == nil || s.before(c, st, ck, sk) {
				st, sk = c, ck
			}
		}
		if st == nil {
			break
		}
		ri := st.q[0]
		r := &s.reqs[ri]
		m := &s.models[st.model]
		s.candModel = st.model
		if !s.instanceFree(st.model, slot, queued) {
			// Every instance of its model is taken: it may only be
			// committed behind a job of its own model.
			i := s.ownSlot(now, st.model, holdSlot)
			if i < 0 {
				st.pass = s.passID
				continue
			}
			slot, start, queued = i, max(s.reqs[s.slotRun[i]].predEnd, now), true
			occ = s.occAt(now, start, slot)
		}

		if now > r.startBy {
			st.q = st.q[:copy(st.q, st.q[1:])]
			acts = s.answer(ri, Unavailable, LateDropped, ReasonQueueTimeout, acts)
			continue
		}
		excl := m.spec.Exclusive && s.slots > 1
		if queued && excl {
			// The backend would start it beside the jobs still running.
			st.pass = s.passID
			continue
		}
		jobOcc := occ
		wait := excl && s.busy > 0
		if excl {
			jobOcc = 0
			if wait {
				// It waits for the accelerator to empty; meanwhile
				// nothing of lower rank may start unless this job would
				// be deferred there anyway.
				for i := range s.slotRun {
					start = max(start, s.slotFree(i, now))
				}
			}
		}
		c := s.costAt(st.model, jobOcc, start)
		probe := false
		if start.Add(c) > r.deadline {
			if queued {
				// Late if it started behind the running job: leave it
				// waiting; the slot's completion re-evaluates it.
				st.pass = s.passID
				continue
			}
			if r.pinned() {
				// A sequence's START or END runs even stale (sequence.go).
			} else if r.deadline > now && s.cfg.ProbeAfter > 0 && st.lateStreak >= s.cfg.ProbeAfter && !wait {
				probe = true
			} else {
				s.countStarved(st, r, c, now)
				st.q = st.q[:copy(st.q, st.q[1:])]
				acts = s.answer(ri, DeadlineExceeded, LateDropped, ReasonLate, acts)
				continue
			}
		}
		// Batching: the waiting heads that join this one, or a wait for a
		// frame about to come (see Batching in doc.go).
		s.forming, s.bid = -1, s.bid+1
		n, rows := 1, int(r.rows)
		if !probe && s.batchable(st, r) {
			s.forming = st.model
			n, rows = s.gather(start, jobOcc, st)
			if until, latest, ok := s.fill(now, start, jobOcc, st, n, rows); ok {
				s.holdBatch(n, until, true)
				if holdSlot < 0 {
					holdSlot, holdAt = slot, latest
				}
				continue
			}
		}
		if m.maxBatch > 1 && rows > 1 {
			c = s.costNAt(st.model, jobOcc, min(rows, m.maxBatch), start)
		} else {
			if n == 1 && sk.extra && s.batchable(st, r) && s.gains(st.model, jobOcc, 1, 1, 0) && s.hasPeers(now, st) {
				// An extra of a batching model alone would only double
				// a window, on slot time its model's next batch needs:
				// it waits to join that batch, or is superseded, or —
				// once starting it would land in the next window,
				// which it then serves — it runs.
				next := st.windowStart(s.claimed(st)+1) - Time(c)
				if next > now {
					r.deferPass, r.recheck = s.passID, next
					st.pass = s.passID
					continue
				}
			}
			s.forming = -1 // a job of one: the look-ahead prices its peers' frames as it always has
		}
		if slot == holdSlot && start.Add(c) > holdAt {
			// The slot is held for a batch that fills; this job would
			// still run when the batch is due.
			st.pass = s.passID
			continue
		}
		budget, cost := false, uint64(0)
		guarded, guardHigh := st.class != Protected || sk.extra, st.class == BestEffort && !sk.extra
		if n > 1 {
			guarded, guardHigh = s.batchGuards(start, c, n)
		}
		if guarded && (len(s.protected) > 0 || guardHigh && len(s.guarded) > 0 || s.coGuards()) {
			blocked, misses, recheck := s.admission(now, start, slot, st.idx, excl, guardHigh, c)
			for blocked && n > 1 {
				// A smaller batch may fit where this one blocks a
				// protected frame: drop the least urgent.
				n--
				s.streams[s.reqs[s.batch[n]].stream].bmark = 0
				s.batch = s.batch[:n]
				rows = s.batchRows(n)
				c = s.costNAt(st.model, jobOcc, rows, start)
				if n > 1 {
					guarded, guardHigh = s.batchGuards(start, c, n)
				} else {
					guarded, guardHigh = st.class != Protected || sk.extra, st.class == BestEffort && !sk.extra
					c = s.costAt(st.model, jobOcc, start)
					s.forming = -1
				}
				if !guarded {
					blocked = false
					break
				}
				blocked, misses, recheck = s.admission(now, start, slot, st.idx, excl, guardHigh, c)
			}
			if guarded && s.coGuards() {
				blocked, misses, recheck = s.coAdmission(now, start, start.Add(c), blocked, misses, recheck)
			}
			if blocked {
				if !st.anchored {
					// The budget starts with one run owed (a token bucket
					// of depth one, full): a stream that never ran is
					// owed its first run at once, then one per interval.
					st.anchor, st.anchored = now.Add(-st.minRate), true
				}
				owed := st.minRate > 0 && now >= st.anchor.Add(st.minRate)
				if !owed {
					if !r.deferred {
						r.deferred = true
						st.c.Deferred++
					}
					if s.onDefer != nil {
						s.deferred(now, r, st.idx)
					}
					r.deferPass = s.passID
					r.recheck = recheck
					if st.minRate > 0 {
						r.recheck = min(recheck, st.anchor.Add(st.minRate))
					}
					st.pass = s.passID
					continue
				}
				budget = true
				cost = misses
			}
		}
		if !budget && !probe && !wait && rows == 1 && s.cfg.Order == OrderLaxity && r.deadline != Never {
			// Landing in a window (doc.go): an extra that would double its
			// window keeps the stream's late pace; a contract frame that
			// could land early waits for its own window.
			early, fastest := s.earliest(now, slot, start, queued), s.quantile(m, jobOcc, start, (*window).fastest)
			hold := s.landsEarly
			if sk.extra {
				hold = s.keepsLate
			}
			if until, ok := hold(st, r, early, start, c, fastest); ok {
				if !r.held {
					r.held = true
					st.held++
				}
				r.deferPass = s.passID
				r.recheck = until
				st.pass = s.passID
				continue
			}
		}
		if !budget && !wait && rows > 1 && n > 1 && s.cfg.Order == OrderLaxity {
			if until, ok := s.batchLandsEarly(start, jobOcc, st, n, rows, c); ok {
				s.holdBatch(n, until, false)
				if holdSlot < 0 {
					holdSlot, holdAt = slot, until
				}
				continue
			}
		}
		if !budget && !probe && !wait && (sk.extra || s.cfg.Order == OrderLaxity && sk.lax != math.MaxInt64) {
			jTarget := start.Add(c) + Time(sk.lax)
			y, recheck := false, Never
			if sk.extra {
				y, recheck = s.extraYields(now, start, slot, st, excl, c)
			} else if s.slots == 1 {
				y, recheck = s.lookaheadOne(now, start, st, c, jTarget)
			} else {
				y, recheck = s.lookahead(now, start, slot, st, excl, c, jTarget)
			}
			if y {
				if !r.yielded {
					r.yielded = true
					st.yielded++
				}
				r.deferPass = s.passID
				r.recheck = recheck
				st.pass = s.passID
				continue
			}
		}
		if wait {
			break // reserve the accelerator for the exclusive job
		}
		if budget {
			st.budgetRuns++
			st.budgetCost += cost
		}
		if m.maxBatch > 1 && rows > 1 {
			acts = s.dispatchBatch(now, n, rows, slot, start, queued, jobOcc, c, budget, acts)
			continue
		}
		if m.maxBatch > 1 {
			m.batches[min(rows, m.maxBatch)]++ // a job of one request
		}
		acts = s.dispatchHead(now, st, slot, start, queued, jobOcc, c, probe, budget, acts)
	}
	return s.expire(now, acts)
}

// account adds the slot time busy since the last event (busy changes only in
// events, and each accounts before it changes anything).
func (s *Scheduler) account(now Time) {
	if now > s.busyAt {
		s.busyTime += time.Duration(s.busy) * now.Sub(s.busyAt)
		s.busyAt = now
	}
}

// landsEarly reports whether a head placed at start should wait so that its
// result lands in the window it is for (see Landing in a window in doc.go):
// its fastest plausible result (early, its earliest plausible start, + the
// shortest execution time in its estimator window) would land in a window of
// its stream already claimed —
// doubling it — while its predicted one (start + c) lands in a later window,
// not claimed. It is then held until windowStart(w) − fastest, when even its
// fastest result lands in w, provided it
// still meets its target (deadline and w's end) from there and the hold ends
// before the stream's next frame is due.
func (s *Scheduler) landsEarly(st *stream, r *request, early, start Time, c, fastest time.Duration) (Time, bool) {
	cl := s.claimed(st)
	if st.win(early.Add(fastest)) > cl {
		return 0, false
	}
	w := st.win(start.Add(c))
	if w <= cl {
		return 0, false
	}
	until := st.windowStart(w) - Time(fastest)
	if until <= early || until.Add(c) > min(r.deadline, st.windowEnd(w)) {
		return 0, false
	}
	if until >= st.lastCapture.Add(st.interval) {
		return 0, false // a newer frame comes first: holding this one only loses it
	}
	return until, true
}

// keepsLate reports whether a frame whose result would land in its own
// capture window, already covered by an older frame's late result, should
// wait until even its fastest result (from early, its earliest plausible
// start) lands in the next window (see Landing in a window in doc.go): the
// stream then keeps one result per window
// instead of doubling this one and leaving the next empty. The hold must
// still meet the frame's target (deadline and the next window's end) and
// end before the stream's next frame is due.
func (s *Scheduler) keepsLate(st *stream, r *request, early, start Time, c, fastest time.Duration) (Time, bool) {
	cl := s.claimed(st)
	if st.win(r.capture) != cl || !s.claimedLate(st, cl) {
		return 0, false
	}
	until := st.windowStart(cl+1) - Time(fastest)
	if until <= early || until.Add(c) > min(r.deadline, st.windowEnd(cl+1)) {
		return 0, false
	}
	if until >= st.lastCapture.Add(st.interval) {
		return 0, false // a newer frame comes first: holding this one only loses it
	}
	return until, true
}

// claimedLate reports whether window cl of st is claimed by a frame captured
// in an earlier window: its newest delivery, or a job of st at the backend
// predicted to end in cl.
func (s *Scheduler) claimedLate(st *stream, cl int64) bool {
	if st.delivered && st.delivWin == cl && st.win(st.newest) < cl {
		return true
	}
	if st.running == 0 {
		return false
	}
	for i := range s.slotRun {
		for _, x := range [2]int32{s.slotRun[i], s.slotNext[i]} {
			for ; x >= 0; x = s.reqs[x].bnext {
				r := &s.reqs[x]
				if r.stream == st.idx && r.expEnd < r.deadline && st.win(r.expEnd) == cl && st.win(r.capture) < cl {
					return true
				}
			}
		}
	}
	return false
}

// earliest is the earliest plausible start of a job placed on slot at start:
// start itself on a free slot; behind a running job (queued), that job's
// earliest plausible end (the p10 its commitAt was set from), which may come
// well before its predicted one. A hold decided from the predicted start alone
// would commit a job that then starts, and lands, early.
func (s *Scheduler) earliest(now Time, slot int, start Time, queued bool) Time {
	if !queued {
		return start
	}
	return min(start, max(now, s.reqs[s.slotRun[slot]].commitAt.Add(s.cfg.CommitLead)))
}

// slotFree is when slot i is predicted to be free: the predicted end of the
// last job on it, or now.
func (s *Scheduler) slotFree(i int, now Time) Time {
	if x := s.slotNext[i]; x >= 0 {
		return max(s.reqs[x].predEnd, now)
	}
	if x := s.slotRun[i]; x >= 0 {
		return max(s.reqs[x].predEnd, now)
	}
	return now
}

// countStarved counts a late drop toward the next probe when the estimate
// alone condemned the request: it would have missed even if started on
// arrival, yet its deadline has not passed.
func (s *Scheduler) countStarved(st *stream, r *request, c time.Duration, now Time) {
	if r.deadline > now && r.arrival.Add(c) > r.deadline {
		st.lateStreak++
	}
}

// dispatchHead sends the head of st's queue to slot: started at now on a
// free slot, or committed behind the running job (queued) with its predicted
// start.
func (s *Scheduler) dispatchHead(now Time, st *stream, slot int, start Time, queued bool, occ int, c time.Duration, probe, budget bool, acts []Action) []Action {
	ri := st.q[0]
	st.q = st.q[:copy(st.q, st.q[1:])]
	r := &s.reqs[ri]
	m := &s.models[st.model]
	r.dispatch = now
	r.occ = int32(occ)
	r.slot = int32(slot)
	r.budget = budget
	r.start = start
	r.predEnd = start.Add(c)
	r.coPriced = s.coAt(start)
	r.expEnd = start.Add(s.estimateAt(m, occ, 1, start))
	if queued {
		r.state = stCommitted
		s.slotNext[slot] = ri
		s.commitQ = append(s.commitQ, ri)
		s.committed++
	} else {
		r.state = stRunning
		s.started(r)
		r.commitAt = s.commitAt(m, r.occ, start)
		s.slotRun[slot] = ri
		s.busy++
		if m.spec.Exclusive {
			s.exclRunning = true
		}
	}
	if budget {
		s.budgetRunning++
		if st.class == BestEffort {
			s.budgetRunningBE++
		}
	}
	st.running++
	st.lateStreak = 0
	st.anchor, st.anchored = now, true
	if probe {
		st.probes++
	}
	return append(acts, Action{Kind: Dispatch, Token: r.token, Stream: int(r.stream), Slot: slot, Busy: occ, Deadline: r.deadline,
		Capture: r.capture, Waited: now.Sub(r.arrival), Probe: probe, Budget: budget, Queued: queued, Start: start})
}

// expire answers every waiting request that can no longer meet its deadline
// even if it started now, and computes the next wake-up: the earliest time
// at which a waiting request will have to be dropped, a deferral
// re-evaluated, or a job committed behind a running one.
func (s *Scheduler) expire(now Time, acts []Action) []Action {
	s.wake = Never
	waiting := false
	for i := range s.streams {
		st := &s.streams[i]
		for j := 0; j < len(st.q); {
			ri := st.q[j]
			r := &s.reqs[ri]
			if r.startBy != Never {
				if now > r.startBy {
					st.q = append(st.q[:j], st.q[j+1:]...)
					acts = s.answer(ri, Unavailable, LateDropped, ReasonQueueTimeout, acts)
					continue
				}
				s.wake = min(s.wake, r.startBy+1)
			}
			if r.deadline != Never && !r.pinned() {
				c := s.costAt(st.model, s.busy, now)
				if now.Add(c) > r.deadline {
					s.countStarved(st, r, c, now)
					st.q = append(st.q[:j], st.q[j+1:]...)
					acts = s.answer(ri, DeadlineExceeded, LateDropped, ReasonLate, acts)
					continue
				}
				s.wake = min(s.wake, r.deadline-Time(c)+1)
			}
			if r.deferPass == s.passID {
				s.wake = min(s.wake, r.recheck)
			}
			waiting = true
			j++
		}
	}
	if waiting && !s.cfg.NoPipeline && !s.draining && !s.backendDown {
		for i, x := range s.slotRun {
			if x >= 0 && s.slotNext[i] < 0 {
				if t := s.reqs[x].commitAt; t > now {
					s.wake = min(s.wake, t)
				}
			}
		}
	}
	return acts
}

// Complete reports that the backend finished a dispatched request (ok) or
// failed it (!ok). The slot is freed, the execution time is learnt under the
// occupancy recorded at dispatch, and freed capacity is used at once: the
// oldest committed request is taken to have started now (the backend's
// queue is FIFO). A token that is not at the backend is ignored.
func (s *Scheduler) Complete(now Time, token uint64, ok bool, acts []Action) []Action {
	out := Forwarded
	if !ok {
		out = BackendError
	}
	return s.finish(now, token, out, acts)
}

// CompleteLate reports that the backend dropped a dispatched request for the
// timeout vig handed it (see Deadlines handed on in doc.go): like Complete
// with !ok, but the request (every member of its batch) is counted
// late_dropped, as vig's own late frames are.
func (s *Scheduler) CompleteLate(now Time, token uint64, acts []Action) []Action {
	return s.finish(now, token, LateDropped, acts)
}

// finish ends a dispatched request with outcome out: Forwarded,
// BackendError or LateDropped.
func (s *Scheduler) finish(now Time, token uint64, out Outcome, acts []Action) []Action {
	if s.multi() {
		return s.frontFinish(now, token, out, acts)
	}
	ok := out == Forwarded
	ri := s.tokens.get(token)
	if ri < 0 || (s.reqs[ri].state != stRunning && s.reqs[ri].state != stCommitted) || s.reqs[ri].blead >= 0 {
		return acts // not at the backend, or a member of a batch: its lead completes it
	}
	s.account(now)
	r := &s.reqs[ri]
	st := &s.streams[r.stream]
	m := &s.models[st.model]
	if r.state == stCommitted {
		// Finished (or failed, or cancelled) before vig saw it start: the
		// job it was queued behind still runs, and without a start there
		// is no sample to learn.
		s.uncommit(ri)
	} else {
		slot := int(r.slot)
		s.slotRun[slot] = -1
		s.busy--
		if m.spec.Exclusive {
			s.exclRunning = false
		}
		if ok {
			// From its observed start: the dispatch to a free slot, or
			// the predecessor's Complete for a pipelined job — so the
			// time it queued at the backend is not counted.
			s.learn(m, r, max(int(r.bsize), 1), now.Sub(r.start))
		}
		s.syncCo(now)
		for _, x := range s.commitQ {
			// The oldest committed job whose model has an instance free
			// (instance.go); a job behind its own model's still running
			// one waits for that.
			if s.startable(x) {
				s.promote(now, x, slot)
				break
			}
		}
	}
	if r.budget {
		s.budgetRunning--
		if st.class == BestEffort {
			s.budgetRunningBE--
		}
	}
	s.finishMembers(now, ri, out)
	st.running--
	switch {
	case r.cancelled:
		st.c.Cancelled++
	case ok:
		st.c.Forwarded++
		s.deliver(now, st, r.capture)
	default:
		st.c.add(out)
	}
	s.release(ri)
	return s.pass(now, acts)
}

// uncommit removes a committed request from the backend queue model.
func (s *Scheduler) uncommit(ri int32) {
	r := &s.reqs[ri]
	if s.slotNext[r.slot] == ri {
		s.slotNext[r.slot] = -1
	}
	for i, x := range s.commitQ {
		if x == ri {
			s.commitQ = s.commitQ[:i+copy(s.commitQ[i:], s.commitQ[i+1:])]
			break
		}
	}
	s.committed--
}

// promote starts committed request ri on slot at now: the backend began it
// when the job before it ended.
func (s *Scheduler) promote(now Time, ri int32, slot int) {
	s.uncommit(ri)
	r := &s.reqs[ri]
	st := &s.streams[r.stream]
	m := &s.models[st.model]
	r.state = stRunning
	r.slot = int32(slot)
	r.start = now
	n := max(int(r.bsize), 1)
	r.predEnd = now.Add(s.costNAt(st.model, int(r.occ), n, now))
	r.coPriced = s.coAt(now)
	r.expEnd = now.Add(s.estimateAt(m, int(r.occ), n, now))
	if n <= 1 {
		r.commitAt = s.commitAt(m, r.occ, now)
	} else {
		r.commitAt = now.Add(s.coScale(m.win(int(r.occ), n).p10, now) - s.cfg.CommitLead)
	}
	s.started(r)
	s.startMembers(ri)
	s.slotRun[slot] = ri
	s.busy++
	if m.spec.Exclusive {
		s.exclRunning = true
	}
}

func (s *Scheduler) deliver(now Time, st *stream, capture Time) {
	age := now.Sub(capture)
	st.lastAge = age
	if !st.delivered || capture > st.newest {
		st.newest, st.delivered = capture, true
	}
	if st.maxAge > 0 && age < st.maxAge {
		st.cov.deliver(now)
		st.delivWin = max(st.delivWin, st.win(now))
	}
	if st.lc != nil {
		st.lc.shareDelivery(now, capture, age)
	}
}

// Cancel reports that the client of token went away. A waiting request is
// removed and counted cancelled (no Answer: nobody is listening). A running
// one keeps its slot until Complete, which then counts it cancelled.
func (s *Scheduler) Cancel(now Time, token uint64, acts []Action) []Action {
	if s.multi() {
		return s.frontCancel(now, token, acts)
	}
	ri := s.tokens.get(token)
	if ri < 0 {
		return acts
	}
	r := &s.reqs[ri]
	if r.state == stRunning || r.state == stCommitted {
		// At the backend: the caller cancels the call there and reports
		// its end with Complete.
		r.cancelled = true
		return acts
	}
	st := &s.streams[r.stream]
	for j, x := range st.q {
		if x == ri {
			st.q = append(st.q[:j], st.q[j+1:]...)
			break
		}
	}
	st.c.Cancelled++
	s.release(ri)
	return s.pass(now, acts)
}

// Tick re-evaluates waiting requests at now. Call it when NextWake says so;
// calling it at other times is harmless.
func (s *Scheduler) Tick(now Time, acts []Action) []Action {
	if s.multi() {
		return s.each(now, acts, func(e *Scheduler, acts []Action) []Action { return e.pass(now, acts) })
	}
	return s.pass(now, acts)
}

// NextWake returns when Tick must be called if no other event happens first.
// It returns false when nothing is waiting on time: vig then needs no timer
// at all.
func (s *Scheduler) NextWake() (Time, bool) { return s.wake, s.wake != Never }

// Drain stops admission for good: every waiting request is answered
// Unavailable (counted rejected) and every later arrival too. Running
// requests complete normally; Drained reports when none is left.
func (s *Scheduler) Drain(now Time, acts []Action) []Action {
	s.draining = true
	if s.multi() {
		return s.each(now, acts, func(e *Scheduler, acts []Action) []Action { return e.Drain(now, acts) })
	}
	return s.flush(ReasonDraining, acts)
}

// Drained reports whether Drain was called and nothing is in flight.
func (s *Scheduler) Drained() bool {
	if s.multi() {
		for p := range s.accels {
			if e := s.accels[p].e; e != nil && !e.Drained() {
				return false
			}
		}
		return s.draining
	}
	return s.draining && s.busy == 0 && s.committed == 0 && s.waiting() == 0
}

// SetBackendAvailable marks the backend up or down. While it is down every
// waiting request and every arrival is answered Unavailable at once (counted
// rejected), so clients learn promptly instead of timing out; running
// requests are left to Complete (with ok=false when the connection failed).
func (s *Scheduler) SetBackendAvailable(now Time, up bool, acts []Action) []Action {
	s.backendDown = !up
	if s.multi() {
		return s.each(now, acts, func(e *Scheduler, acts []Action) []Action { return e.SetBackendAvailable(now, up, acts) })
	}
	if up {
		return s.pass(now, acts)
	}
	return s.flush(ReasonBackendDown, acts)
}

func (s *Scheduler) flush(reason Reason, acts []Action) []Action {
	for i := range s.streams {
		st := &s.streams[i]
		for _, ri := range st.q {
			acts = s.answer(ri, Unavailable, Rejected, reason, acts)
		}
		st.q = st.q[:0]
	}
	s.wake = Never
	return acts
}

func (s *Scheduler) waiting() int {
	n := 0
	for i := range s.streams {
		n += len(s.streams[i].q)
	}
	return n
}

// ObserveBackendStats feeds the backend's own measurement of model: the
// compute_infer time and count accumulated since the previous call (deltas of
// Triton's ModelStatistics inference_stats.compute_infer). Pure compute time
// is a lower bound of what the scheduler measures (dispatch to completion),
// so the mean becomes a floor of every estimate of the model, and it replaces
// the exec_ms prior in windows that have no measurement yet. A zero count
// (no inference in the interval, or statistics unavailable) is ignored.
func (s *Scheduler) ObserveBackendStats(model string, computeInferNs, count uint64) {
	if s.multi() {
		if e := s.engineOf(model); e != nil {
			e.ObserveBackendStats(model, computeInferNs, count)
		}
		return
	}
	mi, ok := s.modelByName[model]
	if !ok || count == 0 || s.models[mi].batched() {
		// Once a model has run batches, its compute time is per batch,
		// of any size: it bounds no estimate of one size.
		return
	}
	mean := computeInferNs / count
	if mean == 0 || mean > math.MaxInt64 {
		return
	}
	m := &s.models[mi]
	m.backendMean = time.Duration(mean)
	for o := range m.est {
		if m.est[o].real == 0 {
			m.est[o].seed(m.backendMean)
		}
	}
	m.refresh(s.margin)
}
