package sched

import (
	"testing"
	"time"
)

// eightStreams is a perception stack on one accelerator: two protected
// streams, three high, three best effort (one of them the VLM with a budget).
func eightStreams(slots int) Config {
	return Config{
		Slots:          slots,
		SafetyMargin:   DefaultMargin,
		UnknownStreams: DefaultContract,
		Models: []ModelSpec{
			{Name: "det", Exec: 8 * ms},
			{Name: "pose", Exec: 5 * ms},
			{Name: "depth", Exec: 10 * ms},
			{Name: "seg", Exec: 6 * ms},
			{Name: "vlm", Exec: 200 * ms},
			{Name: "ocr", Exec: 3 * ms},
		},
		Streams: []StreamSpec{
			{Name: "detector", Model: "det", Class: Protected, Period: 50 * ms, MaxAge: 50 * ms, Queue: Latest},
			{Name: "lidar", Model: "depth", Class: Protected, Period: 100 * ms, MaxAge: 100 * ms, Queue: Latest},
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
			{Name: "depth", Model: "depth", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest},
			{Name: "seg", Model: "seg", Class: High, Period: 50 * ms, MaxAge: 100 * ms, Queue: FIFO, Capacity: 4},
			{Name: "vlm", Model: "vlm", Class: BestEffort, Period: time.Second, MaxAge: 2 * time.Second, Queue: Latest, MinRateHz: 0.2},
			{Name: "ocr", Model: "ocr", Class: BestEffort, Period: 200 * ms, MaxAge: time.Second, Queue: FIFO, Capacity: 8},
			{Name: "plate", Model: "ocr", Class: BestEffort, Period: 200 * ms, MaxAge: 500 * ms, Queue: Latest},
		},
	}
}

var benchReqs = func() []Request {
	var rs []Request
	for _, s := range eightStreams(1).Streams {
		rs = append(rs, Request{Stream: s.Name, Model: s.Model})
	}
	return rs
}()

// decisionLoop runs n rounds of: a frame arrives on the next stream (and is
// dispatched, deferred or queued), then whatever was dispatched completes.
func decisionLoop(s *Scheduler, now *Time, tok *uint64, acts []Action, n int) []Action {
	for i := 0; i < n; i++ {
		*now += Time(2 * ms)
		*tok++
		r := benchReqs[int(*tok)%len(benchReqs)]
		r.Token = *tok
		acts = s.Arrive(*now, r, acts[:0])
		for len(acts) > 0 {
			var d uint64
			for _, a := range acts {
				if a.Kind == Dispatch {
					d = a.Token
					break
				}
			}
			if d == 0 {
				break
			}
			acts = s.Complete(*now+Time(ms), d, true, acts[:0])
		}
	}
	return acts
}

// loadedLoop keeps every slot busy and queues non-empty: each round a frame
// arrives, and every other round the oldest running job completes, so every
// completion picks among the waiting heads of all streams.
type loadedLoop struct {
	s       *Scheduler
	now     Time
	tok     uint64
	acts    []Action
	running [8]uint64
	n       int
	reqs    []Request // the requests sent in turn; nil: benchReqs
}

func (l *loadedLoop) track(acts []Action) {
	for _, a := range acts {
		if a.Kind == Dispatch && (a.Batch == 0 || a.Batch == a.Token) { // a batch completes by its lead
			l.running[l.n] = a.Token
			l.n++
		}
	}
}

func (l *loadedLoop) round() {
	l.now += Time(ms)
	l.tok++
	reqs := benchReqs
	if l.reqs != nil {
		reqs = l.reqs
	}
	r := reqs[int(l.tok)%len(reqs)]
	r.Token = l.tok
	l.acts = l.s.Arrive(l.now, r, l.acts[:0])
	l.track(l.acts)
	if l.n >= l.s.slots && l.tok%2 == 0 { // half the arrival rate: saturated
		done := l.running[0]
		copy(l.running[:], l.running[1:l.n])
		l.n--
		l.acts = l.s.Complete(l.now, done, true, l.acts[:0])
		l.track(l.acts)
	}
}

// eightStreams3Accel is the same stack on a GPU (1 slot) and two DLA cores.
func eightStreams3Accel() Config {
	cfg := eightStreams(0)
	cfg.Accelerators = []AcceleratorSpec{{Name: "gpu", Slots: 1}, {Name: "dla", Slots: 2}}
	cfg.Models = append([]ModelSpec(nil), cfg.Models...)
	for i := range cfg.Models {
		cfg.Models[i].Accelerator = map[string]string{"det": "dla", "seg": "dla", "ocr": "dla"}[cfg.Models[i].Name]
		if cfg.Models[i].Accelerator == "" {
			cfg.Models[i].Accelerator = "gpu"
		}
	}
	return cfg
}

// eightStreams3AccelCo is eightStreams3Accel with interference between the
// accelerators (so admission looks across them) and one instance of seg
// (FIFO, several would run at once on the DLA's two slots).
func eightStreams3AccelCo() Config {
	cfg := eightStreams3Accel()
	cfg.Accelerators[0].Interference, cfg.Accelerators[1].Interference = 1.3, 1.15
	for i := range cfg.Models {
		if cfg.Models[i].Name == "seg" {
			cfg.Models[i].Instances = 1
		}
	}
	return cfg
}

// BenchmarkDecision8Streams3Accel is the decision on 3 accelerator slots of
// two kinds (the bound: under 2 µs, allocation-free); co: with
// interference and instances.
func BenchmarkDecision8Streams3Accel(b *testing.B) {
	benchDecision3Accel(b, "", eightStreams3Accel)
	benchDecision3Accel(b, "co/", eightStreams3AccelCo)
}

func benchDecision3Accel(b *testing.B, prefix string, config func() Config) {
	b.Run(prefix+"idle", func(b *testing.B) {
		s, err := New(config())
		if err != nil {
			b.Fatal(err)
		}
		acts := make([]Action, 0, 16)
		var now Time
		var tok uint64
		acts = decisionLoop(s, &now, &tok, acts, 1000)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			acts = decisionLoop(s, &now, &tok, acts, 1)
		}
	})
	b.Run(prefix+"loaded", func(b *testing.B) {
		s, err := New(config())
		if err != nil {
			b.Fatal(err)
		}
		l := &loadedLoop{s: s, acts: make([]Action, 0, 16)}
		for range 1000 {
			l.round()
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			l.round()
		}
	})
}

func BenchmarkDecision8Streams(b *testing.B) {
	for _, slots := range []int{1, 2} {
		name := map[int]string{1: "slots=1", 2: "slots=2"}[slots]
		b.Run("idle/"+name, func(b *testing.B) {
			s, err := New(eightStreams(slots))
			if err != nil {
				b.Fatal(err)
			}
			acts := make([]Action, 0, 16)
			var now Time
			var tok uint64
			acts = decisionLoop(s, &now, &tok, acts, 1000) // warm up the estimator
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				acts = decisionLoop(s, &now, &tok, acts, 1)
			}
		})
		b.Run("loaded/"+name, func(b *testing.B) {
			s, err := New(eightStreams(slots))
			if err != nil {
				b.Fatal(err)
			}
			l := &loadedLoop{s: s, acts: make([]Action, 0, 16)}
			for range 1000 {
				l.round()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l.round()
			}
		})
	}
}

// TestDecisionAllocs3Accel: the same claim on three accelerator slots,
// with and without interference and instances.
func TestDecisionAllocs3Accel(t *testing.T) {
	for name, config := range map[string]func() Config{"plain": eightStreams3Accel, "co": eightStreams3AccelCo} {
		t.Run(name, func(t *testing.T) { decisionAllocs3Accel(t, config()) })
	}
}

func decisionAllocs3Accel(t *testing.T, cfg Config) {
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	acts := make([]Action, 0, 16)
	var now Time
	var tok uint64
	acts = decisionLoop(s, &now, &tok, acts, 1000)
	if n := testing.AllocsPerRun(2000, func() { acts = decisionLoop(s, &now, &tok, acts, 1) }); n != 0 {
		t.Errorf("%v allocations per decision", n)
	}
	var snap Snapshot
	s.Snapshot(now, &snap)
	if n := testing.AllocsPerRun(100, func() { s.Snapshot(now, &snap) }); n != 0 {
		t.Errorf("Snapshot into a reused value: %v allocations", n)
	}
	l := &loadedLoop{s: s, acts: make([]Action, 0, 16)}
	for range 1000 {
		l.round()
	}
	if n := testing.AllocsPerRun(2000, l.round); n != 0 {
		t.Errorf("loaded: %v allocations per decision", n)
	}
	s.Snapshot(l.now, &snap)
	var forwarded uint64
	for _, st := range snap.Streams {
		forwarded += st.Forwarded
	}
	if forwarded < 1000 || snap.Accelerators[0].Busy+snap.Accelerators[1].Busy != snap.Busy {
		t.Errorf("forwarded %d, accelerators %+v busy %d: not exercising both", forwarded, snap.Accelerators, snap.Busy)
	}
}

// TestDecisionAllocs pins the zero-allocation claim (a count, not a timing).
func TestDecisionAllocs(t *testing.T) {
	for _, slots := range []int{1, 2} {
		s, err := New(eightStreams(slots))
		if err != nil {
			t.Fatal(err)
		}
		acts := make([]Action, 0, 16)
		var now Time
		var tok uint64
		acts = decisionLoop(s, &now, &tok, acts, 1000)
		if n := testing.AllocsPerRun(2000, func() { acts = decisionLoop(s, &now, &tok, acts, 1) }); n != 0 {
			t.Errorf("slots=%d: %v allocations per decision", slots, n)
		}
		var snap Snapshot
		s.Snapshot(now, &snap)
		if n := testing.AllocsPerRun(100, func() { s.Snapshot(now, &snap) }); n != 0 {
			t.Errorf("Snapshot into a reused value: %v allocations", n)
		}
		s.Snapshot(now, &snap)
		var forwarded uint64
		for _, st := range snap.Streams {
			forwarded += st.Forwarded
		}
		if forwarded < 1000 {
			t.Errorf("slots=%d: only %d forwarded; the loop is not exercising dispatch", slots, forwarded)
		}

		s, _ = New(eightStreams(slots))
		l := &loadedLoop{s: s, acts: make([]Action, 0, 16)}
		for range 1000 {
			l.round()
		}
		if n := testing.AllocsPerRun(2000, l.round); n != 0 {
			t.Errorf("slots=%d loaded: %v allocations per decision", slots, n)
		}
		s.Snapshot(l.now, &snap)
		var waiting, superseded uint64
		for _, st := range snap.Streams {
			waiting += st.Waiting
			superseded += st.Superseded
		}
		if l.n < slots || waiting < 3 || superseded == 0 {
			t.Errorf("slots=%d loaded: running %d, waiting %d, superseded %d: not loaded", slots, l.n, waiting, superseded)
		}
	}
}

// eightCams is eight cameras on one batching detector (max_batch 8), two of
// them protected, on one slot.
func eightCams() (Config, []Request) {
	cfg := Config{Slots: 1, SafetyMargin: DefaultMargin,
		Models: []ModelSpec{{Name: "det", Exec: 10 * ms, MaxBatch: 8, BatchExec: seededE}}}
	var reqs []Request
	for i := range 8 {
		class, age := High, 66*ms
		if i < 2 {
			class, age = Protected, 50*ms
		}
		name := string(rune('a' + i))
		cfg.Streams = append(cfg.Streams, StreamSpec{Name: name, Model: "det", Class: class, Period: 33 * ms, MaxAge: age, Queue: Latest})
		reqs = append(reqs, Request{Stream: name, Model: "det", BatchKey: 7, Rows: 1})
	}
	return cfg, reqs
}

// BenchmarkBatchDecision8Cams is the decision when it forms batches of up to
// eight frames (the bound: under 2 µs, allocation-free).
func BenchmarkBatchDecision8Cams(b *testing.B) {
	cfg, reqs := eightCams()
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	l := &loadedLoop{s: s, acts: make([]Action, 0, 16), reqs: reqs}
	for range 1000 {
		l.round()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.round()
	}
}

// TestBatchDecisionAllocs: forming batches allocates nothing, and neither
// does a Snapshot with batch counts into a reused value.
func TestBatchDecisionAllocs(t *testing.T) {
	cfg, reqs := eightCams()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &loadedLoop{s: s, acts: make([]Action, 0, 16), reqs: reqs}
	for range 1000 {
		l.round()
	}
	if n := testing.AllocsPerRun(2000, l.round); n != 0 {
		t.Errorf("%v allocations per decision", n)
	}
	var snap Snapshot
	s.Snapshot(l.now, &snap)
	if n := testing.AllocsPerRun(100, func() { s.Snapshot(l.now, &snap) }); n != 0 {
		t.Errorf("Snapshot into a reused value: %v allocations", n)
	}
	batched := uint64(0)
	for n, c := range snap.Batches[0].Sizes {
		if n > 1 {
			batched += c
		}
	}
	if batched < 100 {
		t.Errorf("only %d batches: the loop does not exercise batching (%v)", batched, snap.Batches[0].Sizes)
	}
}
