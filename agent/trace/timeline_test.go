package trace

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
	return rec
}

// hostile is a stream name that would run as script, break out of an
// attribute or end the SVG were it not escaped.
const hostile = `<script>alert(1)</script>"'&</svg>`

// TestTimelinePage: the page carries the SVG inline, its tracks, no external
// asset, a viewport for phones and a refresh, and escapes stream names.
func TestTimelinePage(t *testing.T) {
	w := synthWindow()
	w.Streams[2].Name = hostile
	var asked float64
	h := TimelineHandler(func(s float64) (*Window, error) { asked = s; return w, nil })
	rec := get(t, h, "/debug/timeline")
	body := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, type %q: %s", rec.Code, rec.Header().Get("Content-Type"), body)
	}
	if asked != TimelineSeconds {
		t.Errorf("asked for %v s, want the default %v", asked, TimelineSeconds)
	}
	for _, want := range []string{`name="viewport"`, "<svg ", "</svg>", `setInterval(`, `fetch("?format=svg&seconds=5"`, "<noscript><meta http-equiv=\"refresh\""} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Count(body, "<script") != 1 {
		t.Errorf("%d <script in the page, want the page's own only", strings.Count(body, "<script"))
	}
	csp := rec.Header().Get("Content-Security-Policy")
	nonce := regexp.MustCompile(`'nonce-([A-Za-z0-9_-]{16,})'`).FindStringSubmatch(csp)
	if nonce == nil || !strings.Contains(body, `<script nonce="`+nonce[1]+`">`) || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q does not hold the page to its own script", csp)
	}
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).FindString(body); m != "" {
		t.Errorf("external asset: %s", m)
	}
	checkSVG(t, body)
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&amp;&lt;/svg&gt;") {
		t.Errorf("the hostile name is not shown escaped")
	}
	// A second load gets a new nonce.
	if csp2 := get(t, h, "/debug/timeline").Header().Get("Content-Security-Policy"); csp2 == csp {
		t.Errorf("the nonce does not change")
	}
}

// checkSVG: the SVG names every track of the synthetic window, in order, and
// is well-formed enough that the hostile name stays text.
func checkSVG(t *testing.T, body string) {
	t.Helper()
	rows := regexp.MustCompile(`data-track="([^"]*)"`).FindAllStringSubmatch(body, -1)
	var got []string
	for _, r := range rows {
		got = append(got, r[1])
	}
	want := []string{"gpu0 slot 0", "gpu0 slot 1", "gpu0 busy slots", "dla0 slot 0", "dla0 busy slots",
		"cam0", "cam0 ·2", "pose", "pose ·2", "pose ·3", "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&amp;&lt;/svg&gt;", "depth", "waiting frames"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("tracks\n %q\nwant\n %q", got, want)
	}
	if strings.Count(body, "<svg") != 1 || strings.Count(body, "</svg>") != 1 {
		t.Errorf("%d <svg and %d </svg>", strings.Count(body, "<svg"), strings.Count(body, "</svg>"))
	}
	for _, c := range []string{svgLateColour, svgSupersededColour, svgDeferColour, svgPalette[0], tint(svgPalette[0]), svgCounterColour} {
		if !strings.Contains(body, `fill="`+c+`"`) {
			t.Errorf("nothing drawn in %s", c)
		}
	}
	for _, title := range []string{"cam0 f8 (id req-8)", "late_dropped DEADLINE_EXCEEDED: would complete after the stream&#39;s freshness deadline",
		"batch of 2: cam0 f4, depth f5", "deferred for cam0", "pose f6 (id req-6)"} {
		if !strings.Contains(body, title) {
			t.Errorf("no title %q", title)
		}
	}
}

func TestTimelineSVG(t *testing.T) {
	w := synthWindow()
	w.Streams[2].Name = hostile
	rec := get(t, TimelineHandler(func(float64) (*Window, error) { return w, nil }), "/debug/timeline?format=svg&seconds=2.5")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "image/svg+xml" {
		t.Fatalf("status %d type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	body := rec.Body.String()
	if !strings.HasPrefix(body, "<svg ") || strings.Contains(body, "<script") {
		t.Errorf("bare SVG: %.200s", body)
	}
	checkSVG(t, body)
}

func TestTimelineQuery(t *testing.T) {
	var asked float64
	h := TimelineHandler(func(s float64) (*Window, error) { asked = s; return synthWindow(), nil })
	for _, c := range []struct {
		q    string
		code int
		want string
	}{
		{"?seconds=0", 400, "above 0 and at most 30"},
		{"?seconds=31", 400, "at most 30"},
		{"?seconds=x", 400, "seconds=\"x\""},
		{"?refresh=-1", 400, "0 (none)"},
		{"?format=png", 400, "give svg"},
		{"?seconds=10&refresh=0", 200, "live</a>"},
	} {
		rec := get(t, h, "/debug/timeline"+c.q)
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("%s: %d %.300q, want %d with %q", c.q, rec.Code, rec.Body.String(), c.code, c.want)
		}
	}
	if asked != 10 {
		t.Errorf("asked for %v s, want 10", asked)
	}
	if body := get(t, h, "/debug/timeline?refresh=0").Body.String(); strings.Contains(body, "<script") || strings.Contains(body, "http-equiv") {
		t.Errorf("refresh=0 still refreshes")
	}
	rec := get(t, TimelineHandler(func(float64) (*Window, error) { return nil, errors.New("recorder off") }), "/debug/timeline")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "recorder off") {
		t.Errorf("src error: %d %q", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/debug/timeline", nil))
	if rec.Code != 405 {
		t.Errorf("POST: %d", rec.Code)
	}
}

// TestWriteSVGEmpty: a window with nothing in it still draws its slots.
func TestWriteSVGEmpty(t *testing.T) {
	w := synthWindow()
	w.Events = nil
	var b strings.Builder
	if err := WriteSVG(&b, w); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "data-track="); n != 3 {
		t.Errorf("%d tracks in an empty window, want its 3 slots", n)
	}
	if err := WriteSVG(io.Discard, nil); err == nil {
		t.Error("nil window: no error")
	}
}
