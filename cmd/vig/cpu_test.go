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
		name     string
		cfg      string
		allowed  []int
		topoErr  error
		process  []int
		hot      []int // nil with hotOn: no pin
		hotOn    bool
		uclamp   int
		note     string
		errSub   string
		noTopoOK bool
	}{
		{name: "defaults: shared", cfg: "", allowed: all},
		{name: "dedicated unpinned", cfg: "cpu: {hot_path: dedicated}", allowed: all, hotOn: true, uclamp: -1},
		{name: "big core, mid+big process", cfg: "cpu: {hot_path: dedicated, pin: big, process_cpus: 4-7, uclamp_min: 300}",
			allowed: all, process: []int{4, 5, 6, 7}, hot: []int{7}, hotOn: true, uclamp: 300},
		{name: "offline cpu dropped from process_cpus", cfg: "cpu: {hot_path: shared, process_cpus: 0-3}", allowed: all, process: []int{0, 1, 3}, note: "cpu2 offline"},
		{name: "cpuset narrower than the pin", cfg: "cpu: {hot_path: dedicated, pin: mid}", allowed: []int{0, 1, 3, 4},
			hot: []int{4}, hotOn: true, uclamp: -1, note: "cpu5-6 outside vig's mask cpu0-1,3-4"},
		{name: "background cpuset excludes big", cfg: "cpu: {hot_path: dedicated, pin: big}", allowed: []int{0, 1, 3},
			errSub: "none of cpu7 may be used by vig, whose mask is cpu0-1,3 (a cpuset or taskset narrows it"},
		{name: "kind without topology", cfg: "cpu: {hot_path: dedicated, pin: big}", allowed: all, topoErr: errors.New("no sysfs"),
			errSub: "pin big needs the CPU topology: no sysfs"},
		{name: "list without topology", cfg: "cpu: {hot_path: dedicated, pin: \"1\"}", allowed: all, topoErr: errors.New("no sysfs"),
			hot: []int{1}, hotOn: true, uclamp: -1},
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
			if (p.hot != nil) != tt.hotOn {
				t.Fatalf("hot %+v, want on=%v", p.hot, tt.hotOn)
			}
			if p.hot != nil && (!slices.Equal(p.hot.CPUs, tt.hot) || p.hot.UclampMin != tt.uclamp) {
				t.Errorf("hot %+v, want cpus %v clamp %d", *p.hot, tt.hot, tt.uclamp)
			}
			notes := strings.Join(p.notes, "; ")
			if (tt.note == "") != (notes == "") || !strings.Contains(notes, tt.note) {
				t.Errorf("notes %q, want %q", notes, tt.note)
			}
		})
	}
	two := cpu.Topology{CPUs: []cpu.CPU{{ID: 0}, {ID: 1}}, Clusters: cpu.Group([]cpu.CPU{{ID: 0, Capacity: 400}, {ID: 1, Capacity: 1024}})}
	if _, err := planCPU(parseCPU(t, "cpu: {hot_path: dedicated, pin: mid}"), two, nil, []int{0, 1}); err == nil || !strings.Contains(err.Error(), "no mid cluster") {
		t.Errorf("mid on little+big: %v", err)
	}
}

func TestApplyGC(t *testing.T) {
	oldLimit, oldGOGC := debug.SetMemoryLimit(-1), debug.SetGCPercent(100)
	debug.SetGCPercent(oldGOGC)
	env := func(k string) string { return map[string]string{}[k] }
	s := applyGC(parseCPU(t, "").GC, env)
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
	s = applyGC(parseCPU(t, "").GC, func(k string) string { return map[string]string{"GOGC": "77"}[k] })
	if s.gogc != 77 || !strings.Contains(s.from, "gogc: GOGC") {
		t.Errorf("env: %+v", s)
	}
	s.undo()
	debug.SetGCPercent(oldGOGC)
	if debug.SetMemoryLimit(-1) != oldLimit {
		t.Errorf("undo left limit %d, was %d", debug.SetMemoryLimit(-1), oldLimit)
	}
}

// TestApplyCPU applies a full cpu: section to this process: the hot thread is
// pinned (read back with sched_getaffinity, and getcpu on it agrees), GOMAXPROCS
// matches process_cpus, the metrics carry the achieved values, and Close ends the
// hot thread and restores masks, GOMAXPROCS and the collector's settings.
func TestApplyCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("placement: Linux only")
	}
	allowed, err := cpu.ProcessAffinity()
	if err != nil {
		t.Fatal(err)
	}
	c := allowed[len(allowed)-1]
	beforeProcs, beforeLimit := runtime.GOMAXPROCS(0), debug.SetMemoryLimit(-1)
	cfg, err := config.Parse("cpu.yaml", []byte(fmt.Sprintf(
		"cpu: {hot_path: dedicated, pin: \"%d\", process_cpus: \"%s\", uclamp_min: 512, gc: {memory_limit_mib: 256, gogc: 80}}\n", c, cpu.FormatList(allowed))))
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
	if st.HotTID == 0 || !slices.Equal(st.HotCPUs, []int{c}) || !slices.Equal(st.ProcessCPUs, allowed) || st.UclampRequested != 512 ||
		st.MemoryLimitBytes != 256<<20 || st.GOGC != 80 || runtime.GOMAXPROCS(0) != len(allowed) {
		t.Errorf("state %+v, GOMAXPROCS %d", st, runtime.GOMAXPROCS(0))
	}
	var mask []int
	var on int
	ctl.Hot.Do(func() { mask, _ = cpu.ThreadAffinity(); on, _ = cpu.CurrentCPU() })
	if !slices.Equal(mask, []int{c}) || on != c {
		t.Errorf("hot thread runs with mask %v on cpu%d, want cpu%d", mask, on, c)
	}
	// This kernel has no uclamp: the start-up log says so, and the metric shows -1.
	if st.UclampMin == -1 && !strings.Contains(logs.String(), "uclamp_min not in effect") {
		t.Errorf("clamp not in effect and not logged:\n%s", logs.String())
	}
	for _, want := range []string{"cpu: hot thread placed", fmt.Sprintf("tid=%d", st.HotTID), "cpu: process placed", "memory_limit=\"256 MiB\""} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	scrape := scrapeRegistry(t, reg)
	for _, want := range []string{
		fmt.Sprintf(`vig_cpu_hot_thread{cpus="%d",hot_path="dedicated",tid="%d"} 1`, c, st.HotTID),
		fmt.Sprintf("vig_cpu_gomaxprocs %d", len(allowed)),
		fmt.Sprintf("vig_cpu_uclamp_min %d", st.UclampMin),
		"vig_cpu_uclamp_min_requested 512",
		"vig_cpu_hot_sampling_enabled 0",
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if err := ctl.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if !threadEnded(st.HotTID) {
		t.Errorf("hot thread %d still exists after Close (pid %d)", st.HotTID, os.Getpid())
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

// threadEnded waits (bounded) for a thread to leave /proc/self/task: Go ends a
// locked thread after its goroutine exits, asynchronously.
func threadEnded(tid int) bool {
	for range 500 {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); errors.Is(err, os.ErrNotExist) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestServeCPU serves with a cpu: section: the metrics endpoint reports the hot
// thread's id, mask and clamp; vig doctor on the same file reports the placement
// and the clamp; after the drain the hot thread is gone and no goroutine of vig's
// is left.
func TestServeCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("placement: Linux only")
	}
	allowed, err := cpu.ProcessAffinity()
	if err != nil {
		t.Fatal(err)
	}
	c := allowed[0]
	yaml := fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models: {det: {exec_ms: 1}}
streams: [{name: det, model: det, class: protected, period_ms: 50, max_age_ms: 500}]
cpu: {hot_path: dedicated, pin: "%d", uclamp_min: 256}
`, c)
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
	var tid int
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "vig_cpu_hot_thread{") {
			if _, err := fmt.Sscanf(l[strings.Index(l, `tid="`):], `tid="%d"`, &tid); err != nil {
				t.Errorf("%q: %v", l, err)
			}
			if !strings.Contains(l, fmt.Sprintf(`cpus="%d"`, c)) {
				t.Errorf("hot thread mask: %q, want cpu%d", l, c)
			}
		}
	}
	if tid == 0 {
		t.Fatalf("no vig_cpu_hot_thread series:\n%s", body)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
		t.Errorf("exported hot thread %d is not a thread of vig: %v", tid, err)
	}
	if !strings.Contains(string(body), "vig_cpu_uclamp_min_requested 256") {
		t.Error("no vig_cpu_uclamp_min_requested 256")
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
	if pl := checks["cpu placement"]; pl.Status != doctor.OK || !strings.Contains(pl.Detail, fmt.Sprintf("hot thread on cpu%d (read back on trial thread", c)) {
		t.Errorf("doctor cpu placement: %+v", pl)
	}
	if u, ok := checks["cpu uclamp_min"]; !ok || (u.Status == doctor.OK) != strings.Contains(string(body), "vig_cpu_uclamp_min 256") {
		t.Errorf("doctor uclamp_min %+v disagrees with serve's metrics", u)
	}

	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if !threadEnded(tid) {
		t.Errorf("hot thread %d left behind after the drain", tid)
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
