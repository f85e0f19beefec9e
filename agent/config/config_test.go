package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/internal/fuzztest"
)

const scenarioB = `
listen: {grpc: "127.0.0.1:9001", unix: "/tmp/vig.sock", metrics: "127.0.0.1:9090"}
backend: {address: "127.0.0.1:8001", slots: 1}
scheduler: {safety_margin_pct: 100}
models:
  detector_small: {exec_ms: 8}
  vlm: {exec_ms: 200, corun: false}
streams:
  - {name: detector, model: detector_small, class: protected, period_ms: 50, max_age_ms: 50, queue: latest}
  - {name: vlm, model: vlm, class: best_effort, period_ms: 1000, max_age_ms: 2000, min_rate_hz: 0.5}
`

func TestParseScenario(t *testing.T) {
	c, err := Parse("b.yaml", []byte(scenarioB))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Streams[0].Line; got != 9 {
		t.Errorf("detector line = %d, want 9", got)
	}
	if c.Models["vlm"].RunsBeside() || !c.Models["detector_small"].RunsBeside() {
		t.Errorf("corun: vlm %v detector %v", c.Models["vlm"].RunsBeside(), c.Models["detector_small"].RunsBeside())
	}
	if c.Scheduler.SafetyMarginPct != 100 {
		t.Errorf("margin = %d, want 100 (an explicit 'none' must not fall back to the default)", c.Scheduler.SafetyMarginPct)
	}
	if c.Streams[1].Queue != QueueLatest || c.Streams[1].Capacity != 1 || c.Streams[1].FrameIntervalMs != 1000 {
		t.Errorf("stream defaults: %+v", c.Streams[1])
	}
	if c.GRPC.MaxMessageMiB != 64 || c.Backend.Slots != 1 || c.Listen.Unix != "/tmp/vig.sock" {
		t.Errorf("defaults: %+v %+v", c.GRPC, c.Listen)
	}
	if d := c.Streams[0].MaxAge().Milliseconds(); d != 50 {
		t.Errorf("max age %d ms", d)
	}
}

func TestRingBackend(t *testing.T) {
	c, err := Parse("ring.yaml", []byte("backend: {address: \"ring:@npu\", ring: {slot_kib: 4096, slots: 2}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if addr, ok := c.Backend.RingBackend(); !ok || addr != "@npu" || c.Backend.Ring.SlotKiB != 4096 {
		t.Errorf("ring backend %q %v %+v", addr, ok, c.Backend.Ring)
	}
	if _, ok := (Backend{Address: "127.0.0.1:8001"}).RingBackend(); ok {
		t.Error("host:port taken for a ring")
	}
	if c.Backend.Ring.ShareFrames != nil {
		t.Errorf("share_frames unset parsed as %v, want nil (the default: share)", *c.Backend.Ring.ShareFrames)
	}
	c, err = Parse("ring.yaml", []byte("backend: {address: \"ring:@npu\", ring: {share_frames: false}}\n"))
	if err != nil || c.Backend.Ring.ShareFrames == nil || *c.Backend.Ring.ShareFrames {
		t.Errorf("share_frames: false parsed as %v, %v", c.Backend.Ring.ShareFrames, err)
	}
}

func TestParseEmptyUsesDefaults(t *testing.T) {
	for _, empty := range []string{"", "# only a comment\n", "---\n"} {
		if _, err := Parse("empty.yaml", []byte(empty)); err == nil || !strings.Contains(err.Error(), "the config is empty") {
			t.Errorf("%q: %v, want: the config is empty", empty, err)
		}
	}
	c, err := Parse("defaults.yaml", []byte("log: {level: info}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.GRPC != DefaultGRPCAddr || c.Scheduler.SafetyMarginPct != DefaultSafetyMarginPct || c.Listen.Unix != "" {
		t.Errorf("defaults not applied: %+v %+v", c.Listen, c.Scheduler)
	}
	c, err = Parse("off.yaml", []byte("listen: {metrics: \"off\", unix: /tmp/x.sock}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.Metrics != "" || c.Listen.GRPC != DefaultGRPCAddr {
		t.Errorf("off: %+v", c.Listen)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       []string // substrings of the error
	}{
		{"unknown top key", "listen: {grpc: \":1\"}\nbakend: {slots: 2}\n", 2, []string{`unknown key "bakend"`, "backend"}},
		{"unknown nested key", "backend:\n  slots: 1\n  slot: 2\n", 3, []string{"backend.slot", `unknown key "slot"`, "known keys here: address, call_timeout_ms, compression, embedded, ring, seed, slots, stats_interval_ms"}},
		{"unknown stream key", "models: {m: {exec_ms: 1}}\nstreams:\n  - name: a\n    model: m\n    class: high\n    period_ms: 10\n    max_age_ms: 10\n    maxage: 3\n", 8, []string{"streams[0].maxage"}},
		{"unknown model key", "models:\n  m: {exec_ms: 1, exec: 2}\n", 2, []string{"models.m.exec"}},
		{"wrong type", "backend:\n  slots: many\n", 2, []string{"backend.slots", `"many" is not a whole number`, "slots: 1"}},
		{"bad class", "models: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: m, class: besteffort, period_ms: 10, max_age_ms: 10}\n", 3, []string{"streams[0] (a).class", "best_effort"}},
		{"unknown model", "models: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: n, class: high, period_ms: 10, max_age_ms: 10}\n", 3, []string{`unknown model "n"`, "known: m"}},
		{"duplicate stream", "models: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: m, class: high, period_ms: 10, max_age_ms: 10}\n  - {name: a, model: m, class: high, period_ms: 10, max_age_ms: 10}\n", 4, []string{"duplicate stream", "line 3"}},
		{"period zero", "models: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: m, class: high, max_age_ms: 10}\n", 3, []string{"period_ms"}},
		{"max age below exec", "models: {m: {exec_ms: 30}}\nstreams:\n  - {name: a, model: m, class: high, period_ms: 50, max_age_ms: 20}\n", 3, []string{"below the execution time"}},
		{"fifo without bound", "models: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: m, class: high, period_ms: 5, max_age_ms: 5, queue: fifo}\n", 3, []string{"capacity >= 1"}},
		{"min rate on protected", "models: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: m, class: protected, period_ms: 5, max_age_ms: 5, min_rate_hz: 1}\n", 3, []string{"only best_effort"}},
		{"margin below 100", "scheduler: {safety_margin_pct: 90}\n", 1, []string{"outside 100..1000"}},
		{"bad order", "scheduler: {order: edf}\n", 1, []string{"scheduler.order", "laxity, class_first"}},
		{"negative window offset", "models: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: m, class: high, period_ms: 5, max_age_ms: 5, window_offset_ms: -1}\n", 3, []string{"window_offset_ms"}},
		{"window offset on wall clock", "scheduler: {capture_clock: realtime}\nmodels: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: m, class: high, period_ms: 5, max_age_ms: 5, window_offset_ms: 1}\n", 4, []string{"CLOCK_MONOTONIC"}},
		{"no listener", "listen: {grpc: \"off\"}\n", 1, []string{"accept no requests"}},
		{"bad yaml", "listen: [\n", 0, []string{"bad yaml"}},
		{"empty ring address", "backend: {address: \"ring:\"}\n", 1, []string{"ring: needs the runtime's socket"}},
		{"embedded ring", "backend: {address: \"ring:@x\", embedded: true}\n", 1, []string{"speaks gRPC"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.name, []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *config.Error", err)
			}
			if e.Line != tc.line {
				t.Errorf("line = %d, want %d (%v)", e.Line, tc.line, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestWindowOffset(t *testing.T) {
	c, err := Parse("w.yaml", []byte("models: {m: {exec_ms: 1}}\nstreams:\n  - {name: a, model: m, class: high, period_ms: 33, max_age_ms: 66, window_offset_ms: 70}\n  - {name: b, model: m, class: high, period_ms: 33, max_age_ms: 66}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if off, told := c.Streams[0].WindowOffset(); !told || off != 4*time.Millisecond {
		t.Errorf("offset %v told %v, want 70 mod 33 = 4 ms", off, told)
	}
	if _, told := c.Streams[1].WindowOffset(); told {
		t.Error("no window_offset_ms: the grid is learnt")
	}
	if c.Scheduler.Order != "laxity" || c.Scheduler.Pipeline != nil {
		t.Errorf("defaults: order %q pipeline %v", c.Scheduler.Order, c.Scheduler.Pipeline)
	}
}

// The margin is a whole percentage in the file and in the scheduler: every valid
// value reaches the scheduler unchanged (100 = none must not become a default).
func TestMarginRoundTrip(t *testing.T) {
	for _, pct := range []int{100, 101, 110, 150, 1000} {
		c, err := Parse("m.yaml", []byte(fmt.Sprintf("scheduler: {safety_margin_pct: %d}\n", pct)))
		if err != nil {
			t.Fatalf("%d: %v", pct, err)
		}
		m, err := sched.ParseMargin(sched.Margin(c.Scheduler.SafetyMarginPct).String())
		if err != nil || m.Percent() != pct {
			t.Errorf("round trip %d: got %v, %v", pct, m, err)
		}
	}
	for _, bad := range []string{"99", "1001", "-5", "1.1"} {
		if _, err := Parse("m.yaml", []byte("scheduler: {safety_margin_pct: "+bad+"}\n")); err == nil {
			t.Errorf("safety_margin_pct %s accepted", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(scenarioB))
	f.Add([]byte("listen: {grpc: \"off\"}\n"))
	f.Add([]byte("listen: {grpc: \"0.0.0.0:1\", metrics: \"[::1]:2\", tls: {cert_file: c, key_file: k}, allow_uids: [1]}\n"))
	f.Add([]byte("streams: [{name: a}]\nmodels: {a: &x {exec_ms: 1}, b: *x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		defer fuzztest.Bound(t)()
		c, err := Parse("fuzz.yaml", data)
		if err == nil && (c.Backend.Slots < 1 || c.Scheduler.SafetyMarginPct < 100) {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
		if err == nil && !c.Listen.TLS.Enabled() && !c.Listen.Insecure {
			for _, a := range []string{c.Listen.GRPC, c.Listen.Metrics} {
				if a != "" && !Loopback(a) {
					t.Fatalf("accepted %q in plain text without listen.insecure", a)
				}
			}
		}
	})
}

func TestBackendCompression(t *testing.T) {
	for _, tc := range []struct{ yaml, err string }{
		{"backend: {compression: gzip}\n", ""},
		{"backend: {compression: zstd}\n", `"zstd" is not one of none, gzip`},
		{"backend: {address: \"ring:@npu\", compression: gzip}\n", "a ring backend shares memory"},
	} {
		c, err := Parse("c.yaml", []byte(tc.yaml))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.err == "" && c.Backend.Compression != "gzip":
			t.Errorf("%q: compression %q", tc.yaml, c.Backend.Compression)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.err)
		}
	}
	if c, err := Parse("d.yaml", []byte("log: {level: info}\n")); err != nil || c.Backend.Compression != "none" {
		t.Errorf("default compression %q (%v), want none", c.Backend.Compression, err)
	}
}

func TestBackendCallTimeout(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int    // parsed value when err is empty
		err  string // part of the error
	}{
		{"backend: {}\n", DefaultCallTimeoutMs, ""},
		{"backend: {call_timeout_ms: 2500}\n", 2500, ""},
		{"backend: {call_timeout_ms: -1}\n", 0, "backend.call_timeout_ms: -1 must be positive"},
		{"backend: {call_timeout_ms: 100}\nmodels: {vlm: {exec_ms: 200}}\n", 0, "100 ms is not above model vlm's exec_ms (200)"},
		{"backend: {call_timeout_ms: 201}\nmodels: {vlm: {exec_ms: 200}}\n", 201, ""},
	} {
		c, err := Parse("c.yaml", []byte(tc.yaml))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.err == "" && c.Backend.CallTimeoutMs != tc.want:
			t.Errorf("%q: call_timeout_ms %d, want %d", tc.yaml, c.Backend.CallTimeoutMs, tc.want)
		case tc.err == "" && c.Backend.CallTimeout() != time.Duration(tc.want)*time.Millisecond:
			t.Errorf("%q: CallTimeout %v", tc.yaml, c.Backend.CallTimeout())
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.err)
		}
	}
}

// TestErrorsInUserTerms: every problem a newcomer is likely to write names its key
// and line, says what was expected in the config's terms with an example, never a
// Go type, and does not hide the next problem; nothing is coerced silently.
func TestErrorsInUserTerms(t *testing.T) {
	const model = "models: {m: {exec_ms: 5}}\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings, in order of the lines reported
	}{
		{"string with a unit", model + "streams:\n  - {name: a, model: m, class: high, period_ms: \"50ms\", max_age_ms: 50}\n  - {name: b, model: m, class: high, period_ms: 50, max_age_ms: soon}\n",
			[]string{`:3: streams[0].period_ms: "50ms" is not a number of milliseconds; write e.g. period_ms: 50`, `:4: streams[1].max_age_ms: "soon" is not a number of milliseconds`}},
		{"streams as a map", model + "streams:\n  a: {model: m}\n", []string{":2: streams: a mapping is not a list of streams", "- {name: detector"}},
		{"fractional slots", "backend:\n  slots: 2.7\n", []string{":2: backend.slots: 2.7 is not a whole number of jobs"}},
		{"zero slots", "backend:\n  slots: 0\n", []string{":2: backend.slots: 0: the accelerator runs at least 1 job at once; write slots: 1"}},
		{"fractional margin", "scheduler:\n  safety_margin_pct: 1.2\n", []string{":2: scheduler.safety_margin_pct: 1.2 is not a whole percentage; write e.g. safety_margin_pct: 110"}},
		{"margin below 100", "scheduler:\n  safety_margin_pct: 90\n", []string{":2: scheduler.safety_margin_pct: 90 is outside 100..1000"}},
		{"section lines", "log:\n  level: loud\ngrpc:\n  window_mib: -1\nbackend:\n  compression: zstd\n", []string{":2: log.level:", ":4: grpc.window_mib:", ":6: backend.compression:"}},
		{"section as a value", "backend: 5\n", []string{":1: backend: 5 is not a section of keys"}},
		{"bool", "backend: {embedded: yes please}\n", []string{":1: backend.embedded: \"yes please\" is not true or false"}},
		{"batch sizes", "models:\n  m: {exec_ms: 5, batch_exec_ms: {one: 5}}\n", []string{":2: models.m.batch_exec_ms.one: \"one\" is not a batch size: batch_exec_ms maps whole batch sizes to milliseconds"}},
		{"missing class", model + "streams:\n  - {name: a, model: m, period_ms: 50, max_age_ms: 50}\n", []string{":3: streams[0] (a).class: missing: give the stream's class, one of protected"}},
		{"not a mapping", "- a\n- b\n", []string{":1: a config is a mapping of sections"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("vig.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			at := 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error\n%s\nlacks (after byte %d) %q", msg, at, w)
				}
				at += i + len(w)
			}
			for _, goTerm := range []string{"float64", "int64", "[]config", "config.S", "config.B", "config.M", "!!", "unmarshal"} {
				if strings.Contains(msg, goTerm) {
					t.Errorf("error speaks Go (%q):\n%s", goTerm, msg)
				}
			}
		})
	}
	// period_ms: -1 is blamed on period_ms alone, not on frame_interval_ms (absent,
	// it follows the period).
	_, err := Parse("vig.yaml", []byte(model+"streams:\n  - {name: a, model: m, class: high, period_ms: -1, max_age_ms: 50}\n"))
	if err == nil || !strings.Contains(err.Error(), "period_ms") || strings.Contains(err.Error(), "frame_interval_ms") {
		t.Errorf("period_ms: -1 → %v; want period_ms blamed, frame_interval_ms not", err)
	}
}
