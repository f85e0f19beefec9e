package trace

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
)

// Bounds of the timeline page's query.
const (
	TimelineSeconds    = 5.0  // default window
	MaxTimelineSeconds = 30.0 // the page draws what it shows in memory
	timelineRefresh    = 2    // default refresh, seconds
	maxTimelineRefresh = 300
)

// TimelineHandler serves the live timeline page (GET /debug/timeline): the
// last few seconds as an inline SVG (WriteSVG), redrawn while the page is
// open, with no external asset and no framework (the device is offline), and
// readable on a phone over adb forward. src returns the last seconds of
// events; the page calls it at each load and refresh, so it should keep
// recording for a while after each call.
//
// Query: seconds (0 < s ≤ 30, default 5), refresh (seconds between redraws,
// 0: none; default 2), format=svg for the bare SVG.
func TimelineHandler(src func(seconds float64) (*Window, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		q := req.URL.Query()
		secs := TimelineSeconds
		if s := q.Get("seconds"); s != "" {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v > 0 && v <= MaxTimelineSeconds) {
				http.Error(w, fmt.Sprintf("seconds=%q: give a number of seconds above 0 and at most %g", s, MaxTimelineSeconds), http.StatusBadRequest)
				return
			}
			secs = v
		}
		refresh := timelineRefresh
		if s := q.Get("refresh"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 0 || v > maxTimelineRefresh {
				http.Error(w, fmt.Sprintf("refresh=%q: give whole seconds between redraws, 0 (none) to %d", s, maxTimelineRefresh), http.StatusBadRequest)
				return
			}
			refresh = v
		}
		svgOnly := false
		switch f := q.Get("format"); f {
		case "", "html":
		case "svg":
			svgOnly = true
		default:
			http.Error(w, fmt.Sprintf("format=%q: give svg, or nothing for the page", f), http.StatusBadRequest)
			return
		}
		win, err := src(secs)
		if err == nil && win == nil {
			err = fmt.Errorf("no window")
		}
		if err != nil {
			http.Error(w, "timeline: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		var svg bytes.Buffer
		if err := WriteSVG(&svg, win); err != nil {
			http.Error(w, "timeline: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		if svgOnly {
			h.Set("Content-Type", "image/svg+xml")
			h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
			if req.Method != http.MethodHead {
				w.Write(svg.Bytes())
			}
			return
		}
		// The page's one script carries a fresh nonce: nothing else on the
		// page (a stream's name, say) could run as script.
		var nb [16]byte
		rand.Read(nb[:])
		nonce := base64.RawURLEncoding.EncodeToString(nb[:])
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-"+nonce+"'; connect-src 'self'; img-src 'self' data:")
		if req.Method == http.MethodHead {
			return
		}
		w.Write(timelinePage(win, &svg, secs, refresh, nonce))
	})
}

func timelinePage(win *Window, svg *bytes.Buffer, secs float64, refresh int, nonce string) []byte {
	s := strconv.FormatFloat(secs, 'f', -1, 64)
	b := make([]byte, 0, svg.Len()+4096)
	b = append(b, `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>vig timeline</title>
`...)
	if refresh > 0 {
		b = append(b, `<noscript><meta http-equiv="refresh" content="`...)
		b = strconv.AppendInt(b, int64(refresh), 10)
		b = append(b, `"></noscript>
`...)
	}
	b = append(b, `<style>
body{margin:0;font:13px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;background:#fff}
header,footer{padding:6px 8px}
header b{color:#1b1f3b}
a{color:#3465a4}
#tl svg{display:block;width:100%}
.k{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px;vertical-align:-1px}
footer{color:#555;font-size:12px}
</style></head><body>
<header><b>vig</b> timeline · last `...)
	b = append(b, s...)
	b = append(b, ` s · <span id="st">`...)
	b = strconv.AppendInt(b, int64(len(win.Events)), 10)
	b = append(b, ` events`...)
	if win.Dropped > 0 {
		b = append(b, ` (`...)
		b = strconv.AppendUint(b, win.Dropped, 10)
		b = append(b, ` no longer held)`...)
	}
	b = append(b, `</span> · `...)
	for _, o := range []string{"2", "5", "10", "30"} {
		if o == s {
			b = append(b, o...)
			b = append(b, " s "...)
			continue
		}
		b = append(b, `<a href="?seconds=`...)
		b = append(b, o...)
		b = append(b, `&amp;refresh=`...)
		b = strconv.AppendInt(b, int64(refresh), 10)
		b = append(b, `">`...)
		b = append(b, o...)
		b = append(b, " s</a> "...)
	}
	if refresh > 0 {
		b = append(b, `· <a href="?seconds=`...)
		b = append(b, s...)
		b = append(b, `&amp;refresh=0">pause</a>`...)
	} else {
		b = append(b, `· <a href="?seconds=`...)
		b = append(b, s...)
		b = append(b, `">live</a>`...)
	}
	b = append(b, "</header>\n<div id=\"tl\">"...)
	b = append(b, svg.Bytes()...)
	b = append(b, `</div>
<footer>Slots: a job per box, coloured by its (lead) stream. Streams: a frame's life from capture to answer
<span class="k" style="background:`+tint(svgPalette[0])+`"></span>waiting<span class="k" style="background:`+svgPalette[0]+`"></span>running<span class="k" style="background:`+svgSupersededColour+`"></span>superseded<span class="k" style="background:`+svgLateColour+`"></span>late (not started)<span class="k" style="background:`+svgErrorColour+`"></span>refused, failed or cancelled<span class="k" style="background:`+svgDeferColour+`;width:3px"></span>deferred.
Hover a box for its frame. For the whole run: <code>vig trace -o vig.trace.json</code>, then open it in ui.perfetto.dev.</footer>
`...)
	if refresh > 0 {
		b = append(b, `<script nonce="`...)
		b = append(b, nonce...)
		b = append(b, `">
(function(){
var tl=document.getElementById("tl"),st=document.getElementById("st"),busy=false;
setInterval(function(){
 if(document.hidden||busy)return;
 busy=true;
 fetch("?format=svg&seconds=`...)
		b = append(b, s...)
		b = append(b, `",{cache:"no-store"}).then(function(r){
  if(!r.ok)return r.text().then(function(t){throw t});
  return r.text();
 }).then(function(t){tl.innerHTML=t;st.textContent="live"}).catch(function(e){st.textContent="not updated: "+e}).finally(function(){busy=false});
},`...)
		b = strconv.AppendInt(b, int64(refresh)*1000, 10)
		b = append(b, `);
})();
</script>
`...)
	}
	return append(b, "</body></html>\n"...)
}
