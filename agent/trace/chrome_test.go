package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
)

type chromeEvent struct {
	Name  string         `json:"name"`
	Ph    string         `json:"ph"`
	Cat   string         `json:"cat"`
	Ts    *float64       `json:"ts"`
	Dur   *float64       `json:"dur"`
	Pid   *int           `json:"pid"`
	Tid   *int           `json:"tid"`
	S     string         `json:"s"`
	Cname string         `json:"cname"`
	Args  map[string]any `json:"args"`
	order int
}

type chromeFile struct {
	TraceEvents     []chromeEvent  `json:"traceEvents"`
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData"`
}

type tkey struct{ pid, tid int }

// parsed is a Chrome trace read back, with its tracks named.
type parsed struct {
	chromeFile
	procs  map[int]string
	tracks map[tkey]string
	byName map[string]tkey // "process/thread"
}

func parseChrome(t *testing.T, b []byte) *parsed {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("not JSON:\n%.2000s", b)
	}
	p := &parsed{procs: map[int]string{}, tracks: map[tkey]string{}, byName: map[string]tkey{}}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p.chromeFile); err != nil {
		t.Fatal(err)
	}
	if p.DisplayTimeUnit != "ms" {
		t.Errorf("displayTimeUnit %q", p.DisplayTimeUnit)
	}
	used := map[tkey]bool{}
	for i := range p.TraceEvents {
		e := &p.TraceEvents[i]
		e.order = i
		if e.Pid == nil || e.Name == "" {
			t.Fatalf("event %d lacks pid or name: %+v", i, e)
		}
		switch e.Ph {
		case "M":
			if e.Args == nil {
				t.Fatalf("metadata %d without args", i)
			}
			switch e.Name {
			case "process_name":
				p.procs[*e.Pid] = e.Args["name"].(string)
			case "thread_name":
				k := tkey{*e.Pid, *e.Tid}
				if used[k] {
					t.Errorf("track %v named after its first event", k)
				}
				if _, dup := p.tracks[k]; dup {
					t.Errorf("track %v named twice", k)
				}
				for o := range p.tracks {
					if o.tid == k.tid {
						t.Errorf("tid %d in processes %d and %d: Perfetto keys threads by tid", k.tid, o.pid, k.pid)
					}
				}
				p.tracks[k] = e.Args["name"].(string)
				p.byName[p.procs[*e.Pid]+"/"+e.Args["name"].(string)] = k
			case "process_sort_index", "thread_sort_index":
				if _, ok := e.Args["sort_index"].(float64); !ok {
					t.Errorf("%s without sort_index", e.Name)
				}
			default:
				t.Errorf("metadata %q", e.Name)
			}
		case "X":
			if e.Ts == nil || e.Dur == nil || e.Tid == nil || *e.Dur < 0 {
				t.Fatalf("complete event %d lacks ts, dur or tid: %+v", i, e)
			}
			used[tkey{*e.Pid, *e.Tid}] = true
		case "i":
			if e.Ts == nil || e.Tid == nil || e.S != "t" {
				t.Fatalf("instant %d: %+v", i, e)
			}
			used[tkey{*e.Pid, *e.Tid}] = true
		case "C":
			if e.Ts == nil || len(e.Args) != 1 {
				t.Fatalf("counter %d: %+v", i, e)
			}
		default:
			t.Fatalf("event %d: phase %q", i, e.Ph)
		}
		if e.Ph != "M" && e.Ph != "C" {
			if _, ok := p.tracks[tkey{*e.Pid, *e.Tid}]; !ok {
				t.Errorf("event %d (%s) on an unnamed track %d/%d", i, e.Name, *e.Pid, *e.Tid)
			}
			if _, ok := p.procs[*e.Pid]; !ok {
				t.Errorf("event %d on an unnamed process %d", i, *e.Pid)
			}
		}
	}
	return p
}

// on returns the events of track "process/thread", in file order.
func (p *parsed) on(t *testing.T, track string) []chromeEvent {
	t.Helper()
	k, ok := p.byName[track]
	if !ok {
		t.Fatalf("no track %q (have %v)", track, p.byName)
	}
	var es []chromeEvent
	for _, e := range p.TraceEvents {
		if e.Ph != "M" && e.Ph != "C" && *e.Pid == k.pid && *e.Tid == k.tid {
			es = append(es, e)
		}
	}
	return es
}

// checkTracks: each track's events in time order, no overlap on a slot,
// proper nesting on a stream's lane, counters in time order.
func checkTracks(t *testing.T, p *parsed) {
	t.Helper()
	const eps = 1e-3 // µs: the file's resolution
	last := map[tkey]float64{}
	ends := map[tkey][]float64{} // open slices, innermost last
	counters := map[string]float64{}
	for _, e := range p.TraceEvents {
		switch e.Ph {
		case "C":
			k := p.procs[*e.Pid] + "/" + e.Name
			if prev, ok := counters[k]; ok && *e.Ts < prev {
				t.Errorf("counter %s goes back in time: %v after %v", k, *e.Ts, prev)
			}
			counters[k] = *e.Ts
			continue
		case "M":
			continue
		}
		k := tkey{*e.Pid, *e.Tid}
		if prev, ok := last[k]; ok && *e.Ts < prev {
			t.Errorf("%s: %q at %v after an event at %v", p.tracks[k], e.Name, *e.Ts, prev)
		}
		last[k] = *e.Ts
		if e.Ph != "X" {
			continue
		}
		st := ends[k]
		for len(st) > 0 && st[len(st)-1] <= *e.Ts+eps {
			st = st[:len(st)-1]
		}
		end := *e.Ts + *e.Dur
		if len(st) > 0 {
			if p.procs[*e.Pid] != "streams" {
				t.Errorf("%s/%s: %q [%v, %v] overlaps the job before it, which ends at %v", p.procs[*e.Pid], p.tracks[k], e.Name, *e.Ts, end, st[len(st)-1])
			} else if end > st[len(st)-1]+eps {
				t.Errorf("%s: %q [%v, %v] crosses the slice it starts in, which ends at %v", p.tracks[k], e.Name, *e.Ts, end, st[len(st)-1])
			}
		}
		ends[k] = append(st, end)
	}
}

func writeSynth(t *testing.T, w *Window) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteChrome(&b, w); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func names(es []chromeEvent, ph, cat string) []string {
	var ns []string
	for _, e := range es {
		if e.Ph == ph && (cat == "" || e.Cat == cat) {
			ns = append(ns, e.Name)
		}
	}
	return ns
}

func find(t *testing.T, es []chromeEvent, name string) chromeEvent {
	t.Helper()
	for _, e := range es {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no event %q in %v", name, names(es, "X", ""))
	return chromeEvent{}
}

func us(m float64) float64 { return float64(at(m)) / 1e3 }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-3 }

// TestChromeSynthetic draws the synthetic window and checks the file's
// format, its tracks and what each shows.
func TestChromeSynthetic(t *testing.T) {
	p := parseChrome(t, writeSynth(t, synthWindow()))
	checkTracks(t, p)

	if got := slices.Sorted(func(yield func(string) bool) {
		for _, n := range p.procs {
			yield(n)
		}
	}); !slices.Equal(got, []string{"dla0", "gpu0", "streams"}) {
		t.Errorf("processes %v", got)
	}
	for _, tr := range []string{"gpu0/slot 0", "gpu0/slot 1", "dla0/slot 0", "streams/cam0", "streams/cam0 ·2", "streams/pose", "streams/pose ·2", "streams/vlm", "streams/depth"} {
		if _, ok := p.byName[tr]; !ok {
			t.Errorf("no track %s", tr)
		}
	}
	if got, want := p.OtherData["wall_start_unix_ns"], float64(synthWindow().WallStart); got != want {
		t.Errorf("wall_start_unix_ns %v, want %v", got, want)
	}

	// The slots: jobs by stream and frame, the batch as one job.
	for track, want := range map[string][]string{
		"gpu0/slot 0": {"cam0 f1", "batch ×2: cam0 f4, depth f5", "cam0 f9", "pose f10"},
		"gpu0/slot 1": {"pose f100", "pose f3", "pose f7"},
		"dla0/slot 0": {"vlm f2"},
	} {
		if got := names(p.on(t, track), "X", "job"); !slices.Equal(got, want) {
			t.Errorf("%s: jobs %q, want %q", track, got, want)
		}
	}
	slot0 := p.on(t, "gpu0/slot 0")
	batch := find(t, slot0, "batch ×2: cam0 f4, depth f5")
	if fr := batch.Args["frames"].([]any); len(fr) != 2 || fr[0] != "cam0 f4" || fr[1] != "depth f5" {
		t.Errorf("batch frames %v", fr)
	}
	if ids := batch.Args["triton_ids"].([]any); len(ids) != 2 || ids[0] != "req-4" || ids[1] != "req-5" {
		t.Errorf("batch ids %v", ids)
	}
	// pose f10 was committed behind cam0 f9: its job starts when f9's ends.
	f10 := find(t, slot0, "pose f10")
	if !near(*f10.Ts, us(16)) || !near(*f10.Ts+*f10.Dur, us(18)) || f10.Args["queued"] != true {
		t.Errorf("pose f10's job: ts %v dur %v args %v; want %v..%v, queued", *f10.Ts, *f10.Dur, f10.Args, us(16), us(18))
	}
	vlm := find(t, p.on(t, "dla0/slot 0"), "vlm f2")
	if vlm.Args["model"] != "vlm-int8" || vlm.Args["running"] == nil || !near(*vlm.Ts+*vlm.Dur, us(20)) {
		t.Errorf("vlm f2's job runs past the window as its variant: %+v", vlm.Args)
	}
	if f100 := find(t, p.on(t, "gpu0/slot 1"), "pose f100"); f100.Args["dispatched"] != "before the window" {
		t.Errorf("pose f100: %v", f100.Args)
	}
	// Its life, from before the window, shows it running.
	if got := names(p.on(t, "streams/pose"), "X", "")[:2]; !slices.Equal(got, []string{"pose f100", "run"}) {
		t.Errorf("pose f100's life: %v", got)
	}

	// The streams: one life per frame, marked with its outcome and reason.
	lives := map[string]chromeEvent{}
	for _, e := range p.TraceEvents {
		if e.Cat == "frame" {
			if _, dup := lives[e.Name]; dup {
				t.Errorf("frame %q drawn twice", e.Name)
			}
			lives[e.Name] = e
		}
	}
	wantLives := []string{"cam0 f1", "vlm f2", "pose f3", "cam0 f4", "depth f5", "pose f6 superseded", "pose f7",
		"cam0 f8 late_dropped", "cam0 f9", "pose f10", "cam0 f11", "pose f100"}
	if got := slices.Sorted(func(yield func(string) bool) {
		for n := range lives {
			yield(n)
		}
	}); !slices.Equal(got, slices.Sorted(slices.Values(wantLives))) {
		t.Errorf("lives %q, want %q", got, wantLives)
	}
	sup := lives["pose f6 superseded"]
	if sup.Args["reason"] != reasonText(reasonSup) || sup.Args["code"] != "ABORTED" || sup.Args["triton_id"] != "req-6" {
		t.Errorf("superseded frame: %v", sup.Args)
	}
	lt := lives["cam0 f8 late_dropped"]
	if lt.Args["reason"] != reasonText(reasonLate) || lt.Args["code"] != "DEADLINE_EXCEEDED" || lt.Args["outcome"] != "late_dropped" {
		t.Errorf("late frame: %v", lt.Args)
	}
	// A life starts at capture (2 ms before arrival) and ends at the answer.
	f1 := lives["cam0 f1"]
	if !near(*f1.Ts, us(1)-2e3) || !near(*f1.Ts+*f1.Dur, us(5.01)) || f1.Args["triton_id"] != "req-1" {
		t.Errorf("cam0 f1: ts %v dur %v args %v", *f1.Ts, *f1.Dur, f1.Args)
	}
	if lives["cam0 f11"].Args["answer"] != "after the window" || lives["pose f100"].Args["arrived"] != "before the window" {
		t.Errorf("the window's edges: %v %v", lives["cam0 f11"].Args, lives["pose f100"].Args)
	}
	// Its phases nest inside it.
	cam0 := p.on(t, "streams/cam0")
	if got := names(cam0, "X", "phase")[:3]; !slices.Equal(got, []string{"transit", "wait", "run"}) {
		t.Errorf("cam0 f1's phases %v", got)
	}
	// The deferral, on vlm's track, names the stream it was held for.
	vt := p.on(t, "streams/vlm")
	d := find(t, vt, "deferred for cam0")
	if d.Ph != "i" || !near(*d.Ts, us(1.6)) || d.Args["for"] != "cam0" || d.Args["frame"] != "vlm f2" {
		t.Errorf("deferral %+v", d)
	}

	// Counters: waiting frames on streams, busy slots per accelerator.
	var waiting, busyGPU, busyDLA int
	for _, e := range p.TraceEvents {
		if e.Ph != "C" {
			continue
		}
		switch p.procs[*e.Pid] + "/" + e.Name {
		case "streams/waiting frames":
			waiting++
		case "gpu0/busy slots":
			busyGPU++
		case "dla0/busy slots":
			busyDLA++
		default:
			t.Errorf("counter %s on %s", e.Name, p.procs[*e.Pid])
		}
	}
	if waiting < 5 || busyGPU < 4 || busyDLA != 1 {
		t.Errorf("counters: %d waiting, %d gpu0 busy, %d dla0 busy", waiting, busyGPU, busyDLA)
	}
}

// TestChromeEscapes: user-named streams reach the file as JSON strings.
func TestChromeEscapes(t *testing.T) {
	w := synthWindow()
	w.Streams[0].Name = "<script>alert(\"x\")</script>\\\n\x01\xff"
	b := writeSynth(t, w)
	if bytes.Contains(b, []byte("<script>")) {
		t.Errorf("raw <script> in the file")
	}
	p := parseChrome(t, b)
	checkTracks(t, p)
	if _, ok := p.byName["streams/<script>alert(\"x\")</script>\\\n\x01\uFFFD"]; !ok {
		t.Errorf("stream name not read back: %v", p.byName)
	}
}

// TestChromeBusy: a long window keeps every track's order, draws every frame
// once, and bounds what it allocates (not growing with the window).
func TestChromeBusy(t *testing.T) {
	w := busyWindow(3000)
	p := parseChrome(t, writeSynth(t, w))
	checkTracks(t, p)
	frames := 0
	for _, e := range p.TraceEvents {
		if e.Cat == "frame" {
			frames++
		}
	}
	if frames != 3000 {
		t.Errorf("%d lives, want 3000", frames)
	}
	small, big := busyWindow(1000), busyWindow(10000)
	a1 := testing.AllocsPerRun(5, func() { WriteChrome(io.Discard, small) })
	a2 := testing.AllocsPerRun(5, func() { WriteChrome(io.Discard, big) })
	if a2 > a1+20 {
		t.Errorf("WriteChrome allocates %v times for 1000 frames, %v for 10000: it grows with the window", a1, a2)
	}
	t.Logf("allocations: %v for 1000 frames, %v for 10000", a1, a2)
}

type failWriter struct{ n int }

func (f *failWriter) Write(b []byte) (int, error) {
	if f.n -= len(b); f.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(b), nil
}

func TestChromeErrors(t *testing.T) {
	if err := WriteChrome(io.Discard, nil); err == nil {
		t.Error("nil window: no error")
	}
	w := synthWindow()
	w.Events[3], w.Events[4] = w.Events[4], w.Events[3]
	if err := WriteChrome(io.Discard, w); err == nil || !strings.Contains(err.Error(), "time order") {
		t.Errorf("events out of order: %v", err)
	}
	if err := WriteChrome(&failWriter{n: 40000}, busyWindow(2000)); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("a failing writer: %v", err)
	}
}

// TestChromeEmpty: a window with no events still names its tracks.
func TestChromeEmpty(t *testing.T) {
	w := synthWindow()
	w.Events = nil
	p := parseChrome(t, writeSynth(t, w))
	if len(p.procs) != 3 || len(p.tracks) != 3 {
		t.Errorf("empty window: processes %v tracks %v", p.procs, p.tracks)
	}
}

// TestChromeLongLife: a frame alive through the whole window does not make
// the frames of its stream that come and go meanwhile pile up.
func TestChromeLongLife(t *testing.T) {
	window := func(n int) *Window {
		s := &synth{}
		s.w.Meta = Meta{Streams: []Stream{{"vlm", "m", "best_effort"}}, Accels: []Accel{{"gpu", 1}}}
		s.w.Start = t0
		s.arrive(0, 1, 0, 1)
		m := 0.0
		for i := 2; i <= n; i++ {
			m++
			s.arrive(m, uint64(i), 0, 2)
			s.answer(m+0.5, uint64(i), 0, codeDeadline, late, reasonLate, 1)
		}
		s.answer(m+1, 1, 0, codeOK, fwd, 0, 0)
		s.w.End = at(m + 1)
		return &s.w
	}
	small, big := window(1000), window(10000)
	p := parseChrome(t, writeSynth(t, big))
	checkTracks(t, p)
	// Each short life spans its 2 ms of transit: three of them overlap.
	if len(p.tracks) != 5 {
		t.Errorf("tracks %v, want a slot and four lanes", p.tracks)
	}
	a1 := testing.AllocsPerRun(5, func() { WriteChrome(io.Discard, small) })
	a2 := testing.AllocsPerRun(5, func() { WriteChrome(io.Discard, big) })
	if a2 > a1+20 {
		t.Errorf("%v allocations for 1000 frames beside a long one, %v for 10000", a1, a2)
	}
}
