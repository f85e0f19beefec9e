package sched

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// tritonSim is a backend as Triton runs one: each model has its instances
// (ModelSpec.Instances, else its accelerator's slots) and a FIFO of the
// requests sent to it; a request starts when an instance of its model is
// free. A job that starts while a job of another accelerator runs takes
// its accelerator's true interference factor longer (the mock backend's
// rule). It records what vig could not have known: a request vig sent to
// start at once (not Queued) that found no instance of its model free.
type tritonSim struct {
	h        *harness
	exec     map[string]time.Duration // solo execution time per model
	slowdown map[string]float64       // true interference per accelerator
	sensors  []sensor

	accelOf  map[string]string // model → accelerator
	inst     map[string]int
	queue    map[string][]uint64
	running  map[string]int
	jobs     map[uint64]tritonJob
	model    map[uint64]string
	streamOf map[uint64]string
	capture  map[uint64]Time

	noInstance int            // dispatches to start at once that found every instance busy
	queued     map[string]int // dispatches committed (Queued) per model
	maxAtOnce  map[string]int // most jobs of a model running at once at the backend
	started    map[string]int // jobs started per model
	coRun      map[string]int // jobs started per model while another accelerator ran
	deliv      map[string][]Delivery
}

type tritonJob struct {
	end   Time
	accel string
}

func newTritonSim(t testing.TB, cfg Config, exec map[string]time.Duration, slowdown map[string]float64) *tritonSim {
	m := &tritonSim{h: newHarness(t, cfg), exec: exec, slowdown: slowdown,
		accelOf: map[string]string{}, inst: map[string]int{}, queue: map[string][]uint64{},
		running: map[string]int{}, jobs: map[uint64]tritonJob{}, model: map[uint64]string{},
		streamOf: map[uint64]string{}, capture: map[uint64]Time{}, maxAtOnce: map[string]int{},
		started: map[string]int{}, queued: map[string]int{}, coRun: map[string]int{}, deliv: map[string][]Delivery{}}
	slots := map[string]int{"": cfg.Slots}
	for _, a := range cfg.Accelerators {
		slots[a.Name] = a.Slots
	}
	for _, md := range cfg.Models {
		m.accelOf[md.Name] = md.Accelerator
		m.inst[md.Name] = md.Instances
		if md.Instances == 0 {
			m.inst[md.Name] = slots[md.Accelerator]
		}
	}
	return m
}

func (m *tritonSim) sensor(stream string, phase, every time.Duration) {
	m.sensors = append(m.sensors, sensor{stream: stream, phase: phase, every: every, next: Time(phase)})
}

func (m *tritonSim) handle(acts []Action) {
	for _, a := range acts {
		if a.Kind != Dispatch {
			continue
		}
		mod := m.model[a.Token]
		if !a.Queued && (m.running[mod] >= m.inst[mod] || len(m.queue[mod]) > 0) {
			m.noInstance++
		}
		if a.Queued {
			m.queued[mod]++
		}
		m.queue[mod] = append(m.queue[mod], a.Token)
		m.tryStart(mod)
	}
}

func (m *tritonSim) tryStart(mod string) {
	for m.running[mod] < m.inst[mod] && len(m.queue[mod]) > 0 {
		tok := m.queue[mod][0]
		m.queue[mod] = m.queue[mod][1:]
		d := m.exec[mod]
		acc := m.accelOf[mod]
		for _, j := range m.jobs {
			if j.accel != acc {
				d = time.Duration(float64(d) * m.slowdown[acc])
				m.coRun[mod]++
				break
			}
		}
		m.jobs[tok] = tritonJob{end: m.h.now.Add(d), accel: acc}
		m.running[mod]++
		m.started[mod]++
		m.maxAtOnce[mod] = max(m.maxAtOnce[mod], m.running[mod])
	}
}

func (m *tritonSim) run(until Time) {
	h := m.h
	for {
		next := until
		for _, s := range m.sensors {
			next = min(next, s.next)
		}
		var done uint64
		doneAt := Never
		for tok, j := range m.jobs {
			if j.end < doneAt || (j.end == doneAt && tok < done) {
				doneAt, done = j.end, tok
			}
		}
		if doneAt <= next {
			next = doneAt
		} else {
			done = 0
		}
		if w, ok := h.s.NextWake(); ok && w < next {
			next, done = w, 0
		}
		if next >= until {
			return
		}
		h.set(next)
		if done != 0 {
			mod := m.model[done]
			delete(m.jobs, done)
			m.running[mod]--
			m.tryStart(mod) // the backend starts the next queued request first
			st := m.streamOf[done]
			m.deliv[st] = append(m.deliv[st], Delivery{At: h.now, Capture: m.capture[done]})
			m.handle(h.complete(done, true))
			continue
		}
		fired := false
		for i := range m.sensors {
			s := &m.sensors[i]
			if s.next != h.now {
				continue
			}
			fired = true
			model := ""
			for _, sp := range h.s.cfg.Streams {
				if sp.Name == s.stream {
					model = sp.Model
				}
			}
			h.tok++
			m.model[h.tok] = model
			m.streamOf[h.tok] = s.stream
			m.capture[h.tok] = h.now
			_, acts := h.arriveReq(Request{Token: h.tok, Stream: s.stream, Model: model})
			m.handle(acts)
			s.next = s.next.Add(s.every)
		}
		if !fired {
			m.handle(h.tick())
		}
	}
}

// A model with one instance never runs twice at once on an accelerator of
// two slots: three streams of it (and one of a model with room) for 3 s,
// and vig never sends a request of it to start while another runs — it
// commits one behind its own running job at most, as Triton queues it for
// that instance.
func TestInstancesCountOneNeverTwiceAtOnce(t *testing.T) {
	cfg := Config{
		Slots:        2,
		SafetyMargin: DefaultMargin,
		Models: []ModelSpec{
			{Name: "lane", Exec: 9 * ms, Instances: 1},
			{Name: "pose", Exec: 6 * ms},
		},
		Streams: []StreamSpec{
			{Name: "lane-a", Model: "lane", Class: Protected, Period: 33 * ms, MaxAge: 50 * ms, Queue: Latest},
			{Name: "lane-b", Model: "lane", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
			{Name: "lane-c", Model: "lane", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
			{Name: "pose", Model: "pose", Class: High, Period: 33 * ms, MaxAge: 66 * ms, Queue: Latest},
		},
	}
	m := newTritonSim(t, cfg, map[string]time.Duration{"lane": 9 * ms, "pose": 6 * ms}, nil)
	m.sensor("lane-a", 0, 33*ms)
	m.sensor("lane-b", 1*ms, 33*ms)
	m.sensor("lane-c", 2*ms, 33*ms)
	m.sensor("pose", 1500*time.Microsecond, 33*ms)
	m.run(at(3000))
	t.Logf("lane: %d jobs, %d committed behind its own; pose at most %d at once", m.started["lane"], m.queued["lane"], m.maxAtOnce["pose"])
	if m.noInstance != 0 {
		t.Errorf("%d requests of lane sent to start at once while its one instance ran", m.noInstance)
	}
	if m.maxAtOnce["lane"] != 1 {
		t.Errorf("lane ran %d at once at the backend, want 1", m.maxAtOnce["lane"])
	}
	if m.maxAtOnce["pose"] < 1 || m.started["lane"] < 3*80 || m.queued["lane"] == 0 {
		t.Errorf("too little ran to show anything: lane %d jobs (%d committed behind its own), pose at most %d at once",
			m.started["lane"], m.queued["lane"], m.maxAtOnce["pose"])
	}
	// Three frames of 9 ms per 33 ms fit one instance: each lane stream is
	// still covered.
	for _, st := range []string{"lane-a", "lane-b", "lane-c"} {
		if cov := Coverage(0, at(3000), 33*ms, 66*ms, m.deliv[st]); cov.Ratio() < 0.95 {
			t.Errorf("%s coverage %.3f, want ≥ 0.95", st, cov.Ratio())
		}
	}
}

// Instances and interference are validated with the fix in the message.
func TestInstancesInterferenceValidation(t *testing.T) {
	base := func() Config {
		return Config{
			Accelerators: []AcceleratorSpec{{Name: "gpu", Slots: 2}, {Name: "dla0", Slots: 1}},
			SafetyMargin: DefaultMargin,
			Models: []ModelSpec{
				{Name: "vlm", Exec: 200 * ms, Accelerator: "gpu", Exclusive: true, Instances: 1},
				{Name: "lane", Exec: 14 * ms, Accelerator: "dla0", Instances: 1},
			},
		}
	}
	if _, err := New(base()); err != nil {
		t.Fatalf("an exclusive model with instances, interference unset: %v", err)
	}
	for _, f := range []float64{1, 1.3, 10} {
		cfg := base()
		cfg.Accelerators[0].Interference = f
		if _, err := New(cfg); err != nil {
			t.Errorf("interference %v: %v", f, err)
		}
	}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Models[1].Instances = -1 }, "instances = -1: must be between 0"},
		{func(c *Config) { c.Models[1].Instances = maxSlots + 1 }, "instances = 257"},
		{func(c *Config) { c.Accelerators[0].Interference = 0.5 }, `accelerator "gpu": interference 0.5: must be a factor between 1 and 10`},
		{func(c *Config) { c.Accelerators[1].Interference = 11 }, "interference 11"},
		{func(c *Config) { c.Accelerators[1].Interference = math.NaN() }, "interference NaN"},
		{func(c *Config) { c.Accelerators[1].Interference = math.Inf(1) }, "interference +Inf"},
	} {
		cfg := base()
		tc.mod(&cfg)
		_, err := New(cfg)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
}

// Admission knows a model's instances: on two slots, a high job of a
// count-1 model holds its one instance, so the protected stream of the same
// model cannot use the other slot. lane-b's frame at 1025 ms (22 ms with
// margin, until 1047) would make lane-a's next frame (1033, deadline 1058)
// start at 1047 and end at 1069: it is deferred, though a slot is free.
// Taken as just another job on two slots it would start, and lane-a's
// frame would miss.
func TestInstancesAdmissionHoldsTheInstance(t *testing.T) {
	cfg := Config{
		Slots:        2,
		SafetyMargin: DefaultMargin,
		Models:       []ModelSpec{{Name: "lane", Exec: 20 * ms, Instances: 1}},
		Streams: []StreamSpec{
			{Name: "lane-a", Model: "lane", Class: Protected, Period: 33 * ms, MaxAge: 25 * ms, Queue: Latest},
			{Name: "lane-b", Model: "lane", Class: High, Period: 33 * ms, MaxAge: 100 * ms, Queue: Latest},
		},
	}
	h := newHarness(t, cfg)
	h.set(at(1000))
	a, acts := h.arrive("lane-a", 0)
	mustDispatch(t, acts, a)
	h.set(at(1020))
	h.complete(a, true)
	h.set(at(1025))
	b, acts := h.arrive("lane-b", 0)
	mustNothing(t, acts, b)
	if st := h.stats("lane-b"); st.Deferred != 1 {
		t.Fatalf("lane-b: %+v, want deferred", st.Counters)
	}
	h.set(at(1033))
	a, acts = h.arrive("lane-a", 0)
	if d := mustDispatch(t, acts, a); d.Slot != 0 && d.Slot != 1 {
		t.Fatalf("lane-a: %s", fmtAct(d))
	}
}
