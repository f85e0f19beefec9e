package netopt

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTCPNoDelayVerified(t *testing.T) {
	var st Stats
	ln, err := Listen("tcp", "127.0.0.1:0", &st)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := st.DialAddr(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	for _, conn := range []net.Conn{c, s} {
		on, err := NoDelay(conn.(*net.TCPConn))
		if err != nil || !on {
			t.Errorf("%v: NODELAY=%v err=%v", conn.LocalAddr(), on, err)
		}
	}
	if st.TCPAccepted.Load() != 1 || st.TCPDialed.Load() != 1 || st.NoDelayVerified.Load() != 2 || st.NoDelayFailed.Load() != 0 {
		t.Errorf("stats: accepted %d dialed %d verified %d failed %d", st.TCPAccepted.Load(), st.TCPDialed.Load(), st.NoDelayVerified.Load(), st.NoDelayFailed.Load())
	}
}

// A socket on which NODELAY does not stick must be caught by reading it back.
func TestNoDelayMissingIsRefused(t *testing.T) {
	orig := setNoDelay
	t.Cleanup(func() { setNoDelay = orig })
	setNoDelay = func(tc *net.TCPConn) error {
		raw, err := tc.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		raw.Control(func(fd uintptr) { serr = setNoDelayRaw(fd, false) })
		return serr
	}
	var st Stats
	ln, err := Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Dial(context.Background(), "tcp", ln.Addr().String(), &st)
	if !errors.Is(err, ErrNoDelay) {
		t.Fatalf("Dial error = %v, want ErrNoDelay", err)
	}
	if st.NoDelayFailed.Load() != 1 || st.NoDelayVerified.Load() != 0 {
		t.Errorf("failed %d verified %d", st.NoDelayFailed.Load(), st.NoDelayVerified.Load())
	}
}

func TestUnixListener(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vig.sock")
	ln, err := Listen("unix", path, nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("mode %v, want 0660", fi.Mode().Perm())
	}
	// A live socket is never taken over.
	if _, err := Listen("unix", path, nil); err == nil {
		t.Fatal("second listener on a live socket succeeded")
	}
	ln.(*listener).Listener.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket file should remain for this test: %v", err)
	}
	// A stale one (nobody listening) is replaced.
	ln, err = Listen("unix", path, nil)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	var st Stats
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := st.DialAddr(context.Background(), "unix:"+path)
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	peer, ok := s.RemoteAddr().(UnixPeer)
	if uid, known := peer.PeerUID(); !ok || (runtime.GOOS == "linux" && (!known || uid != uint32(os.Getuid()) || peer.PID != int32(os.Getpid()))) {
		t.Errorf("peer of accepted Unix connection = %#v, want this process (uid %d pid %d)", s.RemoteAddr(), os.Getuid(), os.Getpid())
	}
	s.Close()
	c.Close()
	ln.Close()
	if st.UnixSendBuffer.Load() <= 212992 && runtime.GOOS == "linux" && readInt("/proc/sys/net/core/wmem_max") >= UnixBuffer {
		t.Errorf("Unix send buffer %d: asked for %d and the kernel allows it", st.UnixSendBuffer.Load(), UnixBuffer)
	}
	if st.UnixDialed.Load() != 1 || st.NoDelayVerified.Load() != 0 {
		t.Errorf("unix dial counted as %d, verified %d", st.UnixDialed.Load(), st.NoDelayVerified.Load())
	}
	// A regular file is never removed.
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("unix", path, nil); err == nil {
		t.Fatal("listener replaced a regular file")
	}
	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Fatal("regular file was touched")
	}
}

func TestAbstractSocket(t *testing.T) {
	ln, err := Listen("unix", "@vig-netopt-test-"+time.Now().Format("150405.000000000"), nil)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

func TestSplit(t *testing.T) {
	for in, want := range map[string][2]string{
		"unix:/tmp/a.sock":   {"unix", "/tmp/a.sock"},
		"unix:///tmp/a.sock": {"unix", "/tmp/a.sock"},
		"127.0.0.1:8001":     {"tcp", "127.0.0.1:8001"},
		"unix:@abstract":     {"unix", "@abstract"},
	} {
		n, a := Split(in)
		if n != want[0] || a != want[1] {
			t.Errorf("Split(%q) = %q %q, want %q", in, n, a, want)
		}
	}
}

func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}
