package sched

import (
	"slices"
	"time"
)

// Batching: see doc.go, Batching. A batch is one job on a slot: its lead is the
// request in slotRun/slotNext, its other members hang off the lead (bnext) with
// the lead's state, slot and times, and the job's cost is the estimate for its
// size.

// defaultBatchSlope is the prior cost of each frame a batch adds, as a fraction
// of a batch of one, for a model given max_batch without batch_exec_ms: an
// optimistic guess, so that batches are tried and their real cost learnt.
const defaultBatchSlope = 0.5

// minFitSamples is how many measurements of one batch size the fit of the
// unmeasured sizes waits for.
const minFitSamples = 3

// batchWindows sets up the estimator windows of the sizes 2..MaxBatch of a
// model, seeded from BatchExec or the default slope.
func (m *model) initBatch(slots, w int) {
	n := m.spec.MaxBatch
	if n <= 1 {
		return
	}
	m.maxBatch = n
	m.bat = make([]window, slots*(n-1))
	m.bcost = make([]time.Duration, slots*(n-1))
	buf := make([]int64, len(m.bat)*2*w)
	for i := range m.bat {
		m.bat[i].init(buf[:2*w:2*w], m.prior(i%(n-1)+2))
		buf = buf[2*w:]
	}
	m.batches = make([]uint64, n+1)
	m.scratch = make([]int64, w)
}

// prior is the seed of the estimate of a batch of n: batch_exec_ms
// interpolated (extrapolated beyond its largest size along its last segment),
// else exec × (1 + defaultBatchSlope·(n−1)).
func (m *model) prior(n int) time.Duration {
	pts := m.spec.BatchExec
	if len(pts) == 0 {
		return time.Duration(float64(m.spec.Exec) * (1 + defaultBatchSlope*float64(n-1)))
	}
	x0, y0 := 1, m.spec.Exec
	if pts[0].Size == 1 {
		y0 = pts[0].Exec
	}
	for _, p := range pts {
		if p.Size <= x0 {
			continue
		}
		if n <= p.Size {
			return y0 + time.Duration(float64(p.Exec-y0)*float64(n-x0)/float64(p.Size-x0))
		}
		x1, y1 := p.Size, p.Exec
		if p == pts[len(pts)-1] {
			return y1 + time.Duration(float64(y1-y0)*float64(n-x1)/float64(x1-x0))
		}
		x0, y0 = x1, y1
	}
	// Only a size-1 entry: no slope given.
	return time.Duration(float64(y0) * (1 + defaultBatchSlope*float64(n-1)))
}

// BatchPrior is the prior execution time of a job of n rows of the model the
// scheduler would start from: BatchExec interpolated (extrapolated beyond its
// largest size along its last segment), else Exec × (1 + 0.5·(n−1)). doctor
// prices batches with it.
func BatchPrior(spec ModelSpec, n int) time.Duration {
	if n <= 1 && (len(spec.BatchExec) == 0 || spec.BatchExec[0].Size != 1) {
		return spec.Exec
	}
	m := model{spec: spec}
	return m.prior(n)
}

// win is the estimator window of a job of n frames at occupancy occ.
func (m *model) win(occ, n int) *window {
	if n <= 1 {
		return &m.est[occ]
	}
	return &m.bat[occ*(m.maxBatch-1)+n-2]
}

// estimateN is the estimate of a job of n frames at occupancy occ, without
// margin.
func (m *model) estimateN(occ, n int) time.Duration {
	if n <= 1 {
		return m.estimate(occ)
	}
	return m.win(occ, n).p90
}

// refreshBatch recomputes the margin-scaled batch costs.
func (m *model) refreshBatch(margin Margin) {
	for i := range m.bat {
		m.bcost[i] = margin.Apply(m.bat[i].p90)
	}
}

// costN is the margin-scaled estimate of a job of n frames of model mi
// started at occupancy occ.
func (s *Scheduler) costN(mi int32, occ, n int) time.Duration {
	if n <= 1 {
		return s.cost(mi, occ)
	}
	m := &s.models[mi]
	if m.spec.Exclusive || occ < 0 {
		occ = 0
	}
	if occ >= s.slots {
		occ = s.slots - 1
	}
	return m.bcost[occ*(m.maxBatch-1)+n-2]
}

// learnBatch adds a measurement of a job of n rows at occupancy occ, then
// refits the sizes not measured enough (refitBatch).
func (m *model) learnBatch(occ, n int, d time.Duration, margin Margin) {
	if n <= 1 {
		m.est[occ].add(d)
		m.refresh(margin)
	} else {
		m.win(occ, n).add(d)
	}
	m.refitBatch(occ)
	m.refreshBatch(margin)
}

// refitBatch reseeds the batch sizes measured less than half a window at
// occupancy occ, keeping their measurements: from the per-frame slope of the
// size measured most (by medians, at least minFitSamples of them) scaled from
// the estimate of a batch of one, or before any batch was measured, the prior's
// shape (batch_exec_ms or the default slope) scaled to that estimate — so a
// config with only max_batch converges on sizes it has not tried once it has
// tried one, and batch_exec_ms given in the wrong units is corrected by what a
// batch of one really costs.
func (m *model) refitBatch(occ int) {
	base := m.estimate(occ)
	best, bestN := 0, 0
	for k := 2; k <= m.maxBatch; k++ {
		if r := m.win(occ, k).real; r >= minFitSamples && r >= best {
			best, bestN = r, k
		}
	}
	g := -1.0
	if bestN > 0 && m.est[occ].p50 > 0 {
		w := m.win(occ, bestN)
		g = (float64(m.realP50(w))/float64(m.est[occ].p50) - 1) / float64(bestN-1)
		g = min(max(g, 0), 4)
	}
	p1 := m.prior(1)
	for k := 2; k <= m.maxBatch; k++ {
		w := m.win(occ, k)
		if w.real >= len(w.ring)/2 {
			continue
		}
		seed := time.Duration(float64(m.prior(k)) * float64(base) / float64(p1))
		if g >= 0 {
			seed = time.Duration(float64(base) * (1 + g*float64(k-1)))
		}
		if d := seed - w.seedv; d > w.seedv/50 || -d > w.seedv/50 {
			w.reseedKeep(seed)
		}
	}
}

// realP50 is the median of the measured samples of w alone.
func (m *model) realP50(w *window) time.Duration { return m.realPct(w, 50) }

// realPct is the pct-th percentile (nearest rank) of the measured samples of w
// alone.
func (m *model) realPct(w *window, pct int) time.Duration {
	n := len(w.ring)
	s := m.scratch[:0]
	for i := 1; i <= w.real; i++ {
		s = append(s, w.ring[(w.pos-i+n)%n])
	}
	slices.Sort(s)
	return time.Duration(s[max((pct*len(s)+99)/100-1, 0)])
}

// reseedKeep replaces the seeds of w (the entries older than its real
// samples) with prior, keeping the measurements.
func (w *window) reseedKeep(prior time.Duration) {
	n := len(w.ring)
	for i := w.real + 1; i <= n; i++ {
		w.ring[(w.pos-i+n)%n] = int64(prior)
	}
	w.seedv = prior
	copy(w.sorted, w.ring)
	slices.Sort(w.sorted)
	w.p90 = time.Duration(w.sorted[p90Index(n)])
	w.p10 = time.Duration(w.sorted[p10Index(n)])
	w.p50 = time.Duration(w.sorted[n/2])
}

// gainPct is how much cheaper, at least, a frame must be in a batch than in a
// job of its own for batching to take it: below this the estimates' noise
// would decide.
const gainPct = 90

// gains reports whether adding rows more to a batch of n rows of model mi (at
// occupancy occ), after idling idle first, costs less than those rows as a job
// of their own: by medians, since the question is what the accelerator spends
// on average, not what a deadline must allow for.
func (s *Scheduler) gains(mi int32, occ, n, rows int, idle time.Duration) bool {
	m := &s.models[mi]
	if occ >= s.slots {
		occ = s.slots - 1
	}
	if m.spec.Exclusive || occ < 0 {
		occ = 0
	}
	added := idle + m.win(occ, n+rows).p50 - m.win(occ, n).p50
	return added*100 < m.win(occ, rows).p50*gainPct
}

// batchable reports whether r, the head of st, may lead or join a batch.
func (s *Scheduler) batchable(st *stream, r *request) bool {
	return s.models[st.model].maxBatch > 1 && r.key != 0
}

// heads counts the waiting heads that a batch led by r (of st) could take,
// in rows: its own and those of other streams of its model with the same key,
// as long as each pays (gains) and within the model's MaxBatch. The ranking
// prices a batchable head at that batch's cost, since that is when its result
// would come.
func (s *Scheduler) heads(st *stream, r *request, occ int) int {
	m := &s.models[st.model]
	rows := int(r.rows)
	for i := range s.streams {
		p := &s.streams[i]
		if p == st || p.model != st.model || len(p.q) == 0 {
			continue
		}
		h := &s.reqs[p.q[0]]
		if h.key != r.key || rows+int(h.rows) > m.maxBatch || !s.gains(st.model, occ, rows, int(h.rows), 0) {
			continue
		}
		rows += int(h.rows)
	}
	return rows
}

// fits reports whether every member of the batch (s.batch[:n]) meets its
// target if the batch starts at start and costs c: none is late, and none but
// the lead lands in a window of its stream already claimed.
func (s *Scheduler) fits(start Time, c time.Duration, n int) bool {
	for i, ri := range s.batch[:n] {
		r := &s.reqs[ri]
		st := &s.streams[r.stream]
		k := s.key(st, r, start, c)
		if k.lax < 0 || (i > 0 && k.extra) {
			return false
		}
	}
	return true
}

// gather forms the batch led by the head of st placed at start (occupancy
// occ): s.batch[0] is the lead, and the waiting heads of other streams of its
// model with the same key join. It tries the largest batch first — every such
// head, most urgent first, within MaxBatch — and drops the least urgent until
// the batch pays (each added frame cheaper in it than as a job of its own) and
// every member meets its target at the batch's end, landing, but for the lead,
// in a window its stream needs. Largest first, because a small batch can end in
// a window its members have already covered when a larger one would end in the
// next. It returns the number of members and their rows.
func (s *Scheduler) gather(start Time, occ int, st *stream) (n, rows int) {
	m := &s.models[st.model]
	lead := &s.reqs[st.q[0]]
	s.batch = append(s.batch[:0], st.q[0])
	st.bmark = s.bid
	rows = int(lead.rows)
	full := s.costN(st.model, occ, s.heads(st, lead, occ))
	for {
		var best *stream
		var bk rankKey
		for i := range s.streams {
			p := &s.streams[i]
			if p.bmark == s.bid || p.model != st.model || len(p.q) == 0 {
				continue
			}
			h := &s.reqs[p.q[0]]
			if h.key != lead.key || rows+int(h.rows) > m.maxBatch {
				continue
			}
			if k := s.key(p, h, start, full); best == nil || s.before(p, best, k, bk) {
				best, bk = p, k
			}
		}
		if best == nil {
			break
		}
		best.bmark = s.bid
		s.batch = append(s.batch, best.q[0])
		rows += int(s.reqs[best.q[0]].rows)
	}
	for n = len(s.batch); n > 1; n-- {
		rows = 0
		for _, ri := range s.batch[:n] {
			rows += int(s.reqs[ri].rows)
		}
		if s.gains(st.model, occ, int(lead.rows), rows-int(lead.rows), 0) && s.fits(start, s.costN(st.model, occ, rows), n) {
			break
		}
		s.streams[s.reqs[s.batch[n-1]].stream].bmark = 0
	}
	if n == 1 {
		rows = int(lead.rows)
	}
	s.batch = s.batch[:n]
	return n, rows
}

// hasPeers reports whether another stream of st's model sends frames that
// could batch with st's: one with a waiting frame of st's key, or whose sensor
// sent one recently (within two frame intervals and its max_age, the rule by
// which a stopped sensor's frames are no longer predicted).
func (s *Scheduler) hasPeers(now Time, st *stream) bool {
	key := s.reqs[st.q[0]].key
	for i := range s.streams {
		p := &s.streams[i]
		if p == st || p.model != st.model || p.adhoc || !p.seen {
			continue
		}
		if len(p.q) > 0 && s.reqs[p.q[0]].key == key {
			return true
		}
		if p.lastKey == key && !p.silent(now) {
			return true
		}
	}
	return false
}

// batched reports whether the model has dispatched a job of more than one row.
func (m *model) batched() bool {
	for n := 2; n < len(m.batches); n++ {
		if m.batches[n] > 0 {
			return true
		}
	}
	return false
}

// holdBatch keeps the members of the batch s.batch[:n] waiting until until:
// for a frame to join it (filling, counted BatchWaits) or to land in its window
// (counted Held).
func (s *Scheduler) holdBatch(n int, until Time, filling bool) {
	for _, ri := range s.batch[:n] {
		b := &s.reqs[ri]
		bs := &s.streams[b.stream]
		switch {
		case filling && !b.filled:
			b.filled = true
			bs.batchWaits++
		case !filling && !b.held:
			b.held = true
			bs.held++
		}
		b.deferPass, b.recheck = s.passID, until
		bs.pass = s.passID
	}
}

// batchRows is the rows of the first n members of the batch.
func (s *Scheduler) batchRows(n int) int {
	rows := 0
	for _, ri := range s.batch[:n] {
		rows += int(s.reqs[ri].rows)
	}
	return rows
}

// batchGuards says whether the batch s.batch[:n] (starting at start, cost c)
// is subject to admission — some member is not protected, or is an extra — and
// whether against high streams too (some member is best_effort and not an
// extra): a batch is admitted as its least entitled member would be.
func (s *Scheduler) batchGuards(start Time, c time.Duration, n int) (guarded, guardHigh bool) {
	for _, ri := range s.batch[:n] {
		r := &s.reqs[ri]
		p := &s.streams[r.stream]
		k := s.key(p, r, start, c)
		guarded = guarded || p.class != Protected || k.extra
		guardHigh = guardHigh || p.class == BestEffort && !k.extra
	}
	return guarded, guardHigh
}

// fill decides whether the batch s.batch[:n] (rows rows, placed at start at
// occupancy occ) should wait for the next predicted frame of another stream of
// its model: it does when that frame can still join — the batch started at its
// arrival instead, with it, meets every member's target and its own, within
// MaxBatch — and waiting pays: the slot's idle time until then plus the frame's
// added cost stay below what the frame would cost as a job of its own. It
// returns when the frame is due (re-evaluate then, at the latest), and the
// latest time the batch may start with it: until then the slot may run a job
// that ends before.
func (s *Scheduler) fill(now, start Time, occ int, st *stream, n, rows int) (until, latest Time, ok bool) {
	m := &s.models[st.model]
	if rows >= m.maxBatch {
		return 0, 0, false
	}
	key := s.reqs[s.batch[0]].key
	var fp *stream
	var fa, fcap Time
	for i := range s.streams {
		p := &s.streams[i]
		if p.bmark == s.bid || p.model != st.model || len(p.q) > 0 || p.lastKey != key {
			continue
		}
		a, capture, ok := s.nextLate(now, p)
		if !ok || (fp != nil && a >= fa) {
			continue
		}
		fp, fa, fcap = p, a, capture
	}
	if fp == nil {
		return 0, 0, false
	}
	at := max(start, fa)
	if !s.gains(st.model, occ, rows, 1, at.Sub(start)) {
		return 0, 0, false // idling for it costs more than running it alone
	}
	c := s.costN(st.model, occ, rows+1)
	if !s.fits(at, c, n) {
		return 0, 0, false
	}
	end := at.Add(c)
	w := fp.win(end)
	target := min(fcap.Add(fp.maxAge), fp.windowEnd(w))
	if w <= s.claimed(fp) || end > target {
		return 0, 0, false // it would not need this batch
	}
	latest = target - Time(c)
	for _, ri := range s.batch[:n] {
		r := &s.reqs[ri]
		k := s.key(&s.streams[r.stream], r, at, c)
		latest = min(latest, at+Time(k.lax))
	}
	if latest < at {
		return 0, 0, false
	}
	return fa.Add(s.cfg.CommitLead+4*fp.lagDev) + 1, latest, true
}

// nextLate is next for a batch that fills: the next frame of p and when it
// reaches vig, still expected until CommitLead plus four mean deviations of its
// arrival lag after it is due (a frame a little late joins; one that does not
// come is not waited for past then).
func (s *Scheduler) nextLate(now Time, p *stream) (a, capture Time, ok bool) {
	if p.adhoc || !p.seen || p.silent(now) {
		return 0, 0, false
	}
	iv := int64(p.interval)
	k := int64(1)
	if d := int64(now-p.lastCapture) - int64(s.cfg.CommitLead+4*p.lagDev+p.lag); d >= 0 {
		k = d/iv + 1
	}
	capture = p.lastCapture + Time(k*iv)
	return capture.Add(p.lag), capture, true
}

// batchLandsEarly is landsEarly for a batch (see Landing in a window in
// doc.go): when the batch's fastest plausible result (start + the shortest
// time in its size's estimator window) would land in a window some member's
// stream already has, while its predicted result (start + c) lands in the
// next, the batch is held until even its fastest result lands there — if every
// member still meets its target from then. Batches of streams with one period
// and one grid (cameras on one detector) otherwise settle on a phase whose
// results land on a window boundary, where jitter doubles one window and
// empties the next.
func (s *Scheduler) batchLandsEarly(start Time, occ int, st *stream, n, rows int, c time.Duration) (Time, bool) {
	fastest := s.models[st.model].win(occ, rows).fastest()
	until := start
	for _, ri := range s.batch[:n] {
		r := &s.reqs[ri]
		p := &s.streams[r.stream]
		if r.deadline == Never {
			continue
		}
		cl := s.claimed(p)
		if p.win(start.Add(fastest)) > cl {
			continue
		}
		w := p.win(start.Add(c))
		if w <= cl {
			continue
		}
		until = max(until, p.windowStart(w)-Time(fastest))
	}
	if until <= start || !s.fits(until, c, n) {
		return 0, false
	}
	return until, true
}

// dispatchBatch dispatches the batch s.batch[:n] (lead first) as one job: the
// lead like a request alone, then every member with the lead's state and
// times, each with a Dispatch naming the lead's token as its Batch.
func (s *Scheduler) dispatchBatch(now Time, n, rows, slot int, start Time, queued bool, occ int, c time.Duration, budget bool, acts []Action) []Action {
	leadSt := &s.streams[s.reqs[s.batch[0]].stream]
	n0 := len(acts)
	acts = s.dispatchHead(now, leadSt, slot, start, queued, occ, c, false, budget, acts)
	li := s.batch[0]
	lead := &s.reqs[li]
	m := &s.models[leadSt.model]
	lead.bsize = int32(rows)
	if n == 1 {
		if rows > 1 {
			// One request carrying several rows: learnt as a batch of them.
			lead.expEnd = start.Add(m.estimateN(occ, rows))
			if !queued {
				lead.commitAt = start.Add(m.win(occ, rows).p10 - s.cfg.CommitLead)
			}
		}
		m.batches[min(rows, m.maxBatch)]++
		return acts
	}
	lead.expEnd = start.Add(m.estimateN(occ, rows))
	if !queued {
		lead.commitAt = start.Add(m.win(occ, rows).p10 - s.cfg.CommitLead)
	}
	m.batches[rows]++
	acts[n0].Batch, acts[n0].BatchSize = lead.token, n
	prev := li
	for _, ri := range s.batch[1:n] {
		r := &s.reqs[ri]
		st := &s.streams[r.stream]
		st.q = st.q[:copy(st.q, st.q[1:])]
		r.dispatch, r.occ, r.slot, r.budget = now, lead.occ, lead.slot, false
		r.start, r.predEnd, r.expEnd, r.commitAt = lead.start, lead.predEnd, lead.expEnd, lead.commitAt
		r.state = lead.state
		r.blead = li
		s.reqs[prev].bnext = ri
		prev = ri
		st.running++
		st.lateStreak = 0
		st.anchor, st.anchored = now, true
		acts = append(acts, Action{Kind: Dispatch, Token: r.token, Stream: int(r.stream), Slot: slot, Busy: occ, Deadline: r.deadline,
			Capture: r.capture, Waited: now.Sub(r.arrival), Budget: budget, Queued: queued, Start: start,
			Batch: lead.token, BatchSize: n})
	}
	s.reqs[prev].bnext = -1
	return acts
}

// finishMembers ends the members of the batch led by li (its Complete): each
// is counted and delivered as the lead is, and released.
func (s *Scheduler) finishMembers(now Time, li int32, out Outcome) {
	for ri := s.reqs[li].bnext; ri >= 0; {
		r := &s.reqs[ri]
		next := r.bnext
		st := &s.streams[r.stream]
		st.running--
		switch {
		case r.cancelled:
			st.c.Cancelled++
		case out == Forwarded:
			st.c.Forwarded++
			s.deliver(now, st, r.capture)
		default:
			st.c.add(out)
		}
		r.bnext, r.blead = -1, -1
		s.release(ri)
		ri = next
	}
	s.reqs[li].bnext = -1
}

// startMembers gives the members of the batch led by li the lead's state and
// times (the backend started the committed batch).
func (s *Scheduler) startMembers(li int32) {
	lead := &s.reqs[li]
	for ri := lead.bnext; ri >= 0; ri = s.reqs[ri].bnext {
		r := &s.reqs[ri]
		r.state, r.slot = lead.state, lead.slot
		r.start, r.predEnd, r.expEnd, r.commitAt = lead.start, lead.predEnd, lead.expEnd, lead.commitAt
	}
}

// BatchStats counts the jobs of one batching model by size.
type BatchStats struct {
	Model    string
	MaxBatch int
	// Sizes[n] is the number of jobs of n rows dispatched (Sizes[0] is
	// unused).
	Sizes []uint64
}

// batchSnapshot appends the batch counts of every batching model.
func (s *Scheduler) batchSnapshot(dst []BatchStats) []BatchStats {
	for i := range s.models {
		m := &s.models[i]
		if m.maxBatch <= 1 {
			continue
		}
		var sizes []uint64
		if len(dst) < cap(dst) {
			sizes = dst[: len(dst)+1 : cap(dst)][len(dst)].Sizes[:0] // reuse the previous snapshot's
		}
		dst = append(dst, BatchStats{Model: m.spec.Name, MaxBatch: m.maxBatch, Sizes: append(sizes, m.batches...)})
	}
	return dst
}

// SetMaxBatch sets the most rows one job of model may carry, at run time: the
// server's max_batch_size read when the config gives no max_batch (see
// Batching in doc.go). 0 or 1 stops batching the model; jobs already at the
// backend finish as they were dispatched. Its estimates of batch sizes start
// again from the prior. It allocates (the model's estimator windows, and a
// larger request table when batches grow), so it is called on a change of the
// server's configuration, not per request. It reports false for an unknown
// model or a size out of range (1..256).
func (s *Scheduler) SetMaxBatch(model string, n int) bool {
	if s.multi() {
		if e := s.engineOf(model); e != nil {
			return e.SetMaxBatch(model, n)
		}
		return false
	}
	mi, ok := s.modelByName[model]
	if !ok || n < 0 || n > maxSlots {
		return false
	}
	m := &s.models[mi]
	if n <= 1 {
		n = 0
	}
	if m.spec.MaxBatch == n || (m.spec.MaxBatch <= 1 && n == 0) {
		return true
	}
	m.spec.MaxBatch = n
	m.maxBatch, m.bat, m.bcost, m.batches, m.scratch = 0, nil, nil, nil, nil
	m.initBatch(s.slots, s.cfg.EstimatorWindow)
	m.refreshBatch(s.margin)
	if n <= 1 {
		for i := range s.streams {
			if s.streams[i].model == mi {
				for _, ri := range s.streams[i].q {
					s.reqs[ri].key = 0
				}
			}
		}
	}
	// Running and committed jobs may now hold up to n requests each.
	maxB := 1
	for i := range s.models {
		maxB = max(maxB, s.models[i].maxBatch)
	}
	if need := 2*s.slots*maxB + 1 + s.queued(); need > len(s.reqs) {
		old := len(s.reqs)
		s.reqs = append(s.reqs, make([]request, need-old)...)
		for i := old; i < need; i++ {
			s.reqs[i].next = int32(i + 1)
		}
		s.reqs[need-1].next = s.free
		s.free = int32(old)
		tokens := newTokenIndex(need)
		for i := range s.reqs {
			if s.reqs[i].state != stFree {
				tokens.put(s.reqs[i].token, int32(i))
			}
		}
		s.tokens = tokens
	}
	return true
}

// queued is the request table's share for waiting requests: the sum of the
// streams' queue capacities.
func (s *Scheduler) queued() int {
	n := 0
	for i := range s.streams {
		n += s.streams[i].capacity
	}
	return n
}
