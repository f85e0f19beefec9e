package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vig-edge/vig/platform/profile"
)

func TestProfileFlagErrors(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "--pid PID is required"},
		{[]string{"--pid", "0"}, 2, "--pid PID is required"},
		{[]string{"--pid", self, "--ebpf", "maybe"}, 2, `eBPF mode "maybe"`},
		{[]string{"--pid", self, "--duration", "0s"}, 2, "must be positive"},
		{[]string{"--pid", self, "--duration", "soon"}, 2, "invalid value"},
		{[]string{"--pid", self, "extra"}, 2, "unexpected arguments"},
		{[]string{"--pid", self, "--requests", "-1"}, 2, "invalid value"},
		{[]string{"--pid", "4194303", "--duration", "10ms", "--ebpf", "off"}, 1, "process 4194303"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := profileCmd(context.Background(), tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.code, tt.msg)
		}
	}
}

func TestProfileHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := profileCmd(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"Usage: vig profile", "-ebpf", "-json", "-requests", "perf_harden"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestProfileSelfEBPFOff runs `vig profile --ebpf off` on the test process
// itself; it needs no privilege and runs under qemu-aarch64 too.
func TestProfileSelfEBPFOff(t *testing.T) {
	out := filepath.Join(t.TempDir(), "p.json.zst")
	var stdout, stderr bytes.Buffer
	args := []string{"--pid", strconv.Itoa(os.Getpid()), "--duration", "100ms", "--ebpf", "off", "--requests", "10", "-o", out}
	if code := profileCmd(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"vig profile: pid " + strconv.Itoa(os.Getpid()), "CPU (", "context switches, voluntary", "eBPF: not used: disabled"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	r, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != os.Getpid() || r.EBPFMode != profile.Off || r.Requests != 10 || r.PerRequest == nil || r.Threads == 0 || r.EBPF != nil {
		t.Errorf("report %+v", r)
	}

	// --json prints JSON only, as in doctor and topology.
	stdout.Reset()
	args = []string{"--pid", strconv.Itoa(os.Getpid()), "--duration", "10ms", "--ebpf=off", "--json"}
	if code := profileCmd(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var m map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil || m["ebpf_mode"] != "off" {
		t.Errorf("--json: %v %v\n%s", err, m["ebpf_mode"], stdout.String())
	}
}

// TestProfileInterrupted: cancelling the context (SIGINT) ends the window
// early and still prints a report.
func TestProfileInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := profileCmd(ctx, []string{"--pid", strconv.Itoa(os.Getpid()), "--duration", "1h", "--ebpf", "off"}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "(interrupted)") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s", code, stdout.String(), stderr.String())
	}
}
