//go:build linux

package shmring

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// Multi-process tests re-execute this test binary as the ring peer: TestMain
// runs the role named in SHMRING_TEST_PEER instead of the tests.
const (
	envPeer = "SHMRING_TEST_PEER"
	envAddr = "SHMRING_TEST_ADDR"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envPeer); role != "" {
		if err := runPeer(role, os.Getenv(envAddr)); err != nil {
			fmt.Fprintf(os.Stderr, "peer %s: %v\n", role, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m) // every test leaves no goroutine behind
}

// peerProc is a child process playing the client.
type peerProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	err bytes.Buffer
}

func startPeer(t *testing.T, role, addr string) *peerProc {
	t.Helper()
	p := &peerProc{}
	start := func(name string, args ...string) error {
		p.cmd = exec.Command(name, args...)
		// GORACE: a race-instrumented child would otherwise sleep 1 s at exit.
		p.cmd.Env = append(os.Environ(), envPeer+"="+role, envAddr+"="+addr, "GORACE=atexit_sleep_ms=0")
		p.cmd.Stderr = &p.err
		in, err := p.cmd.StdinPipe()
		if err != nil {
			return err
		}
		out, err := p.cmd.StdoutPipe()
		if err != nil {
			return err
		}
		p.in, p.out = in, bufio.NewReader(out)
		return p.cmd.Start()
	}
	self, _ := os.Executable()
	err := start(self, "-test.run=^$")
	if errors.Is(err, syscall.ENOEXEC) {
		// Under qemu-user without binfmt_misc the child must be emulated
		// explicitly.
		emu, lerr := exec.LookPath(qemuFor(runtime.GOARCH))
		if lerr != nil {
			t.Skipf("cannot re-exec the test binary (%v) and no %s: %v", err, qemuFor(runtime.GOARCH), lerr)
		}
		err = start(emu, self, "-test.run=^$")
	}
	if err != nil {
		t.Fatalf("starting peer: %v", err)
	}
	t.Cleanup(func() {
		p.in.Close()
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	return p
}

func qemuFor(goarch string) string {
	switch goarch {
	case "arm64":
		return "qemu-aarch64"
	case "amd64":
		return "qemu-x86_64"
	}
	return "qemu-" + goarch
}

// expect reads the peer's next line and fails unless it is want.
func (p *peerProc) expect(t *testing.T, want string) {
	t.Helper()
	line, err := p.out.ReadString('\n')
	if strings.TrimSpace(line) != want {
		t.Fatalf("peer said %q (%v), want %q; stderr: %s", line, err, want, p.err.String())
	}
}

func (p *peerProc) say(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(p.in, s+"\n"); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the peer to exit and fails unless it exited 0.
func (p *peerProc) wait(t *testing.T) {
	t.Helper()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("peer: %v; stderr: %s", err, p.err.String())
	}
}

// accept runs Accept in the background.
func acceptAsync(l *Listener) <-chan *Conn {
	ch := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			c = nil
		}
		ch <- c
	}()
	return ch
}

func frameBytes(tag uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(uint64(i)*7 + tag)
	}
	return b
}

func peerPost(s *Session, tag uint64, n int) error {
	slot, buf, err := s.Requests.Loan()
	if err != nil {
		return err
	}
	copy(buf, frameBytes(tag, n))
	return s.Requests.Post(&Descriptor{Tag: tag, Frame: tag, Stream: "cam", Model: "det", Slot: slot, PayloadLen: uint64(n)})
}

func runPeer(role, addr string) error {
	stdin := bufio.NewReader(os.Stdin)
	say := func(s string) { fmt.Println(s) }
	hear := func(want string) error {
		line, err := stdin.ReadString('\n')
		if strings.TrimSpace(line) != want {
			return fmt.Errorf("parent said %q (%v), want %q", line, err, want)
		}
		return nil
	}
	switch role {
	case "echo":
		s, err := Dial(addr, DialOptions{Config: testConfig})
		if err != nil {
			return err
		}
		defer s.Close()
		if s.Peer().PID != int32(os.Getppid()) {
			return fmt.Errorf("server pid %d, parent %d", s.Peer().PID, os.Getppid())
		}
		for tag := uint64(1); tag <= 3; tag++ {
			if err := peerPost(s, tag, 1000*int(tag)); err != nil {
				return err
			}
			var d Descriptor
			if err := s.Responses.Next(&d); err != nil {
				return err
			}
			if d.Tag != tag || string(s.Responses.Payload(&d)) != fmt.Sprintf("sum %d", tag) {
				return fmt.Errorf("response %+v payload %q", d, s.Responses.Payload(&d))
			}
			s.Responses.Release(d.Slot)
		}
		return nil

	case "stress":
		// Pipelined requests with both sides sleeping on the futex every time:
		// the cross-process wake-up path.
		s, err := Dial(addr, DialOptions{Config: testConfig, Spin: SpinNever})
		if err != nil {
			return err
		}
		defer s.Close()
		const n = 3000
		errc := make(chan error, 1)
		inflight := make(chan struct{}, testConfig.Responses.Slots)
		go func() {
			var d Descriptor
			for i := range n {
				if err := s.Responses.Next(&d); err != nil {
					errc <- err
					return
				}
				if d.Tag != uint64(i+1) || d.Status != StatusOK {
					errc <- fmt.Errorf("response %d: %+v", i, d)
					return
				}
				s.Responses.Release(d.Slot)
				<-inflight
			}
			errc <- nil
		}()
		for i := range n {
			inflight <- struct{}{}
			if err := peerPost(s, uint64(i+1), 64+i%512); err != nil {
				return err
			}
		}
		return <-errc

	case "unsealed":
		// A memfd that could be sealed but is not, announced as sealed.
		l, err := ComputeLayout(testConfig)
		if err != nil {
			return err
		}
		fd, err := unix.MemfdCreate("unsealed", unix.MFD_ALLOW_SEALING|unix.MFD_CLOEXEC)
		if err != nil {
			return err
		}
		if err := unix.Ftruncate(fd, int64(l.RegionSize)); err != nil {
			return err
		}
		mem, err := unix.Mmap(fd, 0, int(l.RegionSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		l.Flags = FlagMemfd
		EncodeHeader(mem, l)
		r := &Region{mem: mem, fd: fd, backend: BackendMemfd, sealed: true, layout: l}
		_, err = DialRegion(addr, r, DialOptions{})
		if !errors.Is(err, ErrUnsealed) {
			return fmt.Errorf("handshake with an unsealed memfd: %v, want ErrUnsealed", err)
		}
		say("refused: " + err.Error())
		return nil

	case "die":
		s, err := Dial(addr, DialOptions{Config: testConfig})
		if err != nil {
			return err
		}
		if err := peerPost(s, 1, 5000); err != nil {
			return err
		}
		say("posted")
		if err := hear("die"); err != nil {
			return err
		}
		// Start a second message and die before publishing it: a loaned
		// slot, half a frame, half a descriptor.
		_, buf, err := s.Requests.Loan()
		if err != nil {
			return err
		}
		copy(buf, frameBytes(2, 2000))
		raw := s.Requests.descAt(s.Requests.head)
		copy(raw[:100], bytes.Repeat([]byte{0xee}, 100))
		say("dying")
		return syscall.Kill(os.Getpid(), syscall.SIGKILL)

	case "scribble":
		s, err := Dial(addr, DialOptions{Config: testConfig})
		if err != nil {
			return err
		}
		defer s.Close()
		if err := peerPost(s, 1, 100); err != nil {
			return err
		}
		say("posted")
		if err := hear("scribble"); err != nil {
			return err
		}
		// Counters no correct peer produces, and garbage everywhere else
		// the peer may write.
		atomic.StoreUint64(s.Responses.ring.tail, 1<<40)
		atomic.StoreUint64(s.Requests.ring.head, 1000)
		for i := range s.Requests.states {
			atomic.StoreUint32(&s.Requests.states[i], 0xdeadbeef)
			atomic.StoreUint32(&s.Responses.states[i], 0xdeadbeef)
		}
		atomic.StoreUint32(s.Requests.readyWaiters, 0)
		say("scribbled")
		io.Copy(io.Discard, stdin) // stay alive until the parent is done
		return nil

	case "truncate":
		s, err := Dial(addr, DialOptions{Config: testConfig, Backend: BackendShmFile})
		if err != nil {
			return err
		}
		if err := peerPost(s, 1, 3000); err != nil {
			return err
		}
		say("posted")
		if err := hear("truncate"); err != nil {
			return err
		}
		if err := unix.Ftruncate(s.Region().Fd(), 0); err != nil {
			return err
		}
		say("truncated")
		io.Copy(io.Discard, stdin)
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

func TestMultiProcessHandshake(t *testing.T) {
	l, sink := listen(t, ServerConfig{})
	conns := acceptAsync(l)
	p := startPeer(t, "echo", l.Addr())
	c := <-conns
	if c == nil {
		t.Fatal("Accept failed")
	}
	defer c.Close()
	if got := c.Peer(); got.PID != int32(p.cmd.Process.Pid) || got.UID != uint32(os.Getuid()) {
		t.Errorf("SO_PEERCRED %+v, child pid %d uid %d", got, p.cmd.Process.Pid, os.Getuid())
	}
	if !c.Sealed() {
		t.Error("memfd region not sealed")
	}
	if m := sink.find("client connected"); !strings.Contains(m, fmt.Sprintf("pid=%d", p.cmd.Process.Pid)) {
		t.Errorf("connect log %q lacks the child's pid", m)
	}
	var req Request
	for tag := uint64(1); tag <= 3; tag++ {
		if err := c.Recv(&req); err != nil {
			t.Fatal(err)
		}
		if req.Tag != tag || !bytes.Equal(req.Payload(), frameBytes(tag, 1000*int(tag))) {
			t.Fatalf("request %d: tag %d, %d payload bytes", tag, req.Tag, len(req.Payload()))
		}
		if err := c.Respond(&req, &Response{Payload: []byte(fmt.Sprintf("sum %d", tag))}); err != nil {
			t.Fatal(err)
		}
	}
	p.wait(t)
	if err := c.Recv(&req); !errors.Is(err, ErrClosed) {
		t.Errorf("Recv after the peer exited: %v", err)
	}
}

func TestMultiProcessUnsealedRefused(t *testing.T) {
	l, sink := listen(t, ServerConfig{AllowUnsealed: false})
	conns := acceptAsync(l)
	p := startPeer(t, "unsealed", l.Addr())
	p.expect(t, "refused: shmring: region is not sealed: vig refused the region: shmring: region is not sealed: seals 0x0, want F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL (0x7); create it with memfd_create(MFD_ALLOW_SEALING) and F_ADD_SEALS")
	p.wait(t)
	l.Close()
	if c := <-conns; c != nil {
		t.Fatal("an unsealed region was accepted")
	}
	if m := sink.find("refusing client"); !strings.Contains(m, "unsealed region") || !strings.Contains(m, fmt.Sprint("pid=", p.cmd.Process.Pid)) {
		t.Errorf("refusal log %q", m)
	}
}

func TestMultiProcessPeerDiesMidMessage(t *testing.T) {
	l, sink := listen(t, ServerConfig{})
	conns := acceptAsync(l)
	p := startPeer(t, "die", l.Addr())
	c := <-conns
	if c == nil {
		t.Fatal("Accept failed")
	}
	p.expect(t, "posted")
	var req Request
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	want := frameBytes(1, 5000)
	p.say(t, "die")
	p.expect(t, "dying")
	p.cmd.Wait() // killed by its own SIGKILL
	// The half-written message is never seen; the session ends.
	var next Request
	if err := c.Recv(&next); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after the peer died: %v", err)
	}
	<-c.Done()
	// The held payload stays mapped and readable after the peer's death.
	if !bytes.Equal(req.Payload(), want) {
		t.Error("held payload changed after the peer died")
	}
	if err := c.Respond(&req, &Response{Status: StatusOK}); !errors.Is(err, ErrClosed) {
		t.Errorf("Respond to a dead peer: %v", err)
	}
	if n := c.ep.refs.Load(); n != 0 {
		t.Errorf("%d references left on the region; it should be unmapped", n)
	}
	if sink.find("peer disconnected") == "" {
		t.Error("disconnect not logged")
	}
}

func TestMultiProcessScribbledCounters(t *testing.T) {
	l, sink := listen(t, ServerConfig{})
	conns := acceptAsync(l)
	p := startPeer(t, "scribble", l.Addr())
	c := <-conns
	if c == nil {
		t.Fatal("Accept failed")
	}
	p.expect(t, "posted")
	var req Request
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	p.say(t, "scribble")
	p.expect(t, "scribbled")
	if err := c.Respond(&req, &Response{Payload: []byte("x")}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Respond with a scribbled consumer counter: %v, want ErrCorrupt", err)
	}
	if err := c.Recv(&req); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv with a scribbled producer counter: %v", err)
	}
	<-c.Done()
	if m := sink.find("disconnecting client"); !strings.Contains(m, "counter") || !strings.Contains(m, fmt.Sprint("pid=", p.cmd.Process.Pid)) {
		t.Errorf("disconnect log %q", m)
	}
}

func TestMultiProcessTruncatedRegion(t *testing.T) {
	if err := probeShmDir(); err != nil {
		t.Skip(err)
	}
	l, sink := listen(t, ServerConfig{AllowUnsealed: true})
	conns := acceptAsync(l)
	p := startPeer(t, "truncate", l.Addr())
	c := <-conns
	if c == nil {
		t.Fatal("Accept failed")
	}
	if c.Sealed() {
		t.Fatal("a /dev/shm region reports sealed")
	}
	p.expect(t, "posted")
	var req Request
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3000)
	if n, err := req.CopyPayload(buf); err != nil || n != 3000 || !bytes.Equal(buf, frameBytes(1, 3000)) {
		t.Fatalf("CopyPayload before truncation: %d, %v", n, err)
	}
	p.say(t, "truncate")
	p.expect(t, "truncated")
	// Every access now raises SIGBUS; vig must survive and quarantine.
	var next Request
	if err := c.Recv(&next); !errors.Is(err, ErrQuarantined) {
		t.Fatalf("Recv on a truncated region: %v, want ErrQuarantined", err)
	}
	if _, err := req.CopyPayload(buf); !errors.Is(err, ErrQuarantined) {
		t.Errorf("CopyPayload on a truncated region: %v", err)
	}
	<-c.Done()
	c.Release(&req)
	if m := sink.find("disconnecting client"); !strings.Contains(m, "quarantined") {
		t.Errorf("disconnect log %q", m)
	}
}

// TestGuardTruncatedPayload checks the payload path's fault guard in one
// process: the region's own fd is truncated under a live view.
func TestGuardTruncatedPayload(t *testing.T) {
	if err := probeShmDir(); err != nil {
		t.Skip(err)
	}
	r, err := CreateRegion(testConfig, BackendShmFile)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	view := r.Bytes()[r.layout.Rings[0].ArenaOff:]
	if err := r.Guard(func() error { view[0] = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(r.fd, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Guard(func() error { byteSink = view[100]; return nil }); !errors.Is(err, ErrQuarantined) {
		t.Fatalf("Guard over a truncated mapping: %v", err)
	}
	if !r.Quarantined() {
		t.Error("region not quarantined")
	}
	// A non-fault panic is not swallowed.
	defer func() {
		if recover() == nil {
			t.Error("Guard swallowed a non-fault panic")
		}
	}()
	r2, err := CreateRegion(testConfig, BackendShmFile)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	r2.Guard(func() error { panic("not a fault") })
}

var byteSink byte

// TestMultiProcessStress: no lost wake-ups across processes, with both sides
// always parking on the shared futex.
func TestMultiProcessStress(t *testing.T) {
	l, _ := listen(t, ServerConfig{Spin: SpinNever})
	conns := acceptAsync(l)
	p := startPeer(t, "stress", l.Addr())
	c := <-conns
	if c == nil {
		t.Fatal("Accept failed")
	}
	defer c.Close()
	var req Request
	for i := 0; ; i++ {
		err := c.Recv(&req)
		if errors.Is(err, ErrClosed) {
			if i != 3000 {
				t.Fatalf("session ended after %d requests", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(req.Payload(), frameBytes(req.Tag, 64+i%512)) {
			t.Fatalf("request %d payload mismatch", i)
		}
		if err := c.Respond(&req, &Response{Payload: req.Payload()[:8]}); err != nil {
			t.Fatal(err)
		}
	}
	p.wait(t)
}
