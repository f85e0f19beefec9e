package sched

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// A simulation of SCENARIOS.md's scenario E on the fake clock: six cameras on
// one batched detector and a depth model on one slot, open-loop sensors at
// their phases, a backend whose batcher (for every policy, as Triton's dynamic
// batcher with max_queue_delay 0) starts the head of its FIFO with every queued
// request of the same model, up to 8 rows, and charges a job of b rows
// exec × mean(factor of its rows) × (1 + slope·(b−1)) — a row of a request that
// carries several rows counts the factor's mean, 1.1, as the mock backend does.
// The same hops as the wire simulation.

// batchTrace, set by a test, is told every decision and delivery of a window
// of the run (for debugging a policy).
var batchTrace func(format string, args ...any)

type batchSimStream struct {
	name   string
	model  int // 0: detector (batched), 1: depth
	class  Class
	frame  time.Duration
	maxAge time.Duration
	phase  time.Duration
}

type batchSimScenario struct {
	name    string
	slope   float64 // added cost per row, as a fraction of one
	streams []batchSimStream
	exec    [2]time.Duration
}

func scenarioE(slope float64) batchSimScenario {
	name := "E"
	if slope == 1 {
		name = "E-linear"
	}
	sc := batchSimScenario{name: name, slope: slope, exec: [2]time.Duration{10 * ms, 6 * ms}}
	for i := 0; i < 6; i++ {
		class, age := High, 66*ms
		if i < 2 {
			class, age = Protected, 50*ms
		}
		sc.streams = append(sc.streams, batchSimStream{fmt.Sprint("cam", i), 0, class, 33 * ms, age,
			time.Duration(i) * 5500 * time.Microsecond})
	}
	sc.streams = append(sc.streams, batchSimStream{"depth", 1, High, 66 * ms, 100 * ms, 3 * ms})
	return sc
}

// batchPolicy is one side of the comparison.
type batchPolicy struct {
	name     string
	direct   bool
	maxBatch int           // vig: the detector's max_batch (1: no batching)
	seeded   []BatchCost   // vig: batch_exec_ms
	warmup   time.Duration // coverage counted from here
}

type bsJob struct {
	stream, frame int
	capture       Time
	ok            bool
}

// bsReq is one request at the backend: one frame, or a batch vig formed.
type bsReq struct {
	model  int
	jobs   []int
	lead   uint64 // vig: the token Complete is called with
	direct bool
}

type batchSimResult struct {
	cov     []CoverageResult
	sizes   map[int]int // backend executions by rows (detector)
	vigSize map[int]int // vig's own batches by size
	snap    Snapshot
}

func simulateBatch(t testing.TB, sc batchSimScenario, p batchPolicy, depth int, dur time.Duration, hops wireHops) batchSimResult {
	t.Helper()
	var q eventQ
	var seq uint64
	rng := rand.New(rand.NewPCG(uint64(depth), 7))
	last := map[int]Time{}
	hop := func(now Time, base time.Duration, path int) Time {
		d := base
		if hops.noise > 0 {
			d += time.Duration(rng.ExpFloat64() * float64(hops.noise))
		}
		at := max(now.Add(d), last[path])
		last[path] = at
		return at
	}
	push := func(at Time, kind uint8, a, b int) {
		seq++
		heap.Push(&q, simEvent{at: at, seq: seq, kind: kind, a: a, b: b})
	}
	var s *Scheduler
	if !p.direct {
		cfg := Config{Slots: 1, SafetyMargin: DefaultMargin}
		cfg.Models = []ModelSpec{{Name: "detector", Exec: sc.exec[0], MaxBatch: p.maxBatch, BatchExec: p.seeded},
			{Name: "depth", Exec: sc.exec[1]}}
		for _, st := range sc.streams {
			cfg.Streams = append(cfg.Streams, StreamSpec{Name: st.name, Model: cfg.Models[st.model].Name,
				Class: st.class, Period: st.frame, MaxAge: st.maxAge, Queue: Latest})
		}
		var err error
		if s, err = New(cfg); err != nil {
			t.Fatal(err)
		}
	}
	var jobs []bsJob
	var reqs []bsReq
	outstanding := make([]int, len(sc.streams))
	deliv := make([][]Delivery, len(sc.streams))
	res := batchSimResult{sizes: map[int]int{}, vigSize: map[int]int{}}
	var fifo []int // requests queued at the backend
	busy := false
	var running []int
	wakeAt := Never
	end := Time(dur)
	var acts []Action
	pending := map[uint64]int{} // vig: lead token → request being assembled

	execOf := func(rs []int) time.Duration {
		rows, sum := 0, 0.0
		model := reqs[rs[0]].model
		for _, ri := range rs {
			r := &reqs[ri]
			for _, j := range r.jobs {
				f := 1.1
				if len(r.jobs) == 1 {
					st := sc.streams[jobs[j].stream]
					f = float64(simExecTime(1, st.name, uint64(jobs[j].frame), time.Second)) / float64(time.Second)
				}
				sum += f
				rows++
			}
		}
		slope := sc.slope
		if model == 1 {
			slope = 1
		}
		return time.Duration(float64(sc.exec[model]) * sum / float64(rows) * (1 + slope*float64(rows-1)))
	}
	startNext := func(now Time) {
		if busy || len(fifo) == 0 {
			return
		}
		head := fifo[0]
		fifo = fifo[1:]
		running = append(running[:0], head)
		rows := len(reqs[head].jobs)
		if reqs[head].model == 0 {
			for i := 0; i < len(fifo); {
				r := &reqs[fifo[i]]
				if r.model == 0 && rows+len(r.jobs) <= 8 {
					running = append(running, fifo[i])
					rows += len(r.jobs)
					fifo = append(fifo[:i], fifo[i+1:]...)
					continue
				}
				i++
			}
			res.sizes[rows]++
		}
		busy = true
		push(now.Add(execOf(running)), evEnd, 0, 0)
	}
	answer := func(at Time, j int, ok bool) {
		jobs[j].ok = ok
		push(at, evClient, j, 0)
	}
	apply := func(now Time) {
		if batchTrace != nil {
			for _, a := range acts {
				j := int(a.Token - 1)
				batchTrace("%8.3f %v %s(cap %.3f) batch=%d size=%d queued=%v start=%.3f %v", float64(now)/1e6, a.Kind, sc.streams[jobs[j].stream].name, float64(jobs[j].capture)/1e6, a.Batch, a.BatchSize, a.Queued, float64(a.Start)/1e6, a.Reason)
			}
		}
		for _, a := range acts {
			j := int(a.Token - 1)
			switch a.Kind {
			case Dispatch:
				if a.Batch == 0 {
					reqs = append(reqs, bsReq{model: sc.streams[jobs[j].stream].model, jobs: []int{j}, lead: a.Token})
					push(hop(now, hops.backend, -1), evBackend, len(reqs)-1, 0)
					continue
				}
				ri, ok := pending[a.Batch]
				if !ok {
					reqs = append(reqs, bsReq{model: 0, lead: a.Batch})
					ri = len(reqs) - 1
					pending[a.Batch] = ri
				}
				reqs[ri].jobs = append(reqs[ri].jobs, j)
				if len(reqs[ri].jobs) == a.BatchSize {
					delete(pending, a.Batch)
					res.vigSize[a.BatchSize]++
					push(hop(now, hops.backend, -1), evBackend, ri, 0)
				}
			case Answer:
				answer(hop(now, hops.client, 2*jobs[j].stream+1), j, false)
			}
		}
		if len(pending) != 0 {
			t.Fatalf("a batch's dispatches did not come together: %v", pending)
		}
		if w, ok := s.NextWake(); ok && w != wakeAt {
			wakeAt = w
			seq++
			heap.Push(&q, simEvent{at: w.Add(hops.timer), seq: seq, kind: evTick, wake: w})
		} else if !ok {
			wakeAt = Never
		}
	}
	for i, st := range sc.streams {
		push(Time(st.phase), evCapture, i, 0)
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(simEvent)
		now := e.at
		switch e.kind {
		case evCapture:
			st := sc.streams[e.a]
			if next := now.Add(st.frame); next < end {
				push(next, evCapture, e.a, e.b+1)
			}
			if outstanding[e.a] >= depth {
				continue
			}
			outstanding[e.a]++
			jobs = append(jobs, bsJob{stream: e.a, frame: e.b, capture: now})
			j := len(jobs) - 1
			if p.direct {
				reqs = append(reqs, bsReq{model: st.model, jobs: []int{j}, direct: true})
				push(hop(now, hops.direct, 2*e.a), evBackend, len(reqs)-1, 0)
			} else {
				push(hop(now, hops.client, 2*e.a), evArrive, j, 0)
			}
		case evArrive:
			jb := &jobs[e.a]
			st := sc.streams[jb.stream]
			key := uint64(0)
			if st.model == 0 {
				key = 1
			}
			acts = s.Arrive(now, Request{Token: uint64(e.a + 1), Stream: st.name, Model: s.models[st.model].spec.Name,
				Capture: jb.capture, BatchKey: key, Rows: 1}, acts[:0])
			apply(now)
		case evBackend:
			fifo = append(fifo, e.a)
			startNext(now)
		case evEnd:
			busy = false
			done := append([]int(nil), running...)
			startNext(now)
			for _, ri := range done {
				r := &reqs[ri]
				if r.direct {
					j := r.jobs[0]
					answer(hop(now, hops.direct, 2*jobs[j].stream+1), j, true)
					continue
				}
				push(hop(now, hops.backend, -2), evComplete, ri, 0)
			}
		case evComplete:
			r := &reqs[e.a]
			acts = s.Complete(now, r.lead, true, acts[:0])
			for _, j := range r.jobs {
				answer(hop(now, hops.client, 2*jobs[j].stream+1), j, true)
			}
			apply(now)
		case evTick:
			if e.wake != wakeAt {
				continue
			}
			wakeAt = Never
			acts = s.Tick(now, acts[:0])
			apply(now)
		case evClient:
			jb := &jobs[e.a]
			if batchTrace != nil && jb.ok {
				batchTrace("%8.3f deliver %s cap %.3f age %.1f window %d", float64(now)/1e6, sc.streams[jb.stream].name, float64(jb.capture)/1e6, float64(now-jb.capture)/1e6, int64(now)/int64(33*ms))
			}
			outstanding[jb.stream]--
			if jb.ok {
				deliv[jb.stream] = append(deliv[jb.stream], Delivery{At: now, Capture: jb.capture})
			}
		}
		if now >= end.Add(time.Second) {
			break
		}
	}
	if s != nil {
		s.Snapshot(end, &res.snap)
		for _, ss := range res.snap.Streams {
			if !ss.Balanced() {
				t.Fatalf("%s: unbalanced %+v", ss.Name, ss.Counters)
			}
		}
	}
	for i, st := range sc.streams {
		from := Time(p.warmup)
		// Whole windows from the warm-up's end on the run's grid.
		from = Time(int64(from+Time(st.frame)-1) / int64(st.frame) * int64(st.frame))
		res.cov = append(res.cov, Coverage(from, end, st.frame, st.maxAge, deliv[i]))
	}
	return res
}

// simulateBatchBest runs depths 1, 4 and 16 and keeps each stream's best.
func simulateBatchBest(t testing.TB, sc batchSimScenario, p batchPolicy, dur time.Duration, hops wireHops) batchSimResult {
	var best batchSimResult
	for _, d := range []int{1, 4, 16} {
		r := simulateBatch(t, sc, p, d, dur, hops)
		if best.cov == nil {
			best = r
			continue
		}
		for i := range r.cov {
			if r.cov[i].Ratio() > best.cov[i].Ratio() {
				best.cov[i] = r.cov[i]
			}
		}
	}
	return best
}

func formatBatch(sc batchSimScenario, p batchPolicy, r batchSimResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-26s", sc.name, p.name)
	for i, st := range sc.streams {
		fmt.Fprintf(&b, " %s %5.1f", st.name, 100*r.cov[i].Ratio())
	}
	fmt.Fprintf(&b, " | backend sizes %v vig %v", r.sizes, r.vigSize)
	return b.String()
}

var (
	bpDirect  = batchPolicy{name: "direct (backend batches)", direct: true}
	bpAlone   = batchPolicy{name: "vig, max_batch 1", maxBatch: 1}
	bpSeededE = batchPolicy{name: "vig, batch_exec_ms", maxBatch: 8, seeded: []BatchCost{{1, 10 * ms}, {8, 27500 * time.Microsecond}}, warmup: 5 * time.Second}
	bpSeededL = batchPolicy{name: "vig, batch_exec_ms", maxBatch: 8, seeded: []BatchCost{{1, 10 * ms}, {8, 80 * ms}}}
	bpLearnt  = batchPolicy{name: "vig, max_batch only", maxBatch: 8, warmup: 5 * time.Second}
)

// TestBatchSimulation prints scenario E and E-linear under every policy
// (go test -run BatchSimulation -v ./agent/sched/) and checks SCENARIOS.md's
// targets for vig with batching.
func TestBatchSimulation(t *testing.T) {
	dur := 20 * time.Second
	if testing.Short() {
		dur = 10 * time.Second
	}
	// 600 µs of noise per hop and timer reproduces, for direct, the coverage
	// the wire benchmark measures on a 2-vCPU VM (issue 37's table).
	vmHops := noisyHops
	vmHops.noise, vmHops.timerNoise = 600*time.Microsecond, 600*time.Microsecond
	for _, hops := range []wireHops{benchHops, noisyHops, vmHops} {
		for _, slope := range []float64{0.25, 1} {
			sc := scenarioE(slope)
			seeded := bpSeededE
			if slope == 1 {
				seeded = bpSeededL
			}
			res := map[string]batchSimResult{}
			for _, p := range []batchPolicy{bpDirect, bpAlone, seeded, bpLearnt} {
				res[p.name] = simulateBatchBest(t, sc, p, dur, hops)
				t.Logf("noise %v %s", hops.noise, formatBatch(sc, p, res[p.name]))
			}
			if hops != benchHops {
				continue // printed only: the targets are for the bench's hops
			}
			direct, alone := res[bpDirect.name], res[bpAlone.name]
			for _, p := range []batchPolicy{seeded, bpLearnt} {
				got := res[p.name]
				for i, st := range sc.streams {
					c := got.cov[i].Ratio()
					if slope == 1 {
						// E-linear: batching gains nothing, and must not
						// lose anything either. The high cameras are
						// infeasible either way (each gets what is left in
						// an order that small differences reshuffle): their
						// mean is compared, the protected ones each.
						if a := alone.cov[i].Ratio(); st.class == Protected && c < a-0.01 {
							t.Errorf("%s %s %s: %.1f%%, unbatched %.1f%%", sc.name, p.name, st.name, 100*c, 100*a)
						}
						continue
					}
					floor := 0.97
					if st.class == Protected {
						floor = 0.99
					}
					if d := direct.cov[i].Ratio(); c < floor || c < d {
						t.Errorf("%s %s %s: %.1f%% (target %.0f%%, direct %.1f%%)", sc.name, p.name, st.name, 100*c, 100*floor, 100*d)
					}
				}
				if slope == 1 {
					var mb, ma float64
					for i, st := range sc.streams {
						if st.class == High {
							mb += got.cov[i].Ratio()
							ma += alone.cov[i].Ratio()
						}
					}
					if mb < ma-0.03*5 {
						t.Errorf("%s %s: high streams %.1f points below unbatched in sum", sc.name, p.name, 100*(ma-mb))
					}
				}
			}
		}
	}
}
