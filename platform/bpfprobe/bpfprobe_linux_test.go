package bpfprobe

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/platform/proc"
)

// The child's workload, known in advance so the test can check the counts.
const (
	childGetppid = 5000
	childWrites  = 300
	childUDP     = 50
	childPages   = 256
	childSleeps  = 5
)

const childEnv = "VIG_BPFPROBE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// child waits for "go" on stdin, runs the workload on one locked thread,
// prints "done" and waits for stdin to close.
func child() int {
	runtime.LockOSThread()
	in := bufio.NewReader(os.Stdin)
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	rc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	uc, err := net.Dial("udp", rc.LocalAddr().String())
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	mem, err := unix.Mmap(-1, 0, childPages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return 1
	}
	for range childGetppid {
		syscall.Getppid()
	}
	one := []byte{1}
	for range childWrites {
		unix.Write(int(w.Fd()), one)
	}
	for range childUDP {
		uc.Write(one)
	}
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	for range childSleeps {
		unix.Nanosleep(&unix.Timespec{Nsec: 1e6}, nil)
	}
	fmt.Println("done")
	io.Copy(io.Discard, in)
	r.Close()
	return 0
}

// unavailable says why eBPF truly cannot run here, or "" when it can and
// the collector must work.
func unavailable(t *testing.T) string {
	self, err := proc.ReadStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !privileged(self.CapEff) {
		return fmt.Sprintf("needs root or CAP_BPF+CAP_PERFMON (CapEff=%#x)", self.CapEff)
	}
	if arch := qemuUser(); arch != "" {
		return fmt.Sprintf("running %s code under qemu-user on a %s host: qemu-user does not emulate bpf(2)", runtime.GOARCH, arch)
	}
	return ""
}

// qemuUser returns the host's architecture when /proc/cpuinfo describes a
// CPU of another architecture than the one this binary was built for
// (qemu-user passes the host's cpuinfo through).
func qemuUser() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	x86 := bytes.Contains(b, []byte("vendor_id")) && bytes.Contains(b, []byte("flags"))
	arm := bytes.Contains(b, []byte("CPU implementer"))
	switch {
	case runtime.GOARCH == "arm64" && x86:
		return "x86"
	case runtime.GOARCH == "amd64" && arm:
		return "arm"
	}
	return ""
}

// TestCollectorCountsChildSyscalls runs the collector against a child
// that makes known syscalls, once with each way of hooking syscalls.
func TestCollectorCountsChildSyscalls(t *testing.T) {
	for _, probe := range []string{"raw_tracepoint", "tracepoint"} {
		t.Run(probe, func(t *testing.T) {
			old := rawSyscalls
			rawSyscalls = probe == "raw_tracepoint"
			defer func() { rawSyscalls = old }()
			testCollectorChild(t, probe)
		})
	}
}

// kernelAtLeast reports whether the running kernel is at least major.minor.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release, err)
	}
	return ma > major || ma == major && mi >= minor
}

func testCollectorChild(t *testing.T, probe string) {
	if why := unavailable(t); why != "" {
		if err := Available(); err == nil {
			t.Fatalf("test thinks eBPF is unavailable (%s) but Available() says it is", why)
		}
		t.Skip(why)
	}
	if err := Available(); err != nil {
		t.Fatalf("privileged native run, but Available: %v", err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	out := bufio.NewReader(stdout)
	expect := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("child said %q (%v), want %q", line, err, want)
		}
	}
	expect("ready")

	c, err := Start(Options{PID: cmd.Process.Pid})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer c.Close()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	expect("done")
	// Detach before reading: the child's runtime threads may still wake while the
	// maps are read one after another, and the counts compared below must come from
	// one instant.
	if err := c.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	counts, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if counts.SyscallProbe != probe && kernelAtLeast(t, 4, 17) {
		t.Errorf("syscalls hooked with %s, want %s (raw tracepoints exist since Linux 4.17)", counts.SyscallProbe, probe)
	}
	t.Logf("syscalls: %+v", counts.Syscalls)
	t.Logf("runqueue %d/%v max %v hist %v; offcpu %d/%v; switches %d/%d; faults %d %s; threads %d",
		counts.RunQueueCount, counts.RunQueueTotal, counts.RunQueueMax, counts.RunQueueHist,
		counts.OffCPUCount, counts.OffCPUTotal, counts.Voluntary, counts.Involuntary,
		counts.PageFaults, counts.PageFaultsError, counts.Threads)
	t.Logf("softirqs: %+v", counts.Softirqs)

	// The child's Go runtime never calls getppid itself; a couple of
	// extra pipe writes may come from the runtime (e.g. its wake-up pipe
	// on older kernels), hence the small tolerance.
	within := func(name string, lo, hi uint64) Syscall {
		t.Helper()
		s, ok := counts.Syscall(name)
		if !ok || s.Count < lo || s.Count > hi {
			t.Errorf("%s: count %d (seen %v), want %d..%d", name, s.Count, ok, lo, hi)
		}
		if ok && (s.Total <= 0 || s.Max <= 0 || s.Max > s.Total || s.Blocked > s.Total) {
			t.Errorf("%s: inconsistent times %+v", name, s)
		}
		return s
	}
	within("getppid", childGetppid, childGetppid)
	within("write", childWrites+childUDP+1, childWrites+childUDP+5) // +1: "done"
	// The child's 1 ms sleeps (and the runtime's own) were mostly off-CPU.
	if s, ok := counts.Syscall("nanosleep"); !ok || s.Count < childSleeps || s.Blocked < childSleeps*time.Millisecond/2 || s.Blocked > s.Total {
		t.Errorf("nanosleep: %+v, want >= %d calls mostly blocked", s, childSleeps)
	}
	if s := SyscallName(runtime.GOARCH, 110); runtime.GOARCH == "amd64" && s != "getppid" {
		t.Errorf("table: amd64 110 = %q", s)
	}

	// The child blocked on stdin before "go" and again after "done":
	// a wakeup (run-queue wait) and an off-CPU stretch were seen.
	if counts.RunQueueCount == 0 || len(counts.RunQueueHist) == 0 || counts.OffCPUCount == 0 || counts.Voluntary == 0 {
		t.Errorf("scheduler maps empty: %+v", counts)
	}
	var histSum uint64
	for _, b := range counts.RunQueueHist {
		histSum += b.Count
		if b.High <= b.Low {
			t.Errorf("bucket %+v", b)
		}
	}
	if histSum != counts.RunQueueCount {
		t.Errorf("histogram holds %d waits, counter %d", histSum, counts.RunQueueCount)
	}
	if counts.Threads == 0 {
		t.Error("no thread ids tracked")
	}
	// Loopback UDP sends run NET_RX in the sender's context.
	if s, ok := counts.Softirq("NET_RX"); !ok || s.SystemCount == 0 || s.Count == 0 || s.Time <= 0 || s.Time > s.SystemTime {
		t.Errorf("NET_RX: %+v (seen %v)", s, ok)
	}
	if counts.PageFaultsError != "" {
		t.Errorf("page faults not counted: %s", counts.PageFaultsError)
	} else if counts.PageFaults < childPages {
		t.Errorf("page faults %d, want >= %d", counts.PageFaults, childPages)
	}

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Read(); err == nil {
		t.Error("Read after Close succeeded")
	}
}

func TestStartBadPID(t *testing.T) {
	if why := unavailable(t); why != "" {
		t.Skip(why)
	}
	if _, err := Start(Options{PID: 0}); err == nil {
		t.Error("Start(pid 0) succeeded")
	}
	// A pid that does not exist: the error names it and nothing leaks.
	if _, err := Start(Options{PID: 1<<22 - 1}); err == nil || !strings.Contains(err.Error(), strconv.Itoa(1<<22-1)) {
		t.Errorf("Start(missing pid) = %v", err)
	}
}

func TestDetachStopsCounting(t *testing.T) {
	if why := unavailable(t); why != "" {
		t.Skip(why)
	}
	c, err := Start(Options{PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 100 {
		syscall.Getppid()
	}
	if err := c.Detach(); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		syscall.Getppid()
	}
	counts, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := counts.Syscall("getppid"); s.Count != 100 {
		t.Errorf("getppid counted %d times, made 100 before Detach and 1000 after", s.Count)
	}
}
