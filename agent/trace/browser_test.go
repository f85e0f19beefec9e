package trace_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/internal/browsertest"
)

// TestTimelineInChromium loads the timeline page of the synthetic window in
// headless Chromium, at a desktop's width and a phone's, and checks on the
// screenshot that every track is drawn in its colours, where its SVG says.
func TestTimelineInChromium(t *testing.T) {
	browsertest.Chromium(t)
	w := trace.SynthWindow()
	srv := httptest.NewServer(trace.TimelineHandler(func(float64) (*trace.Window, error) { return w, nil }))
	defer srv.Close()
	body := browsertest.Get(t, srv.URL+"/?refresh=0")
	rows := browsertest.Rows(body)
	if len(rows) != 13 {
		t.Fatalf("%d tracks in the page, want 13", len(rows))
	}
	for _, size := range [][2]int{{1000, 700}, {412, 900}} {
		img, _ := browsertest.Screenshot(t, srv.URL+"/?refresh=0", size[0], size[1])
		top := browsertest.Top(t, img, trace.SVGRuleColour)
		checked := browsertest.CheckRows(t, img, rows, top, trace.SVGLabelPct, trace.SVGLabelBg)
		for _, r := range rows {
			if checked[r.Label] == 0 {
				t.Errorf("%dpx: track %q: nothing large enough to check", size[0], r.Label)
			}
		}
		// What each track must show, beyond drawing what it declares.
		for label, colour := range map[string]string{
			"gpu0 slot 0": trace.StreamColour(0), // cam0's jobs
			"dla0 slot 0": trace.StreamColour(2), // vlm's job
			"cam0":        trace.SVGLateColour,   // cam0 f8 dropped late
			"pose":        trace.SVGSupersededColour,
			"vlm":         trace.StreamColour(2),
		} {
			i := slices.IndexFunc(rows, func(r browsertest.Row) bool { return r.Label == label })
			if i < 0 {
				t.Fatalf("no track %q", label)
			}
			if n := len(browsertest.Expect(rows[i], size[0])[colour]); n < 6 {
				t.Errorf("%dpx: track %q paints %d pixels of %s", size[0], label, n, colour)
			}
		}
	}
}

// TestTimelineRefreshesInChromium: the page's script, under its CSP, fetches
// the SVG again and puts it in place while the page is open.
func TestTimelineRefreshesInChromium(t *testing.T) {
	browsertest.Chromium(t)
	var calls, redraws atomic.Int32
	h := trace.TimelineHandler(func(float64) (*trace.Window, error) {
		w := trace.SynthWindow()
		if calls.Add(1) > 1 {
			w.Streams[0].Name = "cam0-redrawn"
		}
		return w, nil
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r) // the favicon
			return
		}
		if r.URL.Query().Get("format") == "svg" {
			redraws.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	dom := browsertest.DOM(t, srv.URL+"/?refresh=1", 2500)
	if !strings.Contains(dom, `<span id="st">live</span>`) || !strings.Contains(dom, `data-track="cam0-redrawn"`) {
		t.Errorf("after 2.5 s of the page (%d redraws asked), it was not redrawn:\n%.3000s", redraws.Load(), dom)
	}
	if n := redraws.Load(); n < 2 {
		t.Errorf("%d redraws in 2.5 s of a page refreshed every second", n)
	}
}
