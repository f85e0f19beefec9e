package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/internal/fuzztest"
)

func loadScenario(t *testing.T, name string) *config.Config {
	t.Helper()
	path := filepath.Join("..", "..", "examples", "scenarios", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(name, data)
	if err != nil {
		t.Fatalf("%s does not parse: %v", name, err)
	}
	return c
}

// codes returns the codes of the findings at or above sev, sorted.
func codes(fs []Finding, sev Severity) []string {
	var cs []string
	for _, f := range fs {
		if f.Severity >= sev {
			cs = append(cs, f.Code)
		}
	}
	slices.Sort(cs)
	return cs
}

func find(fs []Finding, code, stream string) (Finding, bool) {
	for _, f := range fs {
		if f.Code == code && (stream == "" || f.Stream == stream) {
			return f, true
		}
	}
	return Finding{}, false
}

func TestScenarios(t *testing.T) {
	tests := []struct {
		file  string
		want  []string // codes of warnings and errors, sorted
		worst Severity
	}{
		{"a.yaml", []string{CodeLongJobBlocks, CodeSensorRateExceeds, CodeStreamStarves}, Warning},
		{"b.yaml", []string{CodeLongJobBlocks, CodeStreamStarves}, Warning},
		{"c.yaml", nil, Info},
		{"overbooked.yaml", []string{CodeHighOverbooked, CodeProtectedUnsched, CodeSensorRateExceeds, CodeStreamStarves}, Error},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			fs := Analyze(loadScenario(t, tt.file))
			for _, f := range fs {
				t.Logf("%s %s %s: %s\n\tformula: %s\n\tremedy: %q", f.Severity, f.Code, f.Stream, f.Message, f.Formula, f.Remedy)
			}
			if got := codes(fs, Warning); !slices.Equal(got, tt.want) {
				t.Errorf("warning+error codes = %v, want %v", got, tt.want)
			}
			r := Report{Findings: fs}
			if r.Worst() != tt.worst || r.ExitCode() != int(tt.worst) {
				t.Errorf("worst = %v (exit %d), want %v", r.Worst(), r.ExitCode(), tt.worst)
			}
		})
	}
}

func TestScenarioNumbers(t *testing.T) {
	a := Analyze(loadScenario(t, "a.yaml"))
	if f, _ := find(a, CodeSensorRateExceeds, ""); f.Severity != Warning || f.Numbers["frame_demand"] != 1.412 ||
		f.Numbers["contract_demand"] != 0.52 || !strings.Contains(f.Message, "141%") || !strings.Contains(f.Message, "supersede") {
		t.Errorf("A sensor rate: %+v", f)
	}
	for _, tt := range []struct {
		file        string
		r, tol, lat float64
		slotsRemedy string
		minRate     string
	}{
		{"a.yaml", 212, 38, 5, "backend.slots: 2", "min_rate_hz: 0.1 on vlm"},
		{"b.yaml", 208, 42, 4, "backend.slots: 2", "min_rate_hz: 0.1 on vlm"},
	} {
		fs := Analyze(loadScenario(t, tt.file))
		f, ok := find(fs, CodeLongJobBlocks, "detector")
		if !ok {
			t.Fatalf("%s: no %s", tt.file, CodeLongJobBlocks)
		}
		if !slices.Equal(f.Blockers, []string{"vlm"}) || f.Numbers["r_ms"] != tt.r || f.Numbers["tolerable_blocking_ms"] != tt.tol {
			t.Errorf("%s: blockers %v, numbers %v", tt.file, f.Blockers, f.Numbers)
		}
		rem := strings.Join(f.Remedy, "\n")
		for _, want := range []string{tt.slotsRemedy, fmt.Sprintf("max_age_ms: %g on detector", tt.r), tt.minRate, fmt.Sprintf("≤ %g detector results late", tt.lat)} {
			if !strings.Contains(rem, want) {
				t.Errorf("%s: remedies lack %q:\n%s", tt.file, want, rem)
			}
		}
		if s, ok := find(fs, CodeStreamStarves, "vlm"); !ok || !strings.Contains(s.Message, "starve") {
			t.Errorf("%s: vlm starvation not reported: %+v", tt.file, s)
		}
	}
	o := Analyze(loadScenario(t, "overbooked.yaml"))
	if f, _ := find(o, CodeProtectedUnsched, ""); f.Numbers["u_protected"] != 1.1 || !strings.Contains(f.Formula, "30/50 + 25/50") {
		t.Errorf("overbooked: %+v", f)
	}
}

// edit returns scenario file with old replaced by new, parsed.
func edit(t *testing.T, file, old, new string) *config.Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "scenarios", file))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %q", file, old)
	}
	c, err := config.Parse(file, []byte(strings.Replace(string(data), old, new, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestVariations(t *testing.T) {
	t.Run("budgeted vlm does not starve, its cost is shown", func(t *testing.T) {
		fs := Analyze(edit(t, "b.yaml", "max_age_ms: 2000, queue: latest}", "max_age_ms: 2000, queue: latest, min_rate_hz: 0.5}"))
		if _, ok := find(fs, CodeStreamStarves, "vlm"); ok {
			t.Error("a budgeted stream is reported as starving")
		}
		f, ok := find(fs, CodeLongJobBlocks, "detector")
		if !ok || f.Severity != Warning || !strings.Contains(strings.Join(f.Remedy, "\n"), "min_rate_hz 0.5: each of its runs makes ≤ 4 detector results late, ≤ 2 of 20 results/s (10%)") {
			t.Errorf("%+v", f)
		}
	})
	t.Run("corun false vlm blocks on two slots", func(t *testing.T) {
		fs := Analyze(edit(t, "c.yaml", "vlm: {exec_ms: 200, corun: true}", "vlm: {exec_ms: 200, corun: false}"))
		f, ok := find(fs, CodeLongJobBlocks, "detector")
		if !ok || !slices.Equal(f.Blockers, []string{"vlm"}) || !strings.Contains(f.Remedy[0], "another slot does not help") {
			t.Errorf("%+v", f)
		}
		if _, ok := find(fs, CodeStreamStarves, "vlm"); !ok {
			t.Error("a vlm that runs alone cannot be admitted either")
		}
	})
	t.Run("a high stream that blocks is an error", func(t *testing.T) {
		fs := Analyze(edit(t, "b.yaml", "depth: {exec_ms: 10}", "depth: {exec_ms: 45}"))
		f, ok := find(fs, CodeLongJobBlocks, "detector")
		if !ok || f.Severity != Error || !slices.Equal(f.Blockers, []string{"depth", "vlm"}) {
			t.Errorf("%+v", f)
		}
	})
	t.Run("slow sensor", func(t *testing.T) {
		fs := Analyze(edit(t, "c.yaml", "period_ms: 50, max_age_ms: 50", "frame_interval_ms: 100, period_ms: 50, max_age_ms: 150"))
		if f, ok := find(fs, CodeFrameSlowerThanPeriod, "detector"); !ok || f.Numbers["max_coverage"] != 0.5 {
			t.Errorf("%+v", f)
		}
	})
}

func TestConfigFindings(t *testing.T) {
	const bad = `models:
  m: {exec_ms: 10}
streams:
  - {name: x, model: nope, class: protected, period_ms: 50, max_age_ms: 50}
  - {name: y, model: m, class: protected, period_ms: 0, max_age_ms: 5}
`
	_, err := config.Parse("bad.yaml", []byte(bad))
	fs := ConfigFindings(err)
	if len(fs) < 3 {
		t.Fatalf("want ≥ 3 findings (unknown model, period 0, max_age < exec), got %+v", fs)
	}
	for _, f := range fs {
		if f.Code != CodeConfigInvalid || f.Severity != Error || f.Line == 0 || !strings.HasPrefix(f.Message, fmt.Sprintf("bad.yaml:%d:", f.Line)) {
			t.Errorf("%+v", f)
		}
	}
	if ConfigFindings(nil) != nil {
		t.Error("no error, no findings")
	}
	_, err = config.Parse("syntax.yaml", []byte("streams: [\n"))
	if fs := ConfigFindings(err); len(fs) != 1 || fs[0].Code != CodeConfigInvalid {
		t.Errorf("syntax error: %+v", fs)
	}
}

func FuzzAnalyze(f *testing.F) {
	for _, n := range []string{"a.yaml", "b.yaml", "c.yaml", "d.yaml", "overbooked.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", "scenarios", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("backend: {slots: 3}\nmodels: {m: {exec_ms: 1e300}}\nstreams: [{name: x, model: m, class: protected, period_ms: 1e-9, max_age_ms: 1e301}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		defer fuzztest.Bound(t)()
		c, err := config.Parse("fuzz.yaml", data)
		if err != nil {
			for _, fd := range ConfigFindings(err) {
				if fd.Code != CodeConfigInvalid || fd.Message == "" {
					t.Fatalf("bad config finding %+v", fd)
				}
			}
			return
		}
		fs := Analyze(c)
		if _, ok := find(fs, CodeUtilization, ""); !ok {
			t.Fatal("utilization missing")
		}
		for k, fd := range fs {
			if fd.Code == "" || fd.Message == "" || fd.Severity < Info || fd.Severity > Error {
				t.Fatalf("malformed finding %+v", fd)
			}
			if k > 0 && fs[k-1].Severity < fd.Severity {
				t.Fatal("findings not sorted worst first")
			}
		}
	})
}

// TestProtectedGuarantee: under the laxity order a protected stream is kept by
// admission, not run first; doctor states the bound with its formula.
func TestProtectedGuarantee(t *testing.T) {
	fs := Analyze(loadScenario(t, "b.yaml"))
	f, ok := find(fs, CodeProtectedGuarantee, "detector")
	if !ok || f.Severity != Info {
		t.Fatalf("no PROTECTED_GUARANTEE info for detector: %+v", fs)
	}
	if f.Numbers["r0_ms"] != 8 || f.Numbers["latest_capture_phase_ms"] != 42 || !strings.Contains(f.Formula, "min(max_age_i, period_i − φ_i)") {
		t.Errorf("%+v", f)
	}
	if _, ok := find(fs, CodeProtectedGuarantee, "pose"); ok {
		t.Error("a guarantee for a high stream")
	}
	// Overbooked protected work has no guarantee, only the error saying why.
	if _, ok := find(Analyze(loadScenario(t, "overbooked.yaml")), CodeProtectedGuarantee, ""); ok {
		t.Error("a guarantee for an overbooked protected workload")
	}
}
