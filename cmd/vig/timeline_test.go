package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"slices"
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
	img, raw := browsertest.Screenshot(t, srv.URL+"/debug/timeline?seconds=0.4&refresh=0", 1000, 560)
	mu.Lock()
	body := string(served)
	mu.Unlock()
	if f := os.Getenv("VIG_TIMELINE_PNG"); f != "" {
		if err := os.WriteFile(f, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	rows := browsertest.Rows(body)
	var labels []string
	for _, r := range rows {
		labels = append(labels, r.Label)
	}
	for _, want := range []string{"det", "vlm", "late", "waiting frames"} {
		if !slices.Contains(labels, want) {
			t.Errorf("no track %q in %q", want, labels)
		}
	}
	slot := slices.IndexFunc(rows, func(r browsertest.Row) bool { return regexp.MustCompile(` slot 0$`).MatchString(r.Label) })
	if slot < 0 || len(rows[slot].Shapes) < 10 {
		t.Fatalf("no slot track with jobs in %q", labels)
	}
	top := browsertest.Top(t, img, trace.ColourRule)
	checked := browsertest.CheckRows(t, img, rows, top, trace.LabelColumnPct, trace.ColourLabel)
	if checked[rows[slot].Label] == 0 {
		t.Errorf("slot 0: nothing drawn large enough to check")
	}
	// The stream whose frames arrive too old shows them red; the detector,
	// sent by three sensors at once, supersedes itself (grey).
	marks := map[string]string{"late": trace.ColourLate, "det": trace.ColourSuperseded}
	for label, colour := range marks {
		n := 0
		for _, r := range rows {
			if r.Label == label || len(r.Label) > len(label) && r.Label[:len(label)+1] == label+" " {
				n += len(browsertest.Expect(r, 1000)[colour])
			}
		}
		if n < 6 {
			t.Errorf("stream %s: %d pixels of %s", label, n, colour)
		}
	}
	t.Logf("%d tracks, %d answers", len(rows), answers.Load())
}
