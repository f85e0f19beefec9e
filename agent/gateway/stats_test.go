package gateway

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRateLimitedLog(t *testing.T) {
	var buf bytes.Buffer
	r := newRateLimitedLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	for i := range 18 { // a backend down for 1.3 s must not print 18 lines
		now = now.Add(72 * time.Millisecond)
		r.Warn("det", "no statistics", "model", "det", "i", i)
	}
	r.Warn("vlm", "no statistics", "model", "vlm")
	now = now.Add(time.Minute)
	r.Warn("det", "no statistics", "model", "det")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3 (first det, first vlm, det after the interval):\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[2], "suppressed=17") || strings.Contains(lines[1], "suppressed") {
		t.Errorf("suppressed count wrong:\n%s", buf.String())
	}
}
