package browsertest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// probe is a testing.TB that notes how Chromium ends the test.
type probe struct {
	testing.TB
	fatal, skip string
}

func (p *probe) Helper() {}
func (p *probe) Fatal(args ...any) {
	p.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}
func (p *probe) Skip(args ...any) {
	p.skip = fmt.Sprint(args...)
	runtime.Goexit()
}

func chromiumWith(t *testing.T, ci string) *probe {
	t.Setenv("PATH", t.TempDir()) // no chromium on it
	t.Setenv("CI", ci)
	p := &probe{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Chromium(p)
	}()
	<-done
	return p
}

// TestChromiumMissing: without chromium a test skips, saying how to install
// it, except under CI=true, where it fails.
func TestChromiumMissing(t *testing.T) {
	if p := chromiumWith(t, ""); p.skip == "" || p.fatal != "" || !strings.Contains(p.skip, "apt-get install chromium") {
		t.Errorf("outside CI: skip %q, fatal %q", p.skip, p.fatal)
	}
	if p := chromiumWith(t, "true"); p.fatal == "" || p.skip != "" || !strings.Contains(p.fatal, ".ci/run") {
		t.Errorf("under CI=true: skip %q, fatal %q", p.skip, p.fatal)
	}
}

// TestRowsExpect: a row read from SVG, and the pixels each colour must show
// once the later shapes cover the earlier and the edges are left out.
func TestRowsExpect(t *testing.T) {
	svg := `<g transform="translate(0,40)" data-track="cam0"><rect width="100%" height="10" fill="#fff"/>` +
		`<rect x="10.000%" width="20.000%" y="0" height="10" fill="#aaaaaa"><title>a</title></rect>` +
		`<rect x="20.000%" width="20.000%" y="0" height="10" fill="#bbbbbb"/>` +
		`<rect x="50.000%" width="2" y="0" height="10" fill="#cccccc"/></g>`
	rows := Rows(svg)
	if len(rows) != 1 || rows[0].Label != "cam0" || rows[0].Y != 40 || rows[0].H != 10 || len(rows[0].Shapes) != 3 || rows[0].Shapes[2].W != -2 {
		t.Fatalf("rows %+v", rows)
	}
	exp := Expect(rows[0], 100) // 1 px per %
	// #aaaaaa: x 10..20 (shown), inner x 11..18, y 1..8: 8×8.
	if n := len(exp["#aaaaaa"]); n != 64 {
		t.Errorf("#aaaaaa: %d pixels, want 64", n)
	}
	// #bbbbbb: x 20..40, inner 21..38: 18×8.
	if n := len(exp["#bbbbbb"]); n != 144 {
		t.Errorf("#bbbbbb: %d pixels, want 144", n)
	}
	// 2 px wide: no inner pixel.
	if n := len(exp["#cccccc"]); n != 0 {
		t.Errorf("#cccccc: %d pixels, want 0", n)
	}
}
