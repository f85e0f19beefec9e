package mockbackend

import (
	"testing"
	"time"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func TestExecTimeDeterministic(t *testing.T) {
	const base = 10 * time.Millisecond
	for frame := range uint64(50) {
		a := ExecTime(7, "detector", frame, base)
		for range 3 {
			if b := ExecTime(7, "detector", frame, base); b != a {
				t.Fatalf("frame %d: %v then %v", frame, a, b)
			}
		}
	}
}

func TestExecTimeDistribution(t *testing.T) {
	const base = 10 * time.Millisecond
	const n = 10000
	lo, hi := time.Duration(float64(base)*minFactor), time.Duration(float64(base)*maxFactor)
	var sum time.Duration
	minSeen, maxSeen := hi, lo
	distinct := map[time.Duration]bool{}
	for frame := range uint64(n) {
		d := ExecTime(1, "cam", frame, base)
		if d < lo || d > hi {
			t.Fatalf("frame %d: %v outside [%v, %v]", frame, d, lo, hi)
		}
		sum += d
		minSeen, maxSeen = min(minSeen, d), max(maxSeen, d)
		distinct[d] = true
	}
	// A uniform factor: mean near 1.1 × base, and the range nearly covered.
	if mean := sum / n; mean < 1090*base/1000 || mean > 1110*base/1000 {
		t.Errorf("mean %v, want ≈ %v", mean, 11*base/10)
	}
	if minSeen > lo+base/100 || maxSeen < hi-base/100 {
		t.Errorf("range seen [%v, %v], want ≈ [%v, %v]", minSeen, maxSeen, lo, hi)
	}
	if len(distinct) < n*99/100 {
		t.Errorf("only %d distinct values in %d frames", len(distinct), n)
	}
}

func TestExecTimeInputsMatter(t *testing.T) {
	const base = time.Second
	ref := ExecTime(1, "a", 1, base)
	for name, d := range map[string]time.Duration{
		"next frame": ExecTime(1, "a", 2, base),
		"stream":     ExecTime(1, "b", 1, base),
		"seed":       ExecTime(2, "a", 1, base),
	} {
		if d == ref {
			t.Errorf("changing the %s left the time at %v", name, d)
		}
	}
	if d := ExecTime(1, "a", 1, 0); d != 0 {
		t.Errorf("base 0: %v", d)
	}
	// Consecutive frames differ (no plateaus from a weak hash).
	for f := range uint64(1000) {
		if ExecTime(3, "x", f, base) == ExecTime(3, "x", f+1, base) {
			t.Fatalf("frames %d and %d take the same time", f, f+1)
		}
	}
}

func TestParseFrameID(t *testing.T) {
	for _, tc := range []struct {
		id     string
		stream string
		frame  uint64
		ok     bool
	}{
		{"detector#42", "detector", 42, true},
		{"a#b#7", "a#b", 7, true},
		{"cam#0", "cam", 0, true},
		{"cam#18446744073709551615", "cam", 1<<64 - 1, true},
		{"cam#18446744073709551616", "", 0, false},
		{"#5", "", 0, false},
		{"cam#", "", 0, false},
		{"cam#-1", "", 0, false},
		{"cam#+1", "", 0, false},
		{"cam# 1", "", 0, false},
		{"cam", "", 0, false},
		{"", "", 0, false},
	} {
		s, f, ok := ParseFrameID(tc.id)
		if s != tc.stream || f != tc.frame || ok != tc.ok {
			t.Errorf("ParseFrameID(%q) = %q, %d, %v; want %q, %d, %v", tc.id, s, f, ok, tc.stream, tc.frame, tc.ok)
		}
		if ok {
			if back := FrameID(s, f); back != tc.id {
				t.Errorf("FrameID(%q, %d) = %q, want %q", s, f, back, tc.id)
			}
		}
	}
}

func FuzzParseFrameID(f *testing.F) {
	for _, s := range []string{"detector#42", "a#b#7", "#", "x#99999999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		defer fuzztest.Bound(t)()
		s, n, ok := ParseFrameID(id)
		if !ok {
			return
		}
		if s == "" {
			t.Fatalf("%q: empty stream accepted", id)
		}
		if back := FrameID(s, n); back != id {
			t.Fatalf("%q parsed as (%q, %d), formats back as %q", id, s, n, back)
		}
	})
}
