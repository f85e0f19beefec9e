package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// worstCases are the inputs that made Parse slow or its error huge before it was
// bounded, each near the largest file Parse accepts.
func worstCases() map[string]string {
	cross := func(models, streams int) string {
		var b strings.Builder
		b.WriteString("models:\n")
		for i := range models {
			fmt.Fprintf(&b, "  m%d: {exec_ms: 1}\n", i)
		}
		b.WriteString("streams:\n")
		for i := range streams {
			fmt.Fprintf(&b, "  - {name: s%d, model: x}\n", i)
		}
		return b.String()
	}
	aliased := "models:\n  e: &e {exec_ms: 1}\nstreams:\n  - &s {name: a, model: e}\n" + strings.Repeat("  - *s\n", 140_000)
	return map[string]string{
		// Each stream's "unknown model" error listed every model: streams × models.
		"models x streams": cross(3000, 3000),
		// The same within the count limits: the error is still bounded.
		"models x streams, at the limits": cross(MaxModels, MaxStreams),
		// Four bytes a stream.
		"aliased streams": aliased,
		// 150,000 unknown keys, one error each.
		"unknown keys": "listen: {" + strings.Repeat("a: 1, ", 150_000) + "}\n",
		// A megabyte echoed in an error.
		"long value": "log: {format: " + strings.Repeat("x", MaxBytes-100) + "}\n",
		"deep flow":  "streams: " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000),
	}
}

// TestParseBounded: every worst case is refused with a short error that says what to
// fix. Before the limits, "models x streams" (148 KB) took a second and produced a 60 MB
// error, and its 1 MB form about a minute; "unknown keys" gave a 19 MB error.
func TestParseBounded(t *testing.T) {
	const maxErrLen = 8 << 10
	for name, in := range worstCases() {
		if len(in) > MaxBytes {
			t.Fatalf("%s: %d bytes, over MaxBytes: the case tests the size limit only", name, len(in))
		}
		_, err := Parse("w.yaml", []byte(in))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if n := len(err.Error()); n > maxErrLen {
			t.Errorf("%s: error of %d bytes (bound %d): %.200s", name, n, maxErrLen, err)
		}
		var e *Error
		if !errors.As(err, &e) || e.Msg == "" {
			t.Errorf("%s: %v is not a located config error", name, err)
		}
	}
}

func TestParseLimits(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"size", "# " + strings.Repeat("x", MaxBytes), "a config is at most 1048576"},
		{"streams", "streams:\n" + strings.Repeat("  - {name: a}\n", MaxStreams+1), "streams: 257 entries: vig takes at most 256"},
		{"models", "models: {" + func() string {
			var b strings.Builder
			for i := range MaxModels + 1 {
				fmt.Fprintf(&b, "m%d: {exec_ms: 1}, ", i)
			}
			return b.String()
		}() + "}\n", "models: 257 entries"},
		{"accelerators", "accelerators: {" + func() string {
			var b strings.Builder
			for i := range MaxAccelerators + 1 {
				fmt.Fprintf(&b, "x%d: 1, ", i)
			}
			return b.String()
		}() + "}\n", "accelerators: 17 entries: vig takes at most 16"},
		{"slots", "backend: {slots: 100000000}\n", "an accelerator runs 1 to 256 jobs"},
		{"errors counted", "listen: {" + strings.Repeat("a: 1, ", 30) + "}\n", "more problems not shown (at least 10)"},
		{"value cut", "log: {format: " + strings.Repeat("y", 500) + "}\n", "… (500 bytes)"},
	} {
		_, err := Parse("l.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %.300v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	// At the limits a config is still accepted.
	var b strings.Builder
	b.WriteString("models: {m: {exec_ms: 1}}\nstreams:\n")
	for i := range MaxStreams {
		fmt.Fprintf(&b, "  - {name: s%d, model: m, class: high, period_ms: 100, max_age_ms: 100}\n", i)
	}
	if _, err := Parse("ok.yaml", []byte(b.String())); err != nil {
		t.Errorf("%d streams refused: %.300v", MaxStreams, err)
	}
}

// BenchmarkParseWorst: the cost of the worst inputs found, beside a real config.
func BenchmarkParseWorst(b *testing.B) {
	cases := worstCases()
	cases["scenario B (a real config)"] = scenarioB
	for name, in := range cases {
		data := []byte(in)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				Parse("w.yaml", data)
			}
		})
	}
}
