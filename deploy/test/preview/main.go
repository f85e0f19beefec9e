// Command preview renders vig's Grafana dashboard (deploy/grafana/vig-dashboard.json)
// as one HTML page of SVG charts from a Prometheus server's data: every panel's
// queries are run as written (Grafana's variables set to "all"), over a time range,
// and drawn on the dashboard's grid. It is how docs/img/dashboard.png was made
// without Grafana (which Debian does not package): run.sh makes the data, this
// draws it, and a headless browser takes the picture.
//
//	go run ./preview -prometheus http://127.0.0.1:19091 -start 16:04:00 -end 16:15:00 -out /tmp/preview
//	chromium --headless --screenshot=docs/img/dashboard.png --window-size=1600,2200 /tmp/preview/dashboard.html
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

type panel struct {
	ID          int
	Type, Title string
	GridPos     struct{ H, W, X, Y int }
	FieldConfig struct {
		Defaults struct {
			Unit     string
			Min, Max *float64
		}
	}
	Targets []struct{ Expr, LegendFormat string }
}

type series struct {
	label  string
	points [][2]float64 // unix seconds, value
}

func main() {
	prom := flag.String("prometheus", "http://127.0.0.1:19091", "Prometheus base URL")
	dash := flag.String("dashboard", filepath.Join("..", "grafana", "vig-dashboard.json"), "dashboard JSON")
	startS := flag.String("start", "", "start of the range, HH:MM:SS UTC today or RFC 3339")
	endS := flag.String("end", "", "end of the range, likewise")
	step := flag.Duration("step", 5*time.Second, "query resolution")
	rate := flag.String("rate-interval", "30s", "what $__rate_interval stands for (Grafana: 4 × the scrape interval)")
	out := flag.String("out", "preview", "directory to write dashboard.html into")
	flag.Parse()
	start, err := parseTime(*startS)
	check(err)
	end, err := parseTime(*endS)
	check(err)
	if !end.After(start) {
		check(fmt.Errorf("-end %s is not after -start %s", end, start))
	}
	b, err := os.ReadFile(*dash)
	check(err)
	var d struct {
		Title  string
		Panels []panel
	}
	check(json.Unmarshal(b, &d))
	vars := strings.NewReplacer("$__rate_interval", *rate, "$job", ".*", "$instance", ".*", "$stream", ".*")

	var page strings.Builder
	const unitW, unitH = 62, 34 // px per grid column and row
	maxY := 0
	for _, p := range d.Panels {
		maxY = max(maxY, p.GridPos.Y+p.GridPos.H)
	}
	fmt.Fprintf(&page, `<!doctype html><meta charset="utf-8"><title>%s</title><style>
body{background:#111217;color:#ccccdc;font:13px DejaVu Sans,sans-serif;margin:0;padding:12px}
.grid{position:relative;width:%dpx;height:%dpx}
.p{position:absolute;box-sizing:border-box;background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:6px 8px;overflow:hidden}
.row{position:absolute;font-size:15px;font-weight:bold;color:#d8d9da;padding-top:8px}
.t{font-weight:bold;margin-bottom:2px;color:#d8d9da}.lg{font-size:11px;line-height:13px}
h1{font-size:18px;margin:0 0 4px}.note{color:#8e8e8e;margin-bottom:10px}
</style><h1>%s</h1><div class="note">Rendered by deploy/test/preview from Prometheus data of a real run (deploy/test/preview/run.sh), %s to %s UTC, with the dashboard's own queries; not a Grafana screenshot.%s</div><div class="grid">`,
		html.EscapeString(d.Title), 24*unitW, maxY*unitH, html.EscapeString(d.Title), start.Format("2006-01-02 15:04:05"), end.Format("15:04:05"),
		alertsLine(*prom, start, end, *step))
	colors := []string{"#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0", "#37872d", "#fade2a"}
	for _, p := range d.Panels {
		g := p.GridPos
		x, y, w, h := g.X*unitW, g.Y*unitH, g.W*unitW-6, g.H*unitH-6
		if p.Type == "row" {
			fmt.Fprintf(&page, `<div class="row" style="left:%dpx;top:%dpx">%s</div>`, x, y, html.EscapeString(p.Title))
			continue
		}
		var all []series
		for _, tg := range p.Targets {
			s, err := queryRange(*prom, vars.Replace(tg.Expr), start, end, *step, tg.LegendFormat)
			check(err)
			all = append(all, s...)
		}
		fmt.Fprintf(&page, `<div class="p" style="left:%dpx;top:%dpx;width:%dpx;height:%dpx"><div class="t">%s</div>`, x, y, w, h, html.EscapeString(p.Title))
		const shown = 4 // legend lines; the rest are counted
		lines := min(len(all), shown)
		if len(all) > shown {
			lines++
		}
		page.WriteString(chart(all, p, start, end, w-16, h-30-13*lines, colors))
		for i, s := range all {
			if i == shown {
				fmt.Fprintf(&page, `<div class="lg">… and %d more series</div>`, len(all)-shown)
				break
			}
			last := s.points[len(s.points)-1][1]
			fmt.Fprintf(&page, `<div class="lg"><span style="color:%s">▬</span> %s — last %s</div>`, colors[i%len(colors)], html.EscapeString(s.label), format(last, p.FieldConfig.Defaults.Unit))
		}
		page.WriteString(`</div>`)
	}
	page.WriteString(`</div>`)
	check(os.MkdirAll(*out, 0o755))
	check(os.WriteFile(filepath.Join(*out, "dashboard.html"), []byte(page.String()), 0o644))
	fmt.Println(filepath.Join(*out, "dashboard.html"))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "preview:", err)
		os.Exit(1)
	}
}

func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	t, err := time.Parse("15:04:05", s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want HH:MM:SS (UTC, today) or RFC 3339", s)
	}
	now := time.Now().UTC()
	return time.Date(now.Year(), now.Month(), now.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC), nil
}

var legendVar = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

func queryRange(prom, expr string, start, end time.Time, step time.Duration, legend string) ([]series, error) {
	q := url.Values{"query": {expr}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	resp, err := http.Get(prom + "/api/v1/query_range?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status, Error string
		Data          struct {
			Result []struct {
				Metric map[string]string
				Values [][2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %v", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", expr, r.Error)
	}
	var out []series
	for _, m := range r.Data.Result {
		s := series{label: legendVar.ReplaceAllStringFunc(legend, func(v string) string { return m.Metric[legendVar.FindStringSubmatch(v)[1]] })}
		if s.label == "" {
			s.label = expr
		}
		for _, v := range m.Values {
			t, _ := v[0].(float64)
			f, _ := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				s.points = append(s.points, [2]float64{t, f})
			}
		}
		if len(s.points) > 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].label < out[j].label })
	return out, nil
}

// chart draws the series as polylines, with the value axis's range and the
// time axis's ends labelled.
func chart(all []series, p panel, start, end time.Time, w, h int, colors []string) string {
	if h < 20 {
		h = 20
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range all {
		for _, pt := range s.points {
			lo, hi = min(lo, pt[1]), max(hi, pt[1])
		}
	}
	if d := p.FieldConfig.Defaults; d.Min != nil {
		lo = *d.Min
	}
	if d := p.FieldConfig.Defaults; d.Max != nil && hi <= *d.Max {
		hi = *d.Max
	}
	if math.IsInf(lo, 0) {
		return fmt.Sprintf(`<svg width="%d" height="%d"><text x="%d" y="%d" fill="#8e8e8e" text-anchor="middle">No data</text></svg>`, w, h, w/2, h/2)
	}
	if hi <= lo {
		hi = lo + 1
	}
	const left = 58
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" style="display:block">`, w, h)
	const top = 8 // room for the highest axis label
	pw, ph := float64(w-left), float64(h-14-top)
	for i := 0; i <= 2; i++ {
		v := lo + (hi-lo)*float64(i)/2
		yy := top + ph - ph*float64(i)/2
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#2c3235"/><text x="%d" y="%.1f" fill="#8e8e8e" font-size="10" text-anchor="end">%s</text>`,
			left, w, yy, yy, left-4, yy+3, format(v, p.FieldConfig.Defaults.Unit))
	}
	t0, t1 := float64(start.Unix()), float64(end.Unix())
	for i, s := range all {
		var pts []string
		prev := -1.0
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.3" points="%s"/>`, colors[i%len(colors)], strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for _, pt := range s.points {
			if prev >= 0 && pt[0]-prev > 30 { // a gap in the data stays a gap
				flush()
			}
			prev = pt[0]
			x := float64(left) + pw*(pt[0]-t0)/(t1-t0)
			y := top + ph - ph*(pt[1]-lo)/(hi-lo)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		flush()
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#8e8e8e" font-size="10">%s</text><text x="%d" y="%d" fill="#8e8e8e" font-size="10" text-anchor="end">%s</text></svg>`,
		left, h-2, start.Format("15:04"), w, h-2, end.Format("15:04"))
	return b.String()
}

func format(v float64, unit string) string {
	switch unit {
	case "percentunit":
		return strconv.FormatFloat(v*100, 'f', 1, 64) + " %"
	case "s":
		if math.Abs(v) < 1 {
			return strconv.FormatFloat(v*1000, 'f', 1, 64) + " ms"
		}
		return strconv.FormatFloat(v, 'f', 2, 64) + " s"
	case "bytes":
		return strconv.FormatFloat(v/(1<<20), 'f', 1, 64) + " MiB"
	case "reqps":
		return strconv.FormatFloat(v, 'f', 1, 64) + "/s"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// alertsLine lists the alerts that fired during the range, from Prometheus's
// ALERTS series.
func alertsLine(prom string, start, end time.Time, step time.Duration) string {
	s, err := queryRange(prom, `ALERTS{alertstate="firing"}`, start, end, step, "{{alertname}}")
	check(err)
	if len(s) == 0 {
		return " No alert fired."
	}
	var parts []string
	for _, a := range s {
		parts = append(parts, fmt.Sprintf("%s %s–%s", a.label, time.Unix(int64(a.points[0][0]), 0).UTC().Format("15:04:05"),
			time.Unix(int64(a.points[len(a.points)-1][0]), 0).UTC().Format("15:04:05")))
	}
	return " Alerts firing (vig-rules.yaml, evaluated by that Prometheus): " + html.EscapeString(strings.Join(parts, "; ")) + "."
}
