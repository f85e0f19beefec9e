package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/doctor"
)

func scenario(name string) string { return filepath.Join("..", "..", "examples", "scenarios", name) }

func TestDoctorScenarios(t *testing.T) {
	tests := []struct {
		file  string
		exit  int
		codes []string // must be present
	}{
		{"a.yaml", 1, []string{doctor.CodeSensorRateExceeds, doctor.CodeLongJobBlocks}},
		{"b.yaml", 1, []string{doctor.CodeLongJobBlocks, doctor.CodeStreamStarves}},
		{"c.yaml", 0, []string{doctor.CodeUtilization}},
		{"overbooked.yaml", 2, []string{doctor.CodeProtectedUnsched}},
		{"d.yaml", 1, []string{doctor.CodeLongJobBlocksHigh, doctor.CodeUtilization}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var table, js, errb bytes.Buffer
			if got := doctorMain(context.Background(), []string{"-c", scenario(tt.file), "--no-device"}, &table, &errb, false); got != tt.exit {
				t.Errorf("exit %d, want %d; stderr %s", got, tt.exit, errb.String())
			}
			if got := doctorMain(context.Background(), []string{"--json", "--no-device", "-c", scenario(tt.file)}, &js, &errb, false); got != tt.exit {
				t.Errorf("--json: exit %d, want %d", got, tt.exit)
			}
			var r doctor.Report
			if err := json.Unmarshal(js.Bytes(), &r); err != nil {
				t.Fatalf("--json output: %v\n%s", err, js.String())
			}
			for _, c := range tt.codes {
				if !r.Has(c) || !strings.Contains(table.String(), c) {
					t.Errorf("%s missing from table or JSON", c)
				}
			}
			if len(r.Checks) != 0 || r.Config != scenario(tt.file) {
				t.Errorf("--no-device ran checks or lost the file name: %+v", r)
			}
			if strings.Contains(table.String(), "\x1b[") {
				t.Error("colour without a terminal")
			}
		})
	}
}

func TestDoctorDevice(t *testing.T) {
	var out, errb bytes.Buffer
	code := doctorMain(context.Background(), []string{"-c", scenario("c.yaml"), "-json"}, &out, &errb, false)
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err, errb.String())
	}
	if len(r.Checks) == 0 || code != r.ExitCode() {
		t.Errorf("exit %d, report says %d, %d checks", code, r.ExitCode(), len(r.Checks))
	}
	for _, c := range r.Checks {
		if c.Detail == "" {
			t.Errorf("check %q without detail", c.Name)
		}
	}
}

func TestDoctorUsage(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("streams:\n  - {name: x, model: nope, class: protected, period_ms: 50, max_age_ms: 50, colour: red}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		exit   int
		stdout string
		stderr string
	}{
		{[]string{"--help"}, 0, "Usage: vig doctor -c FILE", ""},
		{nil, 2, "", "-c FILE is required"},
		{[]string{"-c", scenario("c.yaml"), "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"--bogus"}, 2, "", "flag provided but not defined"},
		{[]string{"-c", filepath.Join(dir, "missing.yaml")}, 2, "", "no such file"},
		{[]string{"-c", bad, "--no-device"}, 2, "CONFIG_INVALID", ""},
		{[]string{"-c", bad, "--no-device"}, 2, "bad.yaml:2: streams[0].colour: unknown key", ""},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		if got := doctorMain(context.Background(), tt.args, &out, &errb, false); got != tt.exit {
			t.Errorf("%q: exit %d, want %d", tt.args, got, tt.exit)
		}
		if !strings.Contains(out.String(), tt.stdout) || !strings.Contains(errb.String(), tt.stderr) {
			t.Errorf("%q:\nstdout %s\nstderr %s", tt.args, out.String(), errb.String())
		}
	}
}

func TestDoctorColour(t *testing.T) {
	var out, errb bytes.Buffer
	t.Setenv("NO_COLOR", "")
	t.Setenv("TERM", "xterm")
	doctorMain(context.Background(), []string{"-c", scenario("b.yaml"), "--no-device"}, &out, &errb, true)
	if !strings.Contains(out.String(), "\x1b[33m") {
		t.Error("no colour on a terminal")
	}
	if isTerminal(os.NewFile(^uintptr(0), "bad")) {
		t.Error("an invalid fd is not a terminal")
	}
}

// --device keeps remedies within a named device: more DLA cores than an
// Orin has is an error, and never a remedy.
func TestDoctorDeviceProfile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "dla3.yaml")
	if err := os.WriteFile(cfg, []byte(`accelerators: {gpu: 1, dla: 3}
models:
  det: {exec_ms: 30, on: dla}
streams:
  - {name: a, model: det, class: protected, period_ms: 33, max_age_ms: 66}
  - {name: b, model: det, class: protected, period_ms: 33, max_age_ms: 66}
  - {name: c, model: det, class: protected, period_ms: 33, max_age_ms: 66}
  - {name: d, model: det, class: protected, period_ms: 33, max_age_ms: 66}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := doctorMain(context.Background(), []string{"-c", cfg, "--no-device", "--device", "orin", "--json"}, &out, &errb, false); code != 2 {
		t.Fatalf("exit %d; stderr %s", code, errb.String())
	}
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Has(doctor.CodeBeyondDevice) || r.Device == nil || r.Device.DLACores != 2 {
		t.Fatalf("report %+v", r)
	}
	for _, f := range r.Findings {
		for _, rem := range f.Remedy {
			if strings.Contains(rem, "accelerators: {dla: 4}") && !strings.Contains(rem, "not accelerators: {dla: 4}") {
				t.Errorf("%s remedy asks for 4 DLA cores on an Orin: %q", f.Code, rem)
			}
		}
	}
	errb.Reset()
	if code := doctorMain(context.Background(), []string{"-c", cfg, "--device", "orion"}, &out, &errb, false); code != 2 || !strings.Contains(errb.String(), "give one of orin, orin-nano") {
		t.Errorf("unknown device: exit %d, %q", code, errb.String())
	}
}
