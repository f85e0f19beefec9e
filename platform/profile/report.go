package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/vig-edge/vig/platform/bpfprobe"
	"github.com/vig-edge/vig/platform/proc"
)

// Report is a finished profile. Durations are nanoseconds in JSON.
type Report struct {
	PID         int           `json:"pid"`
	Comm        string        `json:"comm"`
	Start       time.Time     `json:"start"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	Interrupted bool          `json:"interrupted,omitempty"`
	EBPFMode    Mode          `json:"ebpf_mode"`

	Threads       int `json:"threads"`
	ThreadsExited int `json:"threads_exited,omitempty"`

	// From /proc/<pid>/stat: USER_HZ (10 ms) resolution.
	User   time.Duration `json:"user_ns"`
	Kernel time.Duration `json:"kernel_ns"`
	// From schedstat: nanosecond resolution, threads alive at the end.
	OnCPU        time.Duration `json:"oncpu_ns,omitempty"`
	RunQueueWait time.Duration `json:"runqueue_wait_ns,omitempty"`
	Timeslices   uint64        `json:"timeslices,omitempty"`
	HaveSched    bool          `json:"schedstat"`
	// CPUTime is the report's best CPU figure, CPUSource where it comes
	// from (see CPU).
	CPUTime   time.Duration `json:"cpu_ns"`
	CPUSource string        `json:"cpu_source"`

	VoluntarySwitches   uint64 `json:"ctxt_switches_voluntary"`
	InvoluntarySwitches uint64 `json:"ctxt_switches_involuntary"`
	MinorFaults         uint64 `json:"faults_minor"`
	MajorFaults         uint64 `json:"faults_major"`

	Perf      *proc.PerfCounts `json:"perf,omitempty"`
	PerfError string           `json:"perf_error,omitempty"`

	EBPF      *bpfprobe.Counts `json:"ebpf,omitempty"`
	EBPFError string           `json:"ebpf_error,omitempty"`

	Requests   uint64      `json:"requests,omitempty"`
	PerRequest *PerRequest `json:"per_request,omitempty"`
}

// PerRequest divides the window's costs by the number of requests.
type PerRequest struct {
	CPU             time.Duration `json:"cpu_ns"`
	User            time.Duration `json:"user_ns"`
	Kernel          time.Duration `json:"kernel_ns"`
	ContextSwitches float64       `json:"ctxt_switches"`
	Faults          float64       `json:"faults"`
	RunQueueWait    time.Duration `json:"runqueue_wait_ns"`
	// With eBPF:
	Syscalls     float64       `json:"syscalls,omitempty"`
	SyscallOnCPU time.Duration `json:"syscall_oncpu_ns,omitempty"`
	SoftirqTime  time.Duration `json:"softirq_ns,omitempty"`
}

func newReport(opts Options, before, after *proc.Sample) *Report {
	u := proc.Delta(before, after)
	return &Report{
		PID:                 opts.PID,
		Comm:                after.Process.Comm,
		Start:               before.Taken,
		Elapsed:             u.Elapsed,
		EBPFMode:            opts.EBPF,
		Threads:             u.Threads,
		ThreadsExited:       u.ThreadsExited,
		User:                u.User,
		Kernel:              u.System,
		OnCPU:               u.OnCPU,
		RunQueueWait:        u.RunQueueWait,
		Timeslices:          u.Timeslices,
		HaveSched:           u.HaveSched,
		VoluntarySwitches:   u.Voluntary,
		InvoluntarySwitches: u.Involuntary,
		MinorFaults:         u.MinFlt,
		MajorFaults:         u.MajFlt,
	}
}

// CPU is the best measure of the CPU time used in the window, and where
// it comes from: perf's task-clock when it was counted (nanoseconds, and
// threads that exit are kept through inheritance), else schedstat's
// nanoseconds when no thread exited (an exited thread takes its
// schedstat with it), else the user+kernel ticks of /proc/<pid>/stat.
func (r *Report) CPU() (time.Duration, string) {
	switch {
	case r.Perf != nil && !r.Perf.UserOnly && r.Perf.TaskClock > 0:
		return r.Perf.TaskClock, "perf task-clock"
	case r.HaveSched && r.ThreadsExited == 0 && r.OnCPU > 0:
		return r.OnCPU, "schedstat"
	}
	return r.User + r.Kernel, "/proc stat ticks"
}

// split returns user and kernel time scaled so they add up to CPU(): the
// tick counts give the ratio, schedstat the total.
func (r *Report) split() (user, kernel time.Duration) {
	ticks := r.User + r.Kernel
	cpu, _ := r.CPU()
	if ticks == 0 {
		return 0, 0
	}
	kernel = time.Duration(float64(cpu) * float64(r.Kernel) / float64(ticks))
	return cpu - kernel, kernel
}

// softirqTime is the softirq time seen in the target's context.
func (r *Report) softirqTime() time.Duration {
	if r.EBPF == nil {
		return 0
	}
	var t time.Duration
	for _, s := range r.EBPF.Softirqs {
		t += s.Time
	}
	return t
}

// SetRequests sets the request count of the window and recomputes the
// per-request figures (none for 0).
func (r *Report) SetRequests(n uint64) {
	r.Requests = n
	r.PerRequest = nil
	if n == 0 {
		return
	}
	d := func(v time.Duration) time.Duration { return v / time.Duration(n) }
	f := func(v uint64) float64 { return float64(v) / float64(n) }
	user, kernel := r.split()
	cpu, _ := r.CPU()
	p := &PerRequest{
		CPU:             d(cpu),
		User:            d(user),
		Kernel:          d(kernel),
		ContextSwitches: f(r.VoluntarySwitches + r.InvoluntarySwitches),
		Faults:          f(r.MinorFaults + r.MajorFaults),
		RunQueueWait:    d(r.RunQueueWait),
	}
	if r.EBPF != nil {
		count, total, blocked := r.EBPF.SyscallTotals()
		p.Syscalls = f(count)
		p.SyscallOnCPU = d(total - blocked)
		p.SoftirqTime = d(r.softirqTime())
	}
	r.PerRequest = p
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteFile writes the JSON report to path, compressed with zstd when the
// name ends in ".zst".
func (r *Report) WriteFile(path string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if !strings.HasSuffix(path, ".zst") {
		return r.WriteJSON(f)
	}
	zw, err := zstd.NewWriter(f)
	if err != nil {
		return err
	}
	if err := r.WriteJSON(zw); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}

// ReadFile reads a report written by WriteFile (zstd or plain JSON).
func ReadFile(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var src io.Reader = f
	if strings.HasSuffix(path, ".zst") {
		zr, err := zstd.NewReader(f)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		src = zr
	}
	var r Report
	if err := json.NewDecoder(src).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *Mode) UnmarshalText(b []byte) error { return m.Set(string(b)) }

// WriteTable writes the report for people: aligned columns, the kernel
// time broken down, per-request figures when the request count is known.
func (r *Report) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "vig profile: pid %d (%s), %s", r.PID, r.Comm, fmtDur(r.Elapsed))
	if r.Interrupted {
		fmt.Fprint(ew, " (interrupted)")
	}
	fmt.Fprintf(ew, ", %d threads", r.Threads)
	if r.ThreadsExited > 0 {
		fmt.Fprintf(ew, " (%d exited during the window, their schedstat lost)", r.ThreadsExited)
	}
	fmt.Fprintln(ew)
	if r.Requests > 0 {
		fmt.Fprintf(ew, "requests: %d (%.1f/s)\n", r.Requests, float64(r.Requests)/r.Elapsed.Seconds())
	}

	per := func(v time.Duration) string {
		if r.Requests == 0 {
			return ""
		}
		return fmtDur(v / time.Duration(r.Requests))
	}
	perN := func(v uint64) string {
		if r.Requests == 0 {
			return ""
		}
		return fmt.Sprintf("%.2f", float64(v)/float64(r.Requests))
	}
	cpu, cpuSource := r.CPU()
	pct := func(v time.Duration) string {
		if cpu <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(v)/float64(cpu))
	}
	user, kernel := r.split()
	t := table{{"time", "total", "of CPU", "per request"}}
	t.add("CPU ("+cpuSource+")", fmtDur(cpu), pct(cpu), per(cpu))
	t.add("  user", fmtDur(user), pct(user), per(user))
	t.add("  kernel", fmtDur(kernel), pct(kernel), per(kernel))
	if e := r.EBPF; e != nil {
		_, total, blocked := e.SyscallTotals()
		sys := total - blocked
		sirq := r.softirqTime()
		other := max(kernel-sys-sirq, 0)
		t.add("    syscalls, on CPU", fmtDur(sys), pct(sys), per(sys))
		t.add("    softirq in its context", fmtDur(sirq), pct(sirq), per(sirq))
		t.add("    other (faults, irqs, rest)", fmtDur(other), pct(other), per(other))
		t.add("syscalls, blocked (not CPU)", fmtDur(blocked), "", per(blocked))
	}
	if r.HaveSched {
		t.add("run-queue wait (not CPU)", fmtDur(r.RunQueueWait), "", per(r.RunQueueWait))
	}
	t.add()
	t.add("events", "count", "", "per request")
	t.add("context switches, voluntary", fmt.Sprint(r.VoluntarySwitches), "", perN(r.VoluntarySwitches))
	t.add("context switches, involuntary", fmt.Sprint(r.InvoluntarySwitches), "", perN(r.InvoluntarySwitches))
	t.add("page faults, minor", fmt.Sprint(r.MinorFaults), "", perN(r.MinorFaults))
	t.add("page faults, major", fmt.Sprint(r.MajorFaults), "", perN(r.MajorFaults))
	if r.HaveSched {
		t.add("timeslices", fmt.Sprint(r.Timeslices), "", perN(r.Timeslices))
	}
	if e := r.EBPF; e != nil {
		count, _, _ := e.SyscallTotals()
		t.add("syscalls", fmt.Sprint(count), "", perN(count))
	}
	fmt.Fprintln(ew)
	t.write(ew)
	if r.User+r.Kernel < time.Second {
		fmt.Fprintln(ew, "(user/kernel split from 10 ms USER_HZ ticks: coarse below a second of CPU)")
	}

	fmt.Fprintln(ew)
	switch {
	case r.Perf != nil:
		p := r.Perf
		mode := ""
		if p.UserOnly {
			mode = ", user mode only"
		}
		fmt.Fprintf(ew, "perf counters (%d threads%s): task-clock %s, context-switches %d, cpu-migrations %d, page-faults %d\n",
			p.Threads, mode, fmtDur(p.TaskClock), p.ContextSwitches, p.CPUMigrations, p.PageFaults)
	case r.PerfError != "":
		fmt.Fprintf(ew, "perf counters: not available: %s\n", r.PerfError)
	}

	if r.EBPF == nil {
		fmt.Fprintf(ew, "eBPF: not used: %s\n", r.EBPFError)
		return ew.err
	}
	e := r.EBPF
	fmt.Fprintln(ew)
	t = table{{"syscall", "count", "total", "on CPU", "blocked", "max", "per request"}}
	for _, s := range e.Syscalls {
		t.add(s.Name, fmt.Sprint(s.Count), fmtDur(s.Total), fmtDur(s.OnCPU()), fmtDur(s.Blocked), fmtDur(s.Max), perN(s.Count))
	}
	t.write(ew)

	fmt.Fprintln(ew)
	t = table{{"softirq", "count here", "time here", "count, all CPUs", "time, all CPUs"}}
	for _, s := range e.Softirqs {
		t.add(s.Name, fmt.Sprint(s.Count), fmtDur(s.Time), fmt.Sprint(s.SystemCount), fmtDur(s.SystemTime))
	}
	t.write(ew)

	fmt.Fprintln(ew)
	fmt.Fprintf(ew, "run-queue latency (eBPF): %d waits, total %s, max %s; off-CPU %d times, %s\n",
		e.RunQueueCount, fmtDur(e.RunQueueTotal), fmtDur(e.RunQueueMax), e.OffCPUCount, fmtDur(e.OffCPUTotal))
	writeHist(ew, e.RunQueueHist)
	if e.PageFaultsError != "" {
		fmt.Fprintf(ew, "page faults (eBPF): not counted: %s\n", e.PageFaultsError)
	} else {
		fmt.Fprintf(ew, "page faults (eBPF): %d\n", e.PageFaults)
	}
	return ew.err
}

// table lays out rows with the first column left-aligned and the others
// right-aligned; an empty row prints as an empty line.
type table [][]string

func (t *table) add(cols ...string) { *t = append(*t, cols) }

func (t table) write(w io.Writer) {
	var width []int
	for _, row := range t {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range t {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// writeHist draws the non-empty buckets with a bar scaled to the largest.
func writeHist(w io.Writer, hist []bpfprobe.Bucket) {
	var top uint64
	for _, b := range hist {
		top = max(top, b.Count)
	}
	for _, b := range hist {
		bar := int(40 * b.Count / top)
		fmt.Fprintf(w, "  %9s .. %-9s %8d %s\n", fmtDur(b.Low), fmtDur(b.High), b.Count, strings.Repeat("#", max(bar, 1)))
	}
}

// fmtDur prints a duration in the largest unit that keeps it >= 1, with
// two decimals below 10, one below 100 and none above.
func fmtDur(d time.Duration) string {
	v, unit := float64(d), ""
	switch {
	case d == 0:
		return "0"
	case d >= time.Second:
		v, unit = d.Seconds(), "s"
	case d >= time.Millisecond:
		v, unit = v/1e6, "ms"
	case d >= time.Microsecond:
		v, unit = v/1e3, "µs"
	default:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	}
	prec := 0
	switch {
	case v < 10:
		prec = 2
	case v < 100:
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + unit
}

// errWriter keeps the first write error so the formatting code stays flat.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	} else if n < len(p) {
		e.err = errors.New("short write")
	}
	return len(p), nil
}
