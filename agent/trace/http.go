package trace

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// MaxSeconds bounds the window one HTTP request may ask for.
const MaxSeconds = 60

// MaxAsks bounds the windows recorded over HTTP at once: each holds up to the
// ring's size in events until its client has read it.
const MaxAsks = 4

// writeSlack is the time a client has to read its window once recorded.
const writeSlack = 30 * time.Second

// Handler serves GET ?seconds=N: the next N seconds of events (0 < N ≤
// MaxSeconds, default 5), written by write (WriteChrome: Chrome trace-event
// JSON). The window is copied out of the ring before anything is written, so
// a client that reads slowly, or not at all, holds only its own goroutine and
// its copy, never the recorder; it is cut off writeSlack after the window
// ends. The response's X-Vig-Trace-Events and X-Vig-Trace-Dropped headers
// count the events written and those the ring no longer held.
func (r *Recorder) Handler(write func(io.Writer, *Window) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		secs := 5.0
		if s := req.URL.Query().Get("seconds"); s != "" {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v > 0 && v <= MaxSeconds) {
				http.Error(w, fmt.Sprintf("seconds=%q: give a number of seconds above 0 and at most %d", s, MaxSeconds), http.StatusBadRequest)
				return
			}
			secs = v
		}
		select {
		case r.asks <- struct{}{}:
			defer func() { <-r.asks }()
		default:
			http.Error(w, fmt.Sprintf("%d trace windows are being recorded already: retry when one is done", MaxAsks), http.StatusTooManyRequests)
			return
		}
		d := time.Duration(secs * float64(time.Second))
		rc := http.NewResponseController(w)
		rc.SetWriteDeadline(time.Now().Add(d + writeSlack)) // the listener's own write timeout may be shorter
		win, err := r.Collect(req.Context(), d)
		if err != nil {
			return // the client left
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, FileName(win)))
		h.Set("X-Vig-Trace-Events", strconv.Itoa(len(win.Events)))
		h.Set("X-Vig-Trace-Dropped", strconv.FormatUint(win.Dropped, 10))
		rc.SetWriteDeadline(time.Now().Add(writeSlack))
		if req.Method == http.MethodHead {
			return
		}
		cw := &countWriter{w: w}
		bw := bufio.NewWriterSize(cw, 64<<10)
		err = write(bw, win)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil && cw.n == 0 { // nothing sent yet: the status can still say so
			h.Del("Content-Disposition")
			http.Error(w, "trace: "+err.Error(), http.StatusInternalServerError)
		}
	})
}

// FileName is the name a window's file is given: vig-YYYYmmdd-HHMMSS.trace.json
// (UTC, the wall time of its start).
func FileName(win *Window) string {
	t := time.Unix(0, win.WallStart).UTC()
	if win.WallStart == 0 {
		t = time.Now().UTC()
	}
	return "vig-" + t.Format("20060102-150405") + ".trace.json"
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
