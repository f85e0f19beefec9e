//go:build linux

package main

// The C (shmring/c/vigring.h) and Python (shmring/python/vigring.py) ring
// clients against vig serve: their examples are built and run as sensor
// processes, their answers compared byte for byte with what the Go client
// (shmring/client) gets for the same frames and with what the mock backend
// computes, and misbehaving clients in both languages must leave vig serving
// the others.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/platform/clock"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/shmring/client"
)

var clientSeq atomic.Uint64

// clientsConfig is vig with its embedded mock backend: det answers OUTPUT0
// (INT64 [2] = digest, frame), cam_detector three outputs (boxes, scores, classes);
// slow takes 200 ms, so that a client can die while vig holds its request.
const clientsConfig = `
listen: {grpc: "127.0.0.1:0", metrics: "off", ring: "%s"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models:
  det: {exec_ms: 1}
  cam_detector: {exec_ms: 1}
  slow: {exec_ms: 200}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 5000}
`

// startRingVig runs vig serve in this process with a ring listener and returns
// the ring's address and vig's log.
func startRingVig(t testing.TB) (string, *syncBuffer) {
	t.Helper()
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	addr := fmt.Sprintf("@vig-clients-test-%d-%d", os.Getpid(), clientSeq.Add(1))
	cfg, err := config.Parse("clients.yaml", []byte(fmt.Sprintf(clientsConfig, addr)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), ready, nil) }()
	select {
	case addrs := <-ready:
		if addrs["ring"] != addr {
			t.Fatalf("vig listens for rings on %q, want %q", addrs["ring"], addr)
		}
	case err := <-served:
		t.Fatalf("serve: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return addr, logs
}

// qemuUserHost names the host's architecture when this test binary runs under
// qemu-user (GOARCH=arm64 on an x86_64 host: /proc/cpuinfo is the host's).
func qemuUserHost() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	x86 := bytes.Contains(b, []byte("vendor_id")) && bytes.Contains(b, []byte("flags"))
	arm := bytes.Contains(b, []byte("CPU implementer"))
	switch {
	case runtime.GOARCH == "arm64" && x86:
		return "x86_64"
	case runtime.GOARCH == "amd64" && arm:
		return "aarch64"
	}
	return ""
}

// needTool skips unless tool is installed and the clients can run natively
// beside this test binary.
func needTool(t *testing.T, tool, install string) string {
	t.Helper()
	if h := qemuUserHost(); h != "" {
		t.Skipf("this %s test binary runs under qemu-user on a %s host, where %s would build or run native %s clients: the %s run of this test covers them, and its TestCClientArm64 runs the arm64 C client under qemu-aarch64",
			runtime.GOARCH, h, tool, h, h)
	}
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("%s not installed (%v): %s", tool, err, install)
	}
	return p
}

func needGCC(t *testing.T) string {
	return needTool(t, "gcc", "apt-get install -y gcc (.ci/run installs it)")
}

func needPython(t *testing.T) string {
	return needTool(t, "python3", "apt-get install -y python3 (.ci/run installs it)")
}

// srcDir is shmring's client sources, relative to this package.
func srcDir(t testing.TB, parts ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"..", "..", "shmring"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The flags every C build of the header passes: the bar.
var cflags = []string{"-std=c99", "-Wall", "-Wextra", "-Werror", "-O2"}

// buildC compiles a C file of shmring/c with cc and extra flags.
func buildC(t testing.TB, cc, src string, extra ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c"))
	args := append(append(append([]string{}, cflags...), extra...), "-o", out, src)
	cmd := exec.Command(cc, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	return out
}

// run runs a client to completion and returns its stdout; it fails unless the
// client exits 0.
func runClient(t testing.TB, name string, args ...string) string {
	t.Helper()
	return runEnv(t, nil, name, args...)
}

func runEnv(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// frameByte is the examples' frame pattern: byte j of frame k.
func frameByte(k uint64, j int) byte { return byte(k) + byte(7*j) }

// goClientLines submits what the examples submit (n frames of size bytes,
// closed loop) through the Go client and formats the results as the examples
// do with --outputs. It also checks every result against the mock backend's
// answer, so that the reference itself is known to be right.
func goClientLines(t testing.TB, addr, stream, model string, size, n int) string {
	t.Helper()
	c, err := client.Dial(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	for k := range uint64(n) {
		f, err := c.Loan()
		if err != nil {
			t.Fatal(err)
		}
		data := f.Bytes()[:size]
		for j := range data {
			data[j] = frameByte(k, j)
		}
		digest := mockbackend.Digest([][]byte{data})
		if _, err := c.Submit(f, &client.Request{Stream: stream, Model: model, Frame: k, CaptureNs: clock.Monotonic(), Len: size}); err != nil {
			t.Fatal(err)
		}
		var r client.Result
		if err := c.Next(&r); err != nil {
			t.Fatal(err)
		}
		if err := r.Err(); err != nil {
			t.Fatalf("Go client, frame %d: %v", k, err)
		}
		checkMock(t, &r, model, digest, k)
		total := 0
		for i := range r.NumOutputs() {
			_, p := r.Output(i)
			total += len(p)
		}
		fmt.Fprintf(&b, "frame=%d status=%s bytes=%d\n", r.Frame, r.Status, total)
		for i := range r.NumOutputs() {
			o, p := r.Output(i)
			dims := make([]string, o.Rank)
			for d := range dims {
				dims[d] = strconv.FormatInt(o.Dims[d], 10)
			}
			fmt.Fprintf(&b, "output name=%s datatype=%s shape=[%s] hex=%s\n", o.Name, o.Datatype, strings.Join(dims, ","), hex.EncodeToString(p))
		}
		c.Release(&r)
	}
	return b.String()
}

// checkMock compares a result with what the mock backend answers for the frame.
func checkMock(t testing.TB, r *client.Result, model string, digest, frame uint64) {
	t.Helper()
	var want []mockbackend.Output
	if mockbackend.IsDetector(model) {
		want = mockbackend.DetectorOutputs(digest, frame)
	} else {
		p := make([]byte, 16)
		binary.LittleEndian.PutUint64(p, digest)
		binary.LittleEndian.PutUint64(p[8:], frame)
		want = []mockbackend.Output{{Name: "OUTPUT0", Datatype: "INT64", Shape: []int64{2}, Data: p}}
	}
	if r.NumOutputs() != len(want) {
		t.Fatalf("frame %d: %d outputs, want %d", frame, r.NumOutputs(), len(want))
	}
	for i, w := range want {
		o, p := r.Output(i)
		if o.Name != w.Name || o.Datatype != w.Datatype || fmt.Sprint(o.Shape()) != fmt.Sprint(w.Shape) || !bytes.Equal(p, w.Data) {
			t.Fatalf("frame %d output %d: %s %s %v %x, want %s %s %v %x", frame, i, o.Name, o.Datatype, o.Shape(), p, w.Name, w.Datatype, w.Shape, w.Data)
		}
	}
}

// The cases every client runs: a small frame to the plain model, and a
// 6.2 MB frame to the three-output detector (answered whole: every output
// with its name, datatype, shape and bytes).
var clientCases = []struct {
	name, stream, model string
	size, n             int
}{
	{"det-1000B", "cam", "det", 1000, 5},
	{"detector-6.2MB", "", "cam_detector", 6_200_000, 3},
}

// sameAsGo runs a client once per case and compares its output with the Go
// client's, line for line.
func sameAsGo(t *testing.T, addr string, cmd func(stream, model string, size, n int) []string) {
	for _, tc := range clientCases {
		t.Run(tc.name, func(t *testing.T) {
			want := goClientLines(t, addr, tc.stream, tc.model, tc.size, tc.n)
			argv := cmd(tc.stream, tc.model, tc.size, tc.n)
			got := runClient(t, argv[0], argv[1:]...)
			if got != want {
				t.Fatalf("%s answered\n%s\nthe Go client got\n%s", filepath.Base(argv[0]), got, want)
			}
			if c := strings.Count(got, "frame="); c != tc.n {
				t.Fatalf("%d results, want %d", c, tc.n)
			}
		})
	}
}

// Every frame of the C example is answered, with the same bytes as the Go
// client gets, the detector's three outputs included.
func TestCClientMatchesGo(t *testing.T) {
	cc := needGCC(t)
	addr, _ := startRingVig(t)
	bin := buildC(t, cc, srcDir(t, "c", "example.c"))
	sameAsGo(t, addr, func(stream, model string, size, n int) []string {
		return []string{bin, addr, stream, model, strconv.Itoa(size), strconv.Itoa(n), "--outputs"}
	})
}

// The same for the Python example.
func TestPythonClientMatchesGo(t *testing.T) {
	py := needPython(t)
	addr, _ := startRingVig(t)
	ex := srcDir(t, "python", "example.py")
	sameAsGo(t, addr, func(stream, model string, size, n int) []string {
		return []string{py, ex, addr, stream, model, strconv.Itoa(size), strconv.Itoa(n), "--outputs"}
	})
}

// The C example under AddressSanitizer and UndefinedBehaviorSanitizer (any
// report aborts it), and the header compiled as C++ (a C++ sensor includes it
// as is); both still answer as the Go client does.
func TestCClientSanitizedAndCxx(t *testing.T) {
	cc := needGCC(t)
	addr, _ := startRingVig(t)
	want := goClientLines(t, addr, "cam", "det", 1000, 3)
	san := buildC(t, cc, srcDir(t, "c", "example.c"), "-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
	got := runEnv(t, []string{"ASAN_OPTIONS=abort_on_error=1:detect_leaks=1", "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"},
		san, addr, "cam", "det", "1000", "3", "--outputs")
	if got != want {
		t.Errorf("sanitized C example answered\n%s\nwant\n%s", got, want)
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Logf("g++ not installed (%v): C++ build not checked (apt-get install -y g++)", err)
		return
	}
	out := filepath.Join(t.TempDir(), "example-cxx")
	if b, err := exec.Command(cxx, "-std=c++11", "-Wall", "-Wextra", "-Werror", "-x", "c++", "-o", out, srcDir(t, "c", "example.c")).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, b)
	}
	if got := runClient(t, out, addr, "cam", "det", "1000", "3", "--outputs"); got != want {
		t.Errorf("C++ build answered\n%s\nwant\n%s", got, want)
	}
}

var resultLine = regexp.MustCompile(`^frame=(\d+) status=([A-Z_]+) bytes=(\d+)$`)

// checkOpenLoop checks an open-loop run: every frame 0..n-1 answered exactly
// once, with a status vig may give a frame under load (OK, or superseded /
// stale ones) and the bytes of OUTPUT0 when OK.
func checkOpenLoop(t *testing.T, out string, n int) {
	t.Helper()
	seen := make([]bool, n)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %q is not a result line", line)
		}
		k, _ := strconv.Atoi(m[1])
		if k >= n || seen[k] {
			t.Fatalf("frame %d answered twice or never submitted:\n%s", k, out)
		}
		seen[k] = true
		switch m[2] {
		case "OK":
			if m[3] != "16" {
				t.Errorf("frame %d: OK with %s bytes, want 16", k, m[3])
			}
		case "ABORTED", "DEADLINE_EXCEEDED":
		default:
			t.Errorf("frame %d: status %s", k, m[2])
		}
	}
	for k, ok := range seen {
		if !ok {
			t.Errorf("frame %d never answered", k)
		}
	}
}

// --rate: frames are submitted on a clock, not after each answer; every one
// is still answered exactly once.
func TestClientsOpenLoop(t *testing.T) {
	t.Run("c", func(t *testing.T) {
		cc := needGCC(t)
		addr, _ := startRingVig(t)
		bin := buildC(t, cc, srcDir(t, "c", "example.c"))
		checkOpenLoop(t, runClient(t, bin, addr, "cam", "det", "4096", "40", "--rate", "400"), 40)
	})
	t.Run("python", func(t *testing.T) {
		py := needPython(t)
		addr, _ := startRingVig(t)
		checkOpenLoop(t, runClient(t, py, srcDir(t, "python", "example.py"), addr, "cam", "det", "4096", "40", "--rate", "400"), 40)
	})
	t.Run("python-kernel-atomics", func(t *testing.T) { // no libatomic: fences and adds by FUTEX_WAKE_OP
		py := needPython(t)
		addr, _ := startRingVig(t)
		checkOpenLoop(t, runEnv(t, []string{"VIGRING_NO_LIBATOMIC=1"}, py, srcDir(t, "python", "example.py"), addr, "cam", "det", "4096", "40", "--rate", "400"), 40)
	})
}

// The C and Python layouts are shmring.ComputeLayout's, offset for offset, for
// the default configuration and the example of shmring/doc.go.
func TestClientLayoutsMatchGo(t *testing.T) {
	var want strings.Builder
	for _, cfg := range []shmring.Config{
		shmring.DefaultConfig,
		{Requests: shmring.RingConfig{Descriptors: 16, Slots: 4, SlotSize: 4096}, Responses: shmring.RingConfig{Descriptors: 8, Slots: 40, SlotSize: 8192}},
	} {
		l, err := shmring.ComputeLayout(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&want, "region=%d", l.RegionSize)
		for i, r := range l.Rings {
			fmt.Fprintf(&want, " ring%d=%d/%d/%d/%d/%d/%d", i, r.Descriptors, r.Slots, r.SlotSize, r.RingOff, r.DescOff, r.ArenaOff)
		}
		want.WriteString("\n")
	}
	t.Run("c", func(t *testing.T) {
		bin := buildC(t, needGCC(t), srcDir(t, "c", "testdata", "hostile.c"))
		if got := runClient(t, bin, "-", "layout"); got != want.String() {
			t.Errorf("C layouts\n%s\nwant\n%s", got, want.String())
		}
	})
	t.Run("python", func(t *testing.T) {
		py := needPython(t)
		if got := runClient(t, py, srcDir(t, "python", "testdata", "hostile.py"), "-", "layout"); got != want.String() {
			t.Errorf("Python layouts\n%s\nwant\n%s", got, want.String())
		}
	})
}

// Hostile clients in C and Python: one scribbles its control blocks (counters,
// waiters words, slot states) after a good round trip, another is killed with
// SIGKILL while vig holds its frame (a 200 ms model) and with half a descriptor
// written, so that vig answers into the region of a dead process. vig disconnects
// the first (saying why), drops the second, and keeps serving: a Go client
// connected all along still gets every answer right, and a fresh client of the
// same language is served afterwards.
func TestHostileClientsLeaveVigServing(t *testing.T) {
	addr, logs := startRingVig(t)
	gc, err := client.Dial(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	var frame uint64
	goRound := func(t *testing.T) {
		t.Helper()
		frame++
		f, err := gc.Loan()
		if err != nil {
			t.Fatalf("the Go client after a hostile peer: %v", err)
		}
		data := f.Bytes()[:512]
		for j := range data {
			data[j] = frameByte(frame, j)
		}
		digest := mockbackend.Digest([][]byte{data})
		if _, err := gc.Submit(f, &client.Request{Stream: "cam", Model: "det", Frame: frame, CaptureNs: clock.Monotonic(), Len: 512}); err != nil {
			t.Fatal(err)
		}
		var r client.Result
		if err := gc.Next(&r); err != nil {
			t.Fatalf("the Go client after a hostile peer: %v", err)
		}
		defer gc.Release(&r)
		if err := r.Err(); err != nil {
			t.Fatalf("the Go client after a hostile peer: %v", err)
		}
		checkMock(t, &r, "det", digest, frame)
	}
	goRound(t)
	langs := []struct {
		name    string
		hostile func(t *testing.T) []string
		example func(t *testing.T) []string
	}{
		{"c", func(t *testing.T) []string {
			return []string{buildC(t, needGCC(t), srcDir(t, "c", "testdata", "hostile.c")), addr}
		}, func(t *testing.T) []string {
			return []string{buildC(t, needGCC(t), srcDir(t, "c", "example.c"))}
		}},
		{"python", func(t *testing.T) []string {
			return []string{needPython(t), srcDir(t, "python", "testdata", "hostile.py"), addr}
		}, func(t *testing.T) []string {
			return []string{needPython(t), srcDir(t, "python", "example.py")}
		}},
	}
	for _, lang := range langs {
		t.Run(lang.name+"/scribble", func(t *testing.T) {
			h := lang.hostile(t)
			before := strings.Count(logs.String(), "disconnecting client")
			if got := runClient(t, h[0], append(h[1:], "scribble")...); got != "ok\ndisconnected\n" {
				t.Fatalf("hostile client said %q, want a round trip then vig's disconnection", got)
			}
			if n := strings.Count(logs.String(), "disconnecting client"); n != before+1 || !strings.Contains(logs.String(), "peer corrupted the ring") {
				t.Errorf("vig's log has %d disconnections (want %d) or no reason:\n%s", n, before+1, logs.String())
			}
			goRound(t)
		})
		t.Run(lang.name+"/bells", func(t *testing.T) {
			// Rung without a post, in a tight loop, and rung on while another
			// client is served; once killed, vig holds nothing of it.
			fds0, g0 := openFds(t), runtime.NumGoroutine()
			h := lang.hostile(t)
			cmd := exec.Command(h[0], append(h[1:], "bells")...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if line != "ok\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("hostile client said %q (%v), want ok; stderr: %s", line, err, stderr.String())
			}
			for range 3 {
				goRound(t) // while it rings
			}
			cmd.Process.Signal(os.Kill)
			cmd.Wait()
			settled(t, "the ringing client's session", fds0, g0)
			goRound(t)
		})
		t.Run(lang.name+"/kill-9", func(t *testing.T) {
			fds0, g0 := openFds(t), runtime.NumGoroutine()
			h := lang.hostile(t)
			cmd := exec.Command(h[0], append(h[1:], "die")...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("hostile client said %q (%v), want ready; stderr: %s", line, err, stderr.String())
			}
			cmd.Process.Signal(os.Kill)
			cmd.Wait()
			goRound(t)
			settled(t, "the killed client's session", fds0, g0)
			ex := lang.example(t)
			got := runClient(t, ex[0], append(ex[1:], addr, "cam", "det", "256", "2")...)
			if strings.Count(got, "status=OK") != 2 {
				t.Errorf("a fresh %s client after the killed one: %q, want two OK results", lang.name, got)
			}
		})
	}
}

// openFds counts this process's open file descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// settled waits until this process (vig in it) is back to at most fds open
// files and goroutines goroutines: a session ended by its peer leaves nothing
// behind. The wait is for vig to notice the peer's end (its watcher reads EOF);
// it is bounded generously for qemu and a loaded machine, and asserts no time.
func settled(t *testing.T, what string, fds, goroutines int) {
	t.Helper()
	var f, g int
	for range 400 {
		if f, g = openFds(t), runtime.NumGoroutine(); f <= fds && g <= goroutines {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("after %s: %d open fds (before: %d), %d goroutines (before: %d)", what, f, fds, g, goroutines)
}

// The C example cross-compiled for arm64 (static) and run under qemu-aarch64
// against vig: the header's atomics, doorbells and layout hold on arm64.
func TestCClientArm64(t *testing.T) {
	if runtime.GOARCH == "arm64" {
		t.Skip("this test binary is arm64 (native: TestCClientMatchesGo runs the arm64 C client; under qemu-user: the amd64 run of this test does)")
	}
	cc, err := exec.LookPath("aarch64-linux-gnu-gcc")
	if err != nil {
		t.Skipf("aarch64-linux-gnu-gcc not installed (%v): apt-get install -y gcc-aarch64-linux-gnu (.ci/run installs it)", err)
	}
	emu, err := exec.LookPath("qemu-aarch64")
	if err != nil {
		t.Skipf("qemu-aarch64 not installed (%v): apt-get install -y qemu-user", err)
	}
	addr, _ := startRingVig(t)
	bin := buildC(t, cc, srcDir(t, "c", "example.c"), "-static")
	for _, tc := range clientCases {
		t.Run(tc.name, func(t *testing.T) {
			want := goClientLines(t, addr, tc.stream, tc.model, tc.size, tc.n)
			if got := runClient(t, emu, bin, addr, tc.stream, tc.model, strconv.Itoa(tc.size), strconv.Itoa(tc.n), "--outputs"); got != want {
				t.Fatalf("arm64 C example answered\n%s\nthe Go client got\n%s", got, want)
			}
		})
	}
}

// The Python example run by an arm64 CPython under qemu-aarch64 against vig:
// the client's struct layouts, atomics (libatomic through ctypes) and doorbells
// hold on arm64. Debian's python3:arm64 cannot be installed beside the amd64
// one, so the interpreter comes from a sysroot of unpacked packages
// (build/python-arm64.sh; .ci/run makes it), given to qemu with -L.
func TestPythonClientArm64(t *testing.T) {
	if runtime.GOARCH == "arm64" {
		t.Skip("this test binary is arm64 (native: TestPythonClientMatchesGo runs the arm64 Python client; under qemu-user: the amd64 run of this test does)")
	}
	emu, err := exec.LookPath("qemu-aarch64")
	if err != nil {
		t.Skipf("qemu-aarch64 not installed (%v): apt-get install -y qemu-user", err)
	}
	root := os.Getenv("VIG_PYTHON_ARM64")
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Skipf("no arm64 CPython sysroot: VIG_PYTHON_ARM64 is unset and there is no cache directory (%v)", err)
		}
		root = filepath.Join(cache, "vig", "python-arm64")
	}
	pys, _ := filepath.Glob(filepath.Join(root, "usr", "bin", "python3.*"))
	if len(pys) == 0 {
		t.Skipf("no arm64 CPython sysroot at %s: run build/python-arm64.sh (as root, on Debian), or set VIG_PYTHON_ARM64 to one", root)
	}
	if got := runClient(t, emu, "-L", root, pys[0], "-c", "import platform; print(platform.machine())"); strings.TrimSpace(got) != "aarch64" {
		t.Fatalf("%s under qemu-aarch64 says it runs on %q, want aarch64", pys[0], got)
	}
	addr, _ := startRingVig(t)
	ex := srcDir(t, "python", "example.py")
	for _, tc := range clientCases {
		t.Run(tc.name, func(t *testing.T) {
			want := goClientLines(t, addr, tc.stream, tc.model, tc.size, tc.n)
			if got := runClient(t, emu, "-L", root, pys[0], ex, addr, tc.stream, tc.model, strconv.Itoa(tc.size), strconv.Itoa(tc.n), "--outputs"); got != want {
				t.Fatalf("arm64 Python example answered\n%s\nthe Go client got\n%s", got, want)
			}
		})
	}
}

// startEchoRing serves rings with shmring's server side alone, answering every
// request at once with a 16-byte OUTPUT0 and never reading the frame: what is
// left to measure is the hand-off itself (descriptor, counters, wake-ups),
// which does not depend on the frame's size.
func startEchoRing(b *testing.B, spin shmring.Spin) string {
	b.Helper()
	if _, err := shmring.Probe(); err != nil {
		b.Skipf("no shared memory for rings on this machine: %v", err)
	}
	addr := fmt.Sprintf("@vig-clients-echo-%d-%d", os.Getpid(), clientSeq.Add(1))
	ln, err := shmring.Listen(addr, shmring.ServerConfig{Spin: spin, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	out := make([]byte, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go c.Serve(context.Background(), func(_ context.Context, req *shmring.Request) {
				res := shmring.Response{Status: shmring.StatusOK, NumTensors: 1, Payload: out}
				res.Tensors[0] = shmring.Tensor{Name: "OUTPUT0", Datatype: "INT64", Rank: 1, Dims: [shmring.MaxRank]int64{2}, Length: 16}
				c.Respond(req, &res)
			})
		}
	}()
	return addr
}

// BenchmarkClientHandoff is the round trip from submit to result, per client
// library, at 64 B and 6.2 MB, against an echo ring (startEchoRing); filling
// the frame is not counted. adaptive: both sides spin for the adaptive window,
// then sleep on their doorbells (the default); spin: both sides poll without sleeping
// (the floor of the hand-off; burns a core per side). The C and Python examples
// time themselves with --bench; the figures are the mean (µs/roundtrip) and the
// median (µs-p50).
//
//	go test -run '^$' -bench ClientHandoff -benchtime 2000x ./cmd/vig
func BenchmarkClientHandoff(b *testing.B) {
	if h := qemuUserHost(); h != "" {
		b.Skipf("under qemu-user on a %s host: no meaningful timing", h)
	}
	for _, mode := range []struct {
		name string
		spin shmring.Spin
		flag string
	}{{"adaptive", shmring.SpinAdaptive, "adaptive"}, {"spin", shmring.SpinForever, "forever"}} {
		b.Run(mode.name, func(b *testing.B) { benchHandoff(b, startEchoRing(b, mode.spin), mode.spin, mode.flag) })
	}
}

func benchHandoff(b *testing.B, addr string, spin shmring.Spin, spinFlag string) {
	for _, size := range []int{64, 6_200_000} {
		b.Run(fmt.Sprintf("go/%dB", size), func(b *testing.B) {
			c, err := client.Dial(addr, client.Options{Spin: spin})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var total time.Duration
			var rtts []time.Duration
			for k := 0; b.Loop(); k++ {
				f, err := c.Loan()
				if err != nil {
					b.Fatal(err)
				}
				data := f.Bytes()[:size] // filled as the examples do, so the peer idles as long
				for j := range data {
					data[j] = frameByte(uint64(k), j)
				}
				start := time.Now()
				if _, err := c.Submit(f, &client.Request{Stream: "cam", Model: "det", Frame: uint64(k), Len: size}); err != nil {
					b.Fatal(err)
				}
				var r client.Result
				if err := c.Next(&r); err != nil {
					b.Fatal(err)
				}
				d := time.Since(start)
				total += d
				rtts = append(rtts, d)
				c.Release(&r)
			}
			slices.Sort(rtts)
			b.ReportMetric(float64(total.Nanoseconds())/1e3/float64(b.N), "µs/roundtrip")
			b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds())/1e3, "µs-p50")
		})
		example := func(b *testing.B, argv ...string) {
			out := runClient(b, argv[0], append(argv[1:], addr, "cam", "det", strconv.Itoa(size), strconv.Itoa(b.N), "--bench", "--spin", spinFlag)...)
			var us, p50 float64
			var n int
			if _, err := fmt.Sscanf(out, "round_trip_us=%g p50_us=%g frames=%d", &us, &p50, &n); err != nil || n != b.N {
				b.Fatalf("example said %q (%v)", out, err)
			}
			b.ReportMetric(us, "µs/roundtrip")
			b.ReportMetric(p50, "µs-p50")
		}
		b.Run(fmt.Sprintf("c/%dB", size), func(b *testing.B) {
			cc, err := exec.LookPath("gcc")
			if err != nil {
				b.Skipf("gcc not installed: %v", err)
			}
			bin := buildC(b, cc, srcDir(b, "c", "example.c"))
			example(b, bin)
		})
		b.Run(fmt.Sprintf("python/%dB", size), func(b *testing.B) {
			py, err := exec.LookPath("python3")
			if err != nil {
				b.Skipf("python3 not installed: %v", err)
			}
			example(b, py, srcDir(b, "python", "example.py"))
		})
	}
}

// The region kinds of the hello: a /dev/shm file kept under a key (kind 3) is
// handed to the backend by reference and answered as the Go client's memfd is; an unlinked /dev/shm file (kind 2) cannot be sealed and is
// refused where memfds work, and the client says so with vig's reason.
func TestClientRegionKinds(t *testing.T) {
	for _, lang := range []struct {
		name string
		argv func(t *testing.T) []string
	}{
		{"c", func(t *testing.T) []string { return []string{buildC(t, needGCC(t), srcDir(t, "c", "example.c"))} }},
		{"python", func(t *testing.T) []string { return []string{needPython(t), srcDir(t, "python", "example.py")} }},
	} {
		t.Run(lang.name, func(t *testing.T) {
			argv := lang.argv(t)
			if b, err := shmring.Probe(); err != nil || b != shmring.BackendMemfd {
				t.Skipf("sealed memfds unavailable here (%v, %v): vig accepts unsealed regions", b, err)
			}
			if _, err := os.Stat("/dev/shm"); err != nil {
				t.Skipf("no /dev/shm: %v", err)
			}
			addr, logs := startRingVig(t)
			want := goClientLines(t, addr, "cam", "det", 1000, 3)
			if got := runClient(t, argv[0], append(argv[1:], addr, "cam", "det", "1000", "3", "--outputs", "--backend", "shm-key")...); got != want {
				t.Errorf("with a keyed /dev/shm region the client answered\n%s\nwant\n%s", got, want)
			}
			// The mock backend maps the keyed file: the frames it digested were
			// read in place, by reference, from the client's region.
			if !strings.Contains(logs.String(), "backend=shm-key") || !strings.Contains(logs.String(), "path=by_reference") {
				t.Errorf("vig did not take the keyed region by reference:\n%s", logs.String())
			}
			cmd := exec.Command(argv[0], append(argv[1:], addr, "cam", "det", "1000", "1", "--backend", "shm")...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "refused the session (unsealed region)") {
				t.Errorf("an unsealed region: %v, stderr %q; want exit 1 with vig's reason", err, stderr.String())
			}
		})
	}
}

// A capture thread and a result thread on one C ring, as a camera pipeline runs
// them, under ThreadSanitizer: what the two groups of calls share is atomic or
// separate (the test once caught them sharing the descriptor scratch buffer).
func TestCClientTwoThreads(t *testing.T) {
	cc := needGCC(t)
	addr, _ := startRingVig(t)
	bin := buildC(t, cc, srcDir(t, "c", "testdata", "threads.c"), "-g", "-O1", "-fsanitize=thread", "-pthread")
	got := runEnv(t, []string{"TSAN_OPTIONS=halt_on_error=1 exitcode=66"}, bin, addr, "300")
	if got != "answered=300\n" {
		t.Errorf("two-thread client said %q, want answered=300", got)
	}
}

// Calls that cannot succeed fail at once, saying what to do, in C, in C built
// as C++17 (-Wall -Wextra -pedantic -Werror) and in Python: next without a
// timeout and nothing outstanding, loan while this process holds every slot,
// bad arguments (Python: vigring.Error subclasses only, submit(None, length>0)
// refused, stale views failing), a timeout naming what it waited for, the
// error text cleared by a success.
func TestClientsFailFast(t *testing.T) {
	addr, _ := startRingVig(t)
	check := func(t *testing.T, out string) {
		t.Helper()
		if strings.Contains(out, "FAIL") || !strings.HasSuffix(out, "done\n") || strings.Count(out, "ok ") < 6 {
			t.Errorf("misuse said\n%s", out)
		}
	}
	t.Run("c", func(t *testing.T) {
		check(t, runClient(t, buildC(t, needGCC(t), srcDir(t, "c", "testdata", "misuse.c")), addr))
	})
	t.Run("c++17", func(t *testing.T) {
		cxx, err := exec.LookPath("g++")
		if err != nil {
			t.Skipf("g++ not installed (%v): apt-get install -y g++", err)
		}
		out := filepath.Join(t.TempDir(), "misuse-cxx")
		if b, err := exec.Command(cxx, "-std=c++17", "-Wall", "-Wextra", "-pedantic", "-Werror", "-x", "c++", "-o", out, srcDir(t, "c", "testdata", "misuse.c")).CombinedOutput(); err != nil {
			t.Fatalf("g++: %v\n%s", err, b)
		}
		check(t, runClient(t, out, addr))
	})
	t.Run("python", func(t *testing.T) {
		out := runClient(t, needPython(t), srcDir(t, "python", "testdata", "misuse.py"), addr)
		check(t, out)
		if strings.Count(out, "ok ") < 15 {
			t.Errorf("python misuse ran %d cases, want 15:\n%s", strings.Count(out, "ok "), out)
		}
	})
}

// buildCxx17 builds a C++17 source against vigring.hpp with every warning an
// error, as a sensor author's build would.
func buildCxx17(t *testing.T, src string) string {
	t.Helper()
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skipf("g++ not installed (%v): apt-get install -y g++", err)
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".cpp")+"-cxx")
	if b, err := exec.Command(cxx, "-std=c++17", "-Wall", "-Wextra", "-pedantic", "-Werror", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("g++ -std=c++17 -Wall -Wextra -pedantic -Werror %s: %v\n%s", src, err, b)
	}
	return out
}

// The C++17 example (vigring.hpp: RAII loans and results, typed output views)
// answers as the Go client does, and the header's errors and RAII hold: each
// misuse fails at once with vig::error naming the fix, results release their
// slots at scope end.
func TestCxxClient(t *testing.T) {
	addr, _ := startRingVig(t)
	bin := buildCxx17(t, srcDir(t, "c", "example.cpp"))
	sameAsGo(t, addr, func(stream, model string, size, n int) []string {
		return []string{bin, addr, stream, model, strconv.Itoa(size), strconv.Itoa(n)}
	})
	out := runClient(t, buildCxx17(t, srcDir(t, "c", "testdata", "misuse.cpp")), addr)
	if strings.Contains(out, "FAIL") || !strings.HasSuffix(out, "done\n") || strings.Count(out, "ok ") != 9 {
		t.Errorf("C++ misuse said\n%s", out)
	}
}
