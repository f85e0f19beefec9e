package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/internal/browsertest"
)

// TestTimelineInChromium: a running vig serves /debug/timeline while the
// trace scenario runs (a protected detector superseding itself, a VLM
// holding the slot, a stream whose frames arrive too old); headless
// Chromium loads the page and the screenshot shows every track the page
// declares, in its colours. VIG_TIMELINE_PNG=FILE keeps the screenshot
// (docs/img/timeline.png is one).
func TestTimelineInChromium(t *testing.T) {
	browsertest.Chromium(t)
	if testing.Short() {
		t.Skip("runs vig under load for a few seconds, and a browser")
	}
	rig := startTraceRig(t, traceOptions{})
	defer rig.stop(t)
	page := "http://" + rig.addrs["metrics"] + "/debug/timeline"
	browsertest.Get(t, page+"?seconds=0.1") // a page is open: vig records

	stop := make(chan struct{})
	var answers atomic.Uint64
	wg := rig.load(stop, &answers)
	defer wg.Wait()
	defer close(stop)
	time.Sleep(time.Second)

	checkTracksStrictly(t, browsertest.Get(t, "http://"+rig.addrs["metrics"]+"/debug/trace?seconds=0.5"))

	// Chromium loads the page, while the sensors run, through a proxy that
	// keeps what vig sent: the screenshot is checked against the very SVG
	// it drew.
	target, _ := url.Parse("http://" + rig.addrs["metrics"])
	var mu sync.Mutex
	var served []byte
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if r.Request.URL.Path == "/debug/timeline" { // not the favicon
			mu.Lock()
			served = b
			mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		return err
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	img, _ := browsertest.Screenshot(t, srv.URL+"/debug/timeline?seconds=0.4&refresh=0", 1000, 560)
	mu.Lock()
	body := string(served)
	mu.Unlock()
	if f := os.Getenv("VIG_TIMELINE_PNG"); f != "" {
		keepScreenshot(t, f, img)
	}

	rows := browsertest.Rows(body)
	var labels []string
	for _, r := range rows {
		labels = append(labels, r.Label)
	}
	for _, want := range []string{"det", "vlm", "late", "waiting frames"} {
		if !slices.Contains(labels, want) {
			t.Fatalf("no track %q in %q", want, labels)
		}
	}
	slot := slices.IndexFunc(rows, func(r browsertest.Row) bool { return regexp.MustCompile(` slot 0$`).MatchString(r.Label) })
	if slot < 0 || len(rows[slot].Shapes) == 0 {
		t.Fatalf("no slot track with jobs in %q", labels)
	}
	top := browsertest.Top(t, img, trace.ColourRule)
	checked := browsertest.CheckRows(t, img, rows, top, trace.LabelColumnPct, trace.ColourLabel)
	if checked[rows[slot].Label] == 0 {
		t.Errorf("slot 0: nothing drawn large enough to check")
	}
	// The stream whose frames arrive too old shows them red, wide enough
	// for the colour to be checked on the screenshot. (Superseded frames,
	// grey, come and go with the load: the synthetic window's test has
	// them.)
	if late := rows[slices.IndexFunc(rows, func(r browsertest.Row) bool { return r.Label == "late" })]; len(browsertest.Expect(late, 1000)[trace.ColourLate]) < 6 {
		t.Errorf("stream late: its late frames' red is not checked on the screenshot")
	}
	t.Logf("%d tracks, %d answers", len(rows), answers.Load())
}

// keepScreenshot writes img to file without the blank below the page.
func keepScreenshot(t *testing.T, file string, img image.Image) {
	b := img.Bounds()
	bottom := b.Min.Y
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); r&g&bl < 0xf000 {
				bottom = y
				break
			}
		}
	}
	sub := img.(interface {
		SubImage(image.Rectangle) image.Image
	}).SubImage(image.Rect(b.Min.X, b.Min.Y, b.Max.X, min(bottom+8, b.Max.Y)))
	var out bytes.Buffer
	if err := png.Encode(&out, sub); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTraceBatchesDrawn: in a batching run's Chrome trace, a batch is one
// job on its slot listing its frames, each of which has its own life on its
// stream's lane; the tracks hold strictly.
func TestTraceBatchesDrawn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vig under load for about a second")
	}
	yaml := `
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models:
  bat: {exec_ms: 6, max_batch: 4}
streams:
  - {name: b0, model: bat, class: high, period_ms: 20, max_age_ms: 500}
  - {name: b1, model: bat, class: high, period_ms: 20, max_age_ms: 500}
  - {name: b2, model: bat, class: high, period_ms: 20, max_age_ms: 500}
  - {name: b3, model: bat, class: high, period_ms: 20, max_age_ms: 500}
`
	rig := startTraceRigWith(t, yaml, traceOptions{})
	defer rig.stop(t)
	stop := make(chan struct{})
	var answers atomic.Uint64
	var sensors []traceSensor
	for _, b := range []string{"b0", "b1", "b2", "b3"} {
		sensors = append(sensors, traceSensor{stream: b, gap: 2 * time.Millisecond, client: 5 * time.Second, input: true})
	}
	wg := rig.loadWith(stop, &answers, sensors)
	body := browsertest.Get(t, "http://"+rig.addrs["metrics"]+"/debug/trace?seconds=0.5")
	close(stop)
	wg.Wait()
	checkTracksStrictly(t, body)

	var doc struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Args          map[string]any
		}
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	lives := map[string]bool{}
	for _, e := range doc.TraceEvents {
		if e.Cat == "frame" {
			lives[strings.Join(strings.Fields(e.Name)[:2], " ")] = true
		}
	}
	batches := 0
	for _, e := range doc.TraceEvents {
		if e.Cat != "job" || !strings.HasPrefix(e.Name, "batch ×") {
			continue
		}
		batches++
		frames, _ := e.Args["frames"].([]any)
		ids, _ := e.Args["triton_ids"].([]any)
		if n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(e.Name, "batch ×")[:2], ":")); n != len(frames) || n < 2 || len(ids) != n {
			t.Errorf("%q lists %d frames and %d ids", e.Name, len(frames), len(ids))
		}
		for _, f := range frames {
			if !lives[f.(string)] {
				t.Errorf("%q: frame %v has no life on its stream's lane", e.Name, f)
			}
		}
	}
	if batches == 0 {
		t.Errorf("no batch drawn in half a second of four streams batching")
	}
	t.Logf("%d batches, %d lives", batches, len(lives))
}

// checkTracksStrictly reads a Chrome trace of a real run: on every track,
// slices in time order; on a slot, none overlapping the one before; on a
// stream's lane, each inside the one it starts in; each frame's life once.
func checkTracksStrictly(t *testing.T, body string) {
	t.Helper()
	var doc struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Ts, Dur       float64
			Pid, Tid      int
			Args          map[string]any
		}
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	type track struct{ pid, tid int }
	streams := -1
	open := map[track][]float64{} // ends of the slices a new one may nest in
	last := map[track]float64{}
	lives := map[string]bool{}
	jobs := 0
	const eps = 1e-3
	for _, e := range doc.TraceEvents {
		if e.Ph == "M" && e.Name == "process_name" && e.Args["name"] == "streams" {
			streams = e.Pid
		}
		if e.Ph != "X" && e.Ph != "i" {
			continue
		}
		k := track{e.Pid, e.Tid}
		if e.Ts < last[k] {
			t.Errorf("track %v: %q at %v after a slice at %v", k, e.Name, e.Ts, last[k])
		}
		last[k] = e.Ts
		if e.Ph != "X" {
			continue
		}
		st := open[k]
		for len(st) > 0 && st[len(st)-1] <= e.Ts+eps {
			st = st[:len(st)-1]
		}
		if len(st) > 0 {
			if e.Pid != streams {
				t.Errorf("slot %v: job %q at %v overlaps the one before, which ends at %v", k, e.Name, e.Ts, st[len(st)-1])
			} else if e.Ts+e.Dur > st[len(st)-1]+eps {
				t.Errorf("lane %v: %q [%v, %v] crosses the slice it starts in, which ends at %v", k, e.Name, e.Ts, e.Ts+e.Dur, st[len(st)-1])
			}
		}
		open[k] = append(st, e.Ts+e.Dur)
		switch e.Cat {
		case "frame":
			f := fmt.Sprint(e.Args["token"])
			if lives[f] {
				t.Errorf("frame %s (%q) drawn twice", f, e.Name)
			}
			lives[f] = true
		case "job":
			jobs++
		}
	}
	if streams < 0 || len(lives) < 50 || jobs < 20 {
		t.Errorf("half a second of the scenario: %d lives, %d jobs, streams process %d", len(lives), jobs, streams)
	}
}
