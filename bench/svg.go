package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The plots are written by hand: a few hundred lines of SVG are easier to audit
// than a plotting dependency. Every plot is 720×400 with the legend at the right.
const (
	svgW, svgH               = 800, 400
	padL, padR, padT, padB   = 64, 220, 40, 56
	plotW, plotH             = svgW - padL - padR, svgH - padT - padB
	svgFont                  = `font-family="sans-serif" font-size="12"`
	legendX                  = svgW - padR + 16
	legendDY                 = 18
	svgGrid                  = `stroke="#ddd" stroke-width="1"`
	svgAxis                  = `stroke="#333" stroke-width="1"`
	defaultYTicks, maxSeries = 5, 8
)

// palette is colour-blind safe (Okabe–Ito).
var palette = [maxSeries]string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

// Series is one named line or one bar per group.
type Series struct {
	Name string
	X, Y []float64 // Lines: points; Bars: Y per group, X unused
}

// Tick is a labelled position on an axis.
type Tick struct {
	At    float64
	Label string
}

// Plot describes a line plot, a CDF or a bar chart.
type Plot struct {
	Title, XLabel, YLabel string
	// XTicks label the x axis (Lines); empty means evenly spaced numeric ticks.
	XTicks []Tick
	// Groups name the bar groups (Bars).
	Groups []string
	Series []Series
	// YMin and YMax fix the y range when YMax > YMin; otherwise it is fitted.
	YMin, YMax float64
	// HLines and VLines are labelled reference lines (a target, a max_age).
	HLines, VLines []Tick
}

type svgBuf struct{ strings.Builder }

func (b *svgBuf) f(format string, args ...any) { fmt.Fprintf(b, format, args...) }

func (b *svgBuf) text(x, y float64, anchor, s string, extra string) {
	b.f(`<text x="%.1f" y="%.1f" text-anchor="%s" %s%s>%s</text>`+"\n", x, y, anchor, svgFont, extra, html.EscapeString(s))
}

func (b *svgBuf) open(p *Plot) {
	b.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgW, svgH, svgW, svgH)
	b.f(`<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	b.text(svgW/2, 22, "middle", p.Title, ` font-weight="bold"`)
	b.text(padL+plotW/2, svgH-14, "middle", p.XLabel, "")
	b.f(`<text transform="translate(16,%d) rotate(-90)" text-anchor="middle" %s>%s</text>`+"\n", padT+plotH/2, svgFont, html.EscapeString(p.YLabel))
}

func (b *svgBuf) close() { b.WriteString("</svg>\n") }

const svgRef = `stroke="#555" stroke-width="1.5" stroke-dasharray="4 4"`

// refLines draws the plot's reference lines with their labels.
func (b *svgBuf) refLines(p *Plot, x, y func(float64) float64) {
	for _, h := range p.HLines {
		yy := y(h.At)
		b.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" %s/>`+"\n", padL, yy, padL+plotW, yy, svgRef)
		b.text(padL+plotW-4, yy-4, "end", h.Label, ` fill="#555"`)
	}
	if x == nil {
		return
	}
	for _, v := range p.VLines {
		xx := x(v.At)
		if xx < padL || xx > padL+plotW {
			continue
		}
		b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" %s/>`+"\n", xx, padT, xx, padT+plotH, svgRef)
		b.text(xx+4, padT+12, "start", v.Label, ` fill="#555"`)
	}
}

// yRange fits a y range to the data (from 0 when all values are positive) unless
// the plot fixes one.
func (p *Plot) yRange() (lo, hi float64) {
	if p.YMax > p.YMin {
		return p.YMin, p.YMax
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, y := range s.Y {
			if math.IsNaN(y) || math.IsInf(y, 0) {
				continue
			}
			lo, hi = min(lo, y), max(hi, y)
		}
	}
	for _, h := range p.HLines {
		lo, hi = min(lo, h.At), max(hi, h.At)
	}
	if math.IsInf(lo, 1) {
		return 0, 1
	}
	if lo > 0 {
		lo = 0
	}
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / defaultYTicks)
	return math.Floor(lo/step) * step, math.Ceil(hi/step) * step
}

// niceStep rounds a tick step up to 1, 2 or 5 × 10^k.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*e {
			return m * e
		}
	}
	return 10 * e
}

func (b *svgBuf) yAxis(lo, hi float64, y func(float64) float64) {
	step := niceStep((hi - lo) / defaultYTicks)
	for v := lo; v <= hi+step/1e6; v += step {
		yy := y(v)
		b.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" %s/>`+"\n", padL, yy, padL+plotW, yy, svgGrid)
		b.text(padL-6, yy+4, "end", trimFloat(v), "")
	}
	b.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" %s/>`+"\n", padL, padT, padL, padT+plotH, svgAxis)
	b.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" %s/>`+"\n", padL, padT+plotH, padL+plotW, padT+plotH, svgAxis)
}

func (b *svgBuf) legend(series []Series, dash func(i int) string) {
	for i, s := range series {
		y := float64(padT + 8 + i*legendDY)
		b.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="3"%s/>`+"\n", legendX, y, legendX+18, y, palette[i%maxSeries], dash(i))
		b.text(float64(legendX+24), y+4, "start", s.Name, "")
	}
}

func trimFloat(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// Lines renders a line plot (points joined in the order given, with markers). Points
// with a NaN coordinate are left out, breaking the line.
func Lines(p Plot) string {
	var b svgBuf
	b.open(&p)
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, x := range s.X {
			if !math.IsNaN(x) {
				xlo, xhi = min(xlo, x), max(xhi, x)
			}
		}
	}
	for _, t := range p.XTicks {
		xlo, xhi = min(xlo, t.At), max(xhi, t.At)
	}
	for _, t := range p.VLines {
		xlo, xhi = min(xlo, t.At), max(xhi, t.At)
	}
	if math.IsInf(xlo, 1) {
		xlo, xhi = 0, 1
	}
	if xhi <= xlo {
		xhi = xlo + 1
	}
	ylo, yhi := p.yRange()
	x := func(v float64) float64 { return padL + (v-xlo)/(xhi-xlo)*plotW }
	y := func(v float64) float64 { return padT + plotH - (v-ylo)/(yhi-ylo)*plotH }
	b.yAxis(ylo, yhi, y)
	ticks := p.XTicks
	if len(ticks) == 0 {
		step := niceStep((xhi - xlo) / 6)
		for v := math.Ceil(xlo/step) * step; v <= xhi+step/1e6; v += step {
			ticks = append(ticks, Tick{v, trimFloat(v)})
		}
	}
	for _, t := range ticks {
		b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" %s/>`+"\n", x(t.At), padT+plotH, x(t.At), padT+plotH+5, svgAxis)
		b.text(x(t.At), padT+plotH+18, "middle", t.Label, "")
	}
	dash := func(i int) string {
		if i >= maxSeries/2 {
			return ` stroke-dasharray="6 3"`
		}
		return ""
	}
	for i, s := range p.Series {
		col := palette[i%maxSeries]
		var path strings.Builder
		pen := false
		for j := range min(len(s.X), len(s.Y)) {
			if math.IsNaN(s.X[j]) || math.IsNaN(s.Y[j]) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x(s.X[j]), y(clamp(s.Y[j], ylo, yhi)))
			pen = true
		}
		b.f(`<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.TrimSpace(path.String()), col, dash(i))
		if len(s.X) <= 40 {
			for j := range min(len(s.X), len(s.Y)) {
				if !math.IsNaN(s.X[j]) && !math.IsNaN(s.Y[j]) {
					b.f(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(s.X[j]), y(clamp(s.Y[j], ylo, yhi)), col)
				}
			}
		}
	}
	b.refLines(&p, x, y)
	b.legend(p.Series, dash)
	b.close()
	return b.String()
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }

// Bars renders grouped bars: one group per p.Groups entry, one bar per series.
func Bars(p Plot) string {
	var b svgBuf
	b.open(&p)
	ylo, yhi := p.yRange()
	y := func(v float64) float64 { return padT + plotH - (v-ylo)/(yhi-ylo)*plotH }
	b.yAxis(ylo, yhi, y)
	ng := max(len(p.Groups), 1)
	gw := float64(plotW) / float64(ng)
	bw := gw * 0.8 / float64(max(len(p.Series), 1))
	for g, name := range p.Groups {
		gx := padL + float64(g)*gw
		b.text(gx+gw/2, padT+plotH+18, "middle", name, "")
		for i, s := range p.Series {
			if g >= len(s.Y) || math.IsNaN(s.Y[g]) {
				continue
			}
			v := clamp(s.Y[g], ylo, yhi)
			x0 := gx + gw*0.1 + float64(i)*bw
			top, base := y(v), y(max(ylo, 0))
			if top > base {
				top, base = base, top
			}
			b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				x0, top, bw*0.92, base-top, palette[i%maxSeries], html.EscapeString(s.Name), html.EscapeString(name), trimFloat(s.Y[g]))
		}
	}
	b.refLines(&p, nil, y)
	b.legend(p.Series, func(int) string { return "" })
	b.close()
	return b.String()
}

// CDF renders empirical distribution functions: each series' X are its sample
// values (any order); Y is ignored and replaced by the cumulative fraction.
func CDF(p Plot) string {
	q := p
	q.Series = make([]Series, len(p.Series))
	q.YMin, q.YMax = 0, 1
	for i, s := range p.Series {
		xs := append([]float64(nil), s.X...)
		sortFloats(xs)
		// At most 200 points per curve: the quantiles at evenly spaced fractions.
		n := len(xs)
		step := max(n/200, 1)
		var cx, cy []float64
		for j := 0; j < n; j += step {
			cx = append(cx, xs[j])
			cy = append(cy, float64(j+1)/float64(n))
		}
		if n > 0 && cx[len(cx)-1] != xs[n-1] {
			cx, cy = append(cx, xs[n-1]), append(cy, 1)
		}
		q.Series[i] = Series{Name: s.Name, X: cx, Y: cy}
	}
	return Lines(q)
}
