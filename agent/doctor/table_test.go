package doctor

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func sampleReport(t *testing.T) Report {
	r := Report{Config: "b.yaml", Slots: 1, Findings: Analyze(loadScenario(t, "b.yaml"))}
	r.Checks = []Check{
		{Name: "tcp_nodelay", Status: OK, Detail: "set and read back"},
		{Name: "android", Status: Skipped, Detail: "not Android"},
		{Name: "governor cpu4-6", Status: Warn, Detail: "governor powersave pins cpu4-6 at its lowest frequency"},
	}
	return r
}

func TestWriteTable(t *testing.T) {
	r := sampleReport(t)
	var plain, colored bytes.Buffer
	if err := r.WriteTable(&plain, false); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteTable(&colored, true); err != nil {
		t.Fatal(err)
	}
	out := plain.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"vig doctor: b.yaml (1 slot)", "SEVERITY", "LONG_JOB_BLOCKS_PROTECTED", "STREAM_STARVES", "remedy: min_rate_hz: 0.1 on vlm",
		"formula: R(q) = w(q)", "STATUS", "governor cpu4-6", "warnings: 0 errors, 3 warnings (exit 1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour codes without a terminal")
	}
	if !strings.Contains(colored.String(), yellow+"warning") {
		t.Error("no colour on a terminal")
	}
	for _, l := range strings.Split(out, "\n") {
		if n := len([]rune(l)); n > wrapWidth+20 {
			t.Errorf("line of %d runes: %q", n, l)
		}
	}
	// Columns line up: every finding row starts its code at the same offset.
	header := strings.Split(out, "\n")[2]
	col := strings.Index(header, "CODE")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "warning ") || strings.HasPrefix(l, "info ") {
			if strings.Index(l, strings.Fields(l)[1]) != col {
				t.Errorf("misaligned: %q", l)
			}
		}
	}
}

func TestWriteJSON(t *testing.T) {
	r := sampleReport(t)
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("JSON round trip differs:\n%+v\n%+v", back, r)
	}
	for _, want := range []string{`"severity": "warning"`, `"code": "LONG_JOB_BLOCKS_PROTECTED"`, `"blockers": [`, `"status": "skipped"`, `"r_ms": 208`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
	// A clean report still has a findings array, not null.
	b.Reset()
	if err := (Report{Slots: 2}).WriteJSON(&b); err != nil || !strings.Contains(b.String(), `"findings": []`) {
		t.Errorf("%s %v", b.String(), err)
	}
}

func TestWorst(t *testing.T) {
	tests := []struct {
		r    Report
		want int
	}{
		{Report{}, 0},
		{Report{Findings: []Finding{{Severity: Info}}, Checks: []Check{{Status: Skipped}, {Status: OK}}}, 0},
		{Report{Checks: []Check{{Status: Warn}}}, 1},
		{Report{Findings: []Finding{{Severity: Warning}}, Checks: []Check{{Status: Fail}}}, 2},
		{Report{Findings: []Finding{{Severity: Error}}}, 2},
	}
	for k, tt := range tests {
		if got := tt.r.ExitCode(); got != tt.want {
			t.Errorf("%d: exit %d, want %d", k, got, tt.want)
		}
	}
}

func TestWrap(t *testing.T) {
	lines := wrap(strings.Repeat("word ", 40), 42)
	for _, l := range lines {
		if len(l) > 42 {
			t.Errorf("%q", l)
		}
	}
	if got := wrap("", 50); len(got) != 1 || got[0] != "" {
		t.Errorf("empty: %q", got)
	}
	if got := wrap(strings.Repeat("x", 60), 40); len(got) != 1 {
		t.Errorf("long word split: %q", got)
	}
}
