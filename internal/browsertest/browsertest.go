// Package browsertest loads vig's timeline page in a real browser (Debian's
// headless Chromium) and checks, on the screenshot, that every track the
// page's SVG declares was drawn.
package browsertest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// Chromium returns the browser's path. Without one the test skips, saying
// why, except under CI=true, where it fails: .ci/run installs it.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed: CI must have it (.ci/run: apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium): the timeline is not checked in a browser")
	return ""
}

// Screenshot loads url in headless Chromium, w×h CSS pixels at a device scale
// of 1, and returns the screenshot and its PNG. Chromium starts in some 1 to
// 5 s.
func Screenshot(t testing.TB, url string, w, h int) (image.Image, []byte) {
	t.Helper()
	bin := Chromium(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--no-first-run", "--disable-extensions", "--disable-sync", "--mute-audio",
		"--force-device-scale-factor=1", "--user-data-dir="+filepath.Join(dir, "profile"),
		fmt.Sprintf("--window-size=%d,%d", w, h), "--screenshot="+out, url)
	cmd.Env = append(os.Environ(), "HOME="+dir) // no profile or crash dumps left behind
	start := time.Now()
	msg, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, msg)
	}
	t.Logf("chromium took %v", time.Since(start).Round(time.Millisecond))
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v\n%s", err, msg)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("screenshot is %v, asked %dx%d", b, w, h)
	}
	return img, raw
}

// DOM loads url in headless Chromium, lets the page run for ms of virtual
// time (its timers fire, its fetches complete) and returns the document then.
func DOM(t testing.TB, url string, ms int) string {
	t.Helper()
	bin := Chromium(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-extensions", "--disable-sync", "--mute-audio", "--user-data-dir="+filepath.Join(dir, "profile"),
		fmt.Sprintf("--virtual-time-budget=%d", ms), "--dump-dom", url)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.Bytes())
	}
	return string(out)
}

// Row is one track of the SVG as the page declares it.
type Row struct {
	Label  string
	Y, H   int // CSS px from the SVG's top
	Shapes []Shape
}

// Shape is a rect of a row: X and W in % of the width (W < 0: -W px), Y and
// H in px from the row's top.
type Shape struct {
	X, W float64
	Y, H int
	Fill string
}

var (
	rowRE   = regexp.MustCompile(`(?s)<g transform="translate\(0,(\d+)\)" data-track="([^"]*)"><rect width="100%" height="(\d+)"(.*?)</g>`)
	shapeRE = regexp.MustCompile(`<rect x="([\d.]+)%" width="([\d.]+)(%?)" y="(\d+)" height="(\d+)" fill="(#[0-9a-f]{6})"`)
)

// Rows reads the tracks out of the SVG in body.
func Rows(body string) []Row {
	var rows []Row
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		r := Row{Label: m[2]}
		r.Y, _ = strconv.Atoi(m[1])
		r.H, _ = strconv.Atoi(m[3])
		for _, s := range shapeRE.FindAllStringSubmatch(m[4], -1) {
			var sh Shape
			sh.X, _ = strconv.ParseFloat(s[1], 64)
			sh.W, _ = strconv.ParseFloat(s[2], 64)
			if s[3] == "" {
				sh.W = -sh.W
			}
			sh.Y, _ = strconv.Atoi(s[4])
			sh.H, _ = strconv.Atoi(s[5])
			sh.Fill = s[6]
			r.Shapes = append(r.Shapes, sh)
		}
		rows = append(rows, r)
	}
	return rows
}

// Expect paints r's shapes, in order, on a grid of the row's pixels for a
// page w px wide, and returns, per colour, the pixels that colour must
// show: those inside a shape's area that the shapes above leave visible, a
// pixel in from every edge (where anti-aliasing blends).
func Expect(r Row, w int) map[string][]image.Point {
	own := make([]int, w*r.H)
	for i := range own {
		own[i] = -1
	}
	for i, s := range r.Shapes {
		x0 := int(math.Round(s.X / 100 * float64(w)))
		x1 := x0 - int(s.W)
		if s.W >= 0 {
			x1 = int(math.Round((s.X + s.W) / 100 * float64(w)))
		}
		for y := max(s.Y, 0); y < min(s.Y+s.H, r.H); y++ {
			for x := max(x0, 0); x < min(x1, w); x++ {
				own[y*w+x] = i
			}
		}
	}
	exp := map[string][]image.Point{}
	for y := 1; y < r.H-1; y++ {
		for x := 1; x < w-1; x++ {
			o := own[y*w+x]
			if o < 0 || own[y*w+x-1] != o || own[y*w+x+1] != o || own[(y-1)*w+x] != o || own[(y+1)*w+x] != o {
				continue
			}
			f := r.Shapes[o].Fill
			exp[f] = append(exp[f], image.Point{x, y})
		}
	}
	return exp
}

// RGB parses "#rrggbb".
func RGB(c string) [3]uint8 {
	v, _ := strconv.ParseUint(c[1:], 16, 32)
	return [3]uint8{uint8(v >> 16), uint8(v >> 8), uint8(v)}
}

// Near says whether the pixel at x, y has colour c, give or take rounding.
func Near(img image.Image, x, y int, c [3]uint8) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	d := func(a uint32, b uint8) bool { x := int(a>>8) - int(b); return x >= -6 && x <= 6 }
	return d(r, c[0]) && d(g, c[1]) && d(b, c[2])
}

// Top finds the SVG's top in the screenshot: the first line of pixels most
// of which have the colour of its top rule.
func Top(t testing.TB, img image.Image, rule string) int {
	t.Helper()
	c := RGB(rule)
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		n := 0
		for x := b.Min.X; x < b.Max.X; x++ {
			if Near(img, x, y, c) {
				n++
			}
		}
		if n > b.Dx()*9/10 {
			return y
		}
	}
	t.Fatalf("no line of %s in the screenshot: the timeline's SVG was not drawn", rule)
	return 0
}

// CheckRows checks each row of the screenshot (the SVG's top at top, as wide
// as the screenshot): every colour its shapes declare shows where they put
// it (at least 90% of the pixels Expect lists, for a colour with at least
// 6), and its label column (the first labelPct % of the width, background
// labelBg) carries text. It returns how many pixels it checked per row.
func CheckRows(t testing.TB, img image.Image, rows []Row, top int, labelPct float64, labelBg string) map[string]int {
	t.Helper()
	w := img.Bounds().Dx()
	checked := map[string]int{}
	bg := RGB(labelBg)
	for _, r := range rows {
		y0 := top + r.Y
		if y0+r.H > img.Bounds().Max.Y {
			t.Errorf("track %q (y %d..%d) is below the screenshot", r.Label, y0, y0+r.H)
			continue
		}
		for f, pts := range Expect(r, w) {
			if len(pts) < 6 {
				continue
			}
			c, ok := RGB(f), 0
			for _, p := range pts {
				if Near(img, p.X, y0+p.Y, c) {
					ok++
				}
			}
			checked[r.Label] += len(pts)
			if ok*10 < len(pts)*9 {
				t.Errorf("track %q: %d of the %d pixels its SVG paints %s have that colour", r.Label, ok, len(pts), f)
			}
		}
		text := 0
		for y := y0 + 1; y < y0+r.H-1; y++ { // the first line may be a separator
			for x := 0; x < int(float64(w)*labelPct/100)-2; x++ {
				if !Near(img, x, y, bg) {
					text++
				}
			}
		}
		if text < 10 {
			t.Errorf("track %q: its label is not drawn (%d pixels)", r.Label, text)
		}
	}
	return checked
}

// Get returns the body of a GET of url, failing on any status but 200.
func Get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return string(b)
}
