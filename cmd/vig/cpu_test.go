package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/doctor"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/platform/cpu"
)

func parseCPU(t *testing.T, y string) config.CPU {
	t.Helper()
	c, err := config.Parse("cpu.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return c.CPU
}

// TestPlanCPU resolves cpu: sections against the phone fixture (cpu2 offline) and
// the masks a cpuset may impose.
func TestPlanCPU(t *testing.T) {
	phone, err := cpu.ReadTopology(os.DirFS("../../platform/cpu/testdata/phone-arm64"))
	if err != nil {
		t.Fatal(err)
	}
	all := []int{0, 1, 3, 4, 5, 6, 7}
	tests := []struct {
		name    string
		cfg     string
		allowed []int
		topoErr error
		process []int
		note    string
		errSub  string
	}{
		{name: "defaults: shared", cfg: "cpu: {}", allowed: all},
		{name: "offline cpu dropped from process_cpus", cfg: "cpu: {hot_path: shared, process_cpus: 0-3}", allowed: all, process: []int{0, 1, 3}, note: "cpu2 offline"},
		{name: "cpuset narrower than process_cpus", cfg: "cpu: {process_cpus: 4-7}", allowed: []int{0, 1, 3, 4},
			process: []int{4}, note: "cpu5-7 outside vig's mask cpu0-1,3-4"},
		{name: "background cpuset excludes process_cpus", cfg: "cpu: {process_cpus: \"7\"}", allowed: []int{0, 1, 3},
			errSub: "none of cpu7 may be used by vig, whose mask is cpu0-1,3 (a cpuset or taskset narrows it"},
		{name: "list without topology", cfg: "cpu: {process_cpus: \"1\"}", allowed: all, topoErr: errors.New("no sysfs"),
			process: []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := planCPU(parseCPU(t, tt.cfg), phone, tt.topoErr, tt.allowed)
			if tt.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("err %v, want %q", err, tt.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.process, tt.process) {
				t.Errorf("process %v, want %v", p.process, tt.process)
			}
			notes := strings.Join(p.notes, "; ")
			if (tt.note == "") != (notes == "") || !strings.Contains(notes, tt.note) {
				t.Errorf("notes %q, want %q", notes, tt.note)
			}
		})
	}
}

func TestApplyGC(t *testing.T) {
	oldLimit, oldGOGC := debug.SetMemoryLimit(-1), debug.SetGCPercent(100)
	debug.SetGCPercent(oldGOGC)
	env := func(k string) string { return map[string]string{}[k] }
	s := applyGC(parseCPU(t, "cpu: {}").GC, env)
	if s.limit != int64(config.DefaultMemoryLimitMiB)<<20 || s.gogc != config.DefaultGOGC || debug.SetMemoryLimit(-1) != s.limit {
		t.Errorf("defaults: %+v", s)
	}
	s.undo()
	s = applyGC(parseCPU(t, "cpu: {gc: {memory_limit_mib: -1, gogc: 50}}").GC, env)
	if s.limit != math.MaxInt64 || s.gogc != 50 || !strings.Contains(s.from, "config") {
		t.Errorf("config: %+v", s)
	}
	s.undo()
	// The environment's settings stand when the config says nothing.
	debug.SetGCPercent(77)
	s = applyGC(parseCPU(t, "cpu: {}").GC, func(k string) string { return map[string]string{"GOGC": "77"}[k] })
	if s.gogc != 77 || !strings.Contains(s.from, "gogc: GOGC") {
		t.Errorf("env: %+v", s)
	}
	s.undo()
	debug.SetGCPercent(oldGOGC)
	if debug.SetMemoryLimit(-1) != oldLimit {
		t.Errorf("undo left limit %d, was %d", debug.SetMemoryLimit(-1), oldLimit)
	}
}

// TestApplyCPU applies a full cpu: section to this process: GOMAXPROCS matches
// process_cpus, the metrics carry the achieved values, and Close restores the
// mask, GOMAXPROCS and the collector's settings.
func TestApplyCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("placement: Linux only")
	}
	allowed, err := cpu.ProcessAffinity()
	if err != nil {
		t.Fatal(err)
	}
	beforeProcs, beforeLimit := runtime.GOMAXPROCS(0), debug.SetMemoryLimit(-1)
	cfg, err := config.Parse("cpu.yaml", []byte(fmt.Sprintf(
		"cpu: {hot_path: shared, process_cpus: \"%s\", gc: {memory_limit_mib: 256, gogc: 80}}\n", cpu.FormatList(allowed))))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	reg := metrics.New()
	ctl, err := applyCPU(cfg, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	st := ctl.State
	if !slices.Equal(st.ProcessCPUs, allowed) || st.MemoryLimitBytes != 256<<20 || st.GOGC != 80 || runtime.GOMAXPROCS(0) != len(allowed) {
		t.Errorf("state %+v, GOMAXPROCS %d", st, runtime.GOMAXPROCS(0))
	}
	for _, want := range []string{"cpu: process placed", "memory_limit=\"256 MiB\""} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	scrape := scrapeRegistry(t, reg)
	for _, want := range []string{
		fmt.Sprintf(`vig_cpu_process_cpus{cpus="%s"} 1`, cpu.FormatList(allowed)),
		fmt.Sprintf("vig_cpu_gomaxprocs %d", len(allowed)),
		"vig_cpu_gc_percent 80",
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if err := ctl.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) != beforeProcs {
		t.Errorf("GOMAXPROCS %d after Close, was %d", runtime.GOMAXPROCS(0), beforeProcs)
	}
	if debug.SetMemoryLimit(-1) != beforeLimit {
		t.Errorf("memory limit not restored")
	}
}

func scrapeRegistry(t *testing.T, reg *metrics.Registry) string {
	t.Helper()
	rec := &bufResponse{header: http.Header{}}
	req, _ := http.NewRequest("GET", "/metrics", nil)
	reg.Handler().ServeHTTP(rec, req)
	return rec.body.String()
}

type bufResponse struct {
	header http.Header
	body   bytes.Buffer
}

func (b *bufResponse) Header() http.Header         { return b.header }
func (b *bufResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufResponse) WriteHeader(int)             {}

// TestServeCPU serves with a cpu: section: the metrics endpoint reports the
// process mask; vig doctor on the same file reports the same placement; after the
// drain no goroutine of vig's is left.
func TestServeCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("placement: Linux only")
	}
	allowed, err := cpu.ProcessAffinity()
	if err != nil {
		t.Fatal(err)
	}
	list := cpu.FormatList(allowed)
	yaml := fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models: {det: {exec_ms: 1}}
streams: [{name: det, model: det, class: protected, period_ms: 50, max_age_ms: 500}]
cpu: {hot_path: shared, process_cpus: "%s"}
`, list)
	path := filepath.Join(t.TempDir(), "cpu.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(path, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil) }()
	addrs := <-ready
	resp, err := http.Get("http://" + addrs["metrics"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`vig_cpu_process_cpus{cpus="%s"} 1`, list); !strings.Contains(string(body), want) {
		t.Errorf("metrics lack %q:\n%s", want, body)
	}

	var out, errb bytes.Buffer
	doctorMain(context.Background(), []string{"-c", path, "--json"}, &out, &errb, false)
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	checks := map[string]doctor.Check{}
	for _, ch := range r.Checks {
		checks[ch.Name] = ch
	}
	if pl := checks["cpu placement"]; pl.Status != doctor.OK || !strings.Contains(pl.Detail, fmt.Sprintf("process on cpu%s;", list)) {
		t.Errorf("doctor cpu placement: %+v", pl)
	}

	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	// Goroutines of the HTTP client and the runtime wind down asynchronously.
	http.DefaultClient.CloseIdleConnections()
	for i := 0; runtime.NumGoroutine() > goroutines && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after the drain, %d before:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	}
}
