package profile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/vig-edge/vig/platform/bpfprobe"
	"github.com/vig-edge/vig/platform/proc"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{Auto, On, Off} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
		b, _ := m.MarshalText()
		var back Mode
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Errorf("text round trip of %v: %v, %v", m, back, err)
		}
	}
	for _, s := range []string{"", "yes", "ON", "true"} {
		if _, err := ParseMode(s); err == nil {
			t.Errorf("ParseMode(%q) accepted", s)
		}
	}
	var m Mode
	var fs flag.FlagSet
	fs.Var(&m, "ebpf", "")
	if err := fs.Parse([]string{"-ebpf", "off"}); err != nil || m != Off {
		t.Errorf("flag: %v, %v", m, err)
	}
}

// fixedReport is a report with every section filled, for the layout tests.
func fixedReport() *Report {
	r := &Report{
		PID: 4321, Comm: "vig", Start: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Elapsed: 30 * time.Second, EBPFMode: Auto, Threads: 6, ThreadsExited: 1,
		User: 2360 * time.Millisecond, Kernel: 5640 * time.Millisecond,
		OnCPU: 8012345678, RunQueueWait: 412 * time.Millisecond, Timeslices: 91234, HaveSched: true,
		VoluntarySwitches: 60100, InvoluntarySwitches: 1200, MinorFaults: 3500, MajorFaults: 2,
		Perf: &proc.PerfCounts{TaskClock: 8010 * time.Millisecond, ContextSwitches: 61300, CPUMigrations: 800, PageFaults: 3502, Threads: 6},
		EBPF: &bpfprobe.Counts{
			Syscalls: []bpfprobe.Syscall{
				{Nr: 202, Name: "futex", Count: 30000, Total: 9 * time.Second, Max: 40 * time.Millisecond, Blocked: 8 * time.Second},
				{Nr: 1, Name: "write", Count: 12000, Total: 1200 * time.Millisecond, Max: 2 * time.Millisecond, Blocked: 100 * time.Millisecond},
				{Nr: 0, Name: "read", Count: 9000, Total: 700 * time.Millisecond, Max: 900 * time.Microsecond},
			},
			RunQueueCount: 52000, RunQueueTotal: 400 * time.Millisecond, RunQueueMax: 3 * time.Millisecond,
			RunQueueHist: []bpfprobe.Bucket{{Low: 4096, High: 8192, Count: 40000}, {Low: 1 << 20, High: 1 << 21, Count: 12000}},
			OffCPUCount:  60000, OffCPUTotal: 21 * time.Second, Voluntary: 60000, Involuntary: 1200,
			Softirqs: []bpfprobe.Softirq{
				{Vector: 3, Name: "NET_RX", Count: 11000, Time: 900 * time.Millisecond, SystemCount: 12000, SystemTime: time.Second},
				{Vector: 1, Name: "TIMER", Count: 10, Time: 100 * time.Microsecond, SystemCount: 3000, SystemTime: 30 * time.Millisecond},
			},
			PageFaults: 3490, Threads: 7,
		},
	}
	r.CPUTime, r.CPUSource = r.CPU()
	r.SetRequests(10000)
	return r
}

func TestWriteTableGolden(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    *Report
	}{
		{"full", fixedReport()},
		{"proc-only", func() *Report {
			r := fixedReport()
			r.EBPF, r.EBPFError, r.EBPFMode = nil, "disabled (--ebpf off)", Off
			r.Perf, r.PerfError = nil, "perf_event_open denied: permission denied: perf_event_paranoid=3 (security.perf_harden=1)"
			r.CPUTime, r.CPUSource = r.CPU()
			r.SetRequests(0)
			return r
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.r.WriteTable(&buf); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				os.WriteFile(golden, buf.Bytes(), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("table differs from %s (go test -update to accept):\n%s", golden, buf.Bytes())
			}
		})
	}
}

func TestCPUSource(t *testing.T) {
	r := fixedReport()
	for _, tt := range []struct {
		edit   func(r *Report)
		cpu    time.Duration
		source string
	}{
		{func(r *Report) {}, 8010 * time.Millisecond, "perf task-clock"},
		{func(r *Report) { r.Perf.UserOnly = true; r.ThreadsExited = 0 }, 8012345678, "schedstat"},
		{func(r *Report) { r.Perf = nil; r.ThreadsExited = 1 }, 8 * time.Second, "/proc stat ticks"},
		{func(r *Report) { r.HaveSched = false }, 8 * time.Second, "/proc stat ticks"},
	} {
		tt.edit(r)
		if cpu, src := r.CPU(); cpu != tt.cpu || src != tt.source {
			t.Errorf("CPU() = %v from %s, want %v from %s", cpu, src, tt.cpu, tt.source)
		}
	}
}

func TestPerRequest(t *testing.T) {
	r := fixedReport()
	p := r.PerRequest
	if p == nil {
		t.Fatal("no per-request figures")
	}
	// CPU is perf's task-clock, 8.01 s over 10000 requests; the user/kernel
	// split follows the tick ratio 2.36:5.64 and adds up to it.
	if p.CPU != 801000 || p.User+p.Kernel != p.CPU || p.Kernel < p.User*2 {
		t.Errorf("cpu split %+v", p)
	}
	if p.Syscalls != 5.1 || p.ContextSwitches != 6.13 || p.SoftirqTime != 90010*time.Nanosecond {
		t.Errorf("per request %+v", p)
	}
	if p.SyscallOnCPU != (1*time.Second+1100*time.Millisecond+700*time.Millisecond)/10000 {
		t.Errorf("syscall on-CPU per request %v", p.SyscallOnCPU)
	}
	r.SetRequests(0)
	if r.PerRequest != nil {
		t.Error("per-request figures without requests")
	}
}

func TestWriteFileRoundTrip(t *testing.T) {
	r := fixedReport()
	dir := t.TempDir()
	for _, name := range []string{"p.json", "p.json.zst"} {
		path := filepath.Join(dir, name)
		if err := r.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		zstMagic := []byte{0x28, 0xb5, 0x2f, 0xfd}
		if isZst := bytes.HasPrefix(raw, zstMagic); isZst != (filepath.Ext(name) == ".zst") {
			t.Errorf("%s: zstd magic present = %v", name, isZst)
		}
		back, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Errorf("%s: round trip differs:\n%+v\n%+v", name, back, r)
		}
	}
	var m map[string]any
	var buf bytes.Buffer
	r.WriteJSON(&buf)
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["ebpf_mode"] != "auto" || m["kernel_ns"] != float64(5640e6) {
		t.Errorf("JSON keys: %v %v", m["ebpf_mode"], m["kernel_ns"])
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0", 999: "999ns", 1500: "1.50µs", 999700: "1000µs", 12345678: "12.3ms", 30 * time.Second: "30.0s", 1234 * time.Second: "1234s",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%d) = %q, want %q", d, got, want)
		}
	}
}

// burn keeps one goroutine busy with syscalls until stop is closed.
func burn(stop <-chan struct{}) <-chan uint64 {
	done := make(chan uint64, 1)
	go func() {
		var n uint64
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			for range 100 {
				syscall.Getppid()
			}
			n += 100
		}
	}()
	return done
}

func TestRunSelfProcOnly(t *testing.T) {
	stop := make(chan struct{})
	done := burn(stop)
	r, err := Run(context.Background(), Options{PID: os.Getpid(), Duration: 200 * time.Millisecond, EBPF: Off, Requests: 7})
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != os.Getpid() || r.Threads == 0 || r.Elapsed <= 0 || r.EBPF != nil || r.EBPFError == "" || r.Interrupted {
		t.Errorf("report %+v", r)
	}
	if r.HaveSched && r.OnCPU <= 0 {
		t.Errorf("schedstat present but no CPU time while burning: %+v", r)
	}
	if r.Perf == nil && r.PerfError == "" {
		t.Error("neither perf counters nor a reason")
	}
	if r.PerRequest == nil || r.Requests != 7 {
		t.Errorf("per request: %+v", r.PerRequest)
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte("eBPF: not used: disabled")) {
		t.Errorf("table (%v):\n%s", err, buf.Bytes())
	}
}

func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	r, err := Run(ctx, Options{PID: os.Getpid(), Duration: time.Hour, EBPF: Off})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.Elapsed >= time.Hour {
		t.Errorf("interrupted=%v elapsed=%v", r.Interrupted, r.Elapsed)
	}
}

func TestRunErrors(t *testing.T) {
	if _, err := Run(context.Background(), Options{PID: os.Getpid()}); err == nil {
		t.Error("zero duration accepted")
	}
	if _, err := Run(context.Background(), Options{PID: -1, Duration: time.Second}); err == nil {
		t.Error("pid -1 accepted")
	}
	if _, err := Run(context.Background(), Options{PID: 1<<22 - 1, Duration: time.Second}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing process: %v", err)
	}
}

// TestRunSelfEBPF profiles this process with eBPF required. It skips only
// where eBPF cannot run; there, --ebpf on must fail and auto must say why.
func TestRunSelfEBPF(t *testing.T) {
	if err := bpfprobe.Available(); err != nil {
		if _, onErr := Run(context.Background(), Options{PID: os.Getpid(), Duration: time.Millisecond, EBPF: On}); onErr == nil {
			t.Errorf("--ebpf on succeeded although eBPF is unavailable (%v)", err)
		}
		r, autoErr := Run(context.Background(), Options{PID: os.Getpid(), Duration: time.Millisecond, EBPF: Auto})
		if autoErr != nil || r.EBPF != nil || r.EBPFError == "" {
			t.Errorf("auto without eBPF: %v, %+v", autoErr, r)
		}
		t.Skipf("eBPF unavailable on %s: %v", runtime.GOARCH, err)
	}
	stop := make(chan struct{})
	var calls uint64
	r, err := func() (*Report, error) {
		s, err := Start(Options{PID: os.Getpid(), EBPF: On})
		if err != nil {
			return nil, err
		}
		done := burn(stop)
		time.Sleep(100 * time.Millisecond)
		close(stop)
		calls = <-done
		return s.Stop()
	}()
	if err != nil {
		t.Fatal(err)
	}
	if r.EBPF == nil {
		t.Fatalf("no eBPF counts: %s", r.EBPFError)
	}
	s, ok := r.EBPF.Syscall("getppid")
	if !ok || s.Count < calls || s.Count > calls+100 {
		t.Errorf("getppid counted %d, made %d", s.Count, calls)
	}
	r.SetRequests(calls)
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte("getppid")) {
		t.Errorf("table (%v):\n%s", err, buf.Bytes())
	}
	t.Logf("\n%s", buf.Bytes())
}
