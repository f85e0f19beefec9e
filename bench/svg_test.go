package bench

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

// wellFormed parses s as XML and counts elements by name.
func wellFormed(t *testing.T, s string) map[string]int {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	n := map[string]int{}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, s)
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
	if n["svg"] != 1 {
		t.Fatalf("want one <svg>, got %d", n["svg"])
	}
	return n
}

func TestSVGPlots(t *testing.T) {
	lines := Lines(Plot{Title: "added <latency> & co", XLabel: "payload", YLabel: "ms",
		XTicks: []Tick{{0, "0 B"}, {1, "150 KB"}, {2, "1.2 MB"}},
		Series: []Series{{Name: "tcp", X: []float64{0, 1, 2}, Y: []float64{0.3, 0.5, math.NaN()}}, {Name: "nginx", X: []float64{0, 1, 2}, Y: []float64{0.4, 0.6, 2}}}})
	n := wellFormed(t, lines)
	if n["path"] != 2 || n["circle"] != 5 {
		t.Errorf("lines: %d paths, %d markers; want 2 and 5 (the NaN point left out)", n["path"], n["circle"])
	}
	bars := Bars(Plot{Title: "coverage", YLabel: "%", Groups: []string{"detector", "pose"}, YMin: 0, YMax: 100, HLines: []Tick{{99, "target"}},
		Series: []Series{{Name: "direct", Y: []float64{50, 60}}, {Name: "vig", Y: []float64{99, 100}}}})
	if n := wellFormed(t, bars); n["rect"] != 1+4 || !strings.Contains(bars, ">target<") {
		t.Errorf("bars: %d rects, want background + 4, and the target line", n["rect"])
	}
	cdf := CDF(Plot{Title: "AoI", Series: []Series{{Name: "a", X: []float64{3, 1, 2}}}, VLines: []Tick{{50, "max_age"}}})
	if n := wellFormed(t, cdf); n["circle"] != 3 || !strings.Contains(cdf, ">max_age<") {
		t.Errorf("cdf: %d markers, want 3, and the max_age line", n["circle"])
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0.07, 0.1}, {0.3, 0.5}, {1, 1}, {1.5, 2}, {7, 10}, {0, 1}} {
		if got := niceStep(tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("niceStep(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
