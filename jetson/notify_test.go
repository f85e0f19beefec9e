package jetson

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// notifySocket is a Unix datagram socket standing in for systemd's notification
// socket; it returns the messages received, in order.
func notifySocket(t *testing.T) (*net.UnixConn, func(timeout time.Duration) (string, error)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	buf := make([]byte, 4096)
	return c, func(timeout time.Duration) (string, error) {
		c.SetReadDeadline(time.Now().Add(timeout))
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
}

func TestSystemdNotify(t *testing.T) {
	_, recv := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "40000") // 40 ms: pings every 20 ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	s, err := NewSystemd(nil)
	if err != nil || s == nil {
		t.Fatalf("NewSystemd = %v, %v", s, err)
	}
	if got := s.WatchdogInterval(); got != 20*time.Millisecond {
		t.Errorf("watchdog interval %v, want half of WATCHDOG_USEC (20ms)", got)
	}
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	// The deadlines below bound a hang; they make no claim about timing.
	if m, err := recv(10 * time.Second); err != nil || m != "READY=1" {
		t.Fatalf("first message %q, %v; want READY=1", m, err)
	}
	for i := 0; i < 2; i++ {
		if m, err := recv(10 * time.Second); err != nil || m != "WATCHDOG=1" {
			t.Fatalf("ping %d: %q, %v; want WATCHDOG=1", i, m, err)
		}
	}
	if err := s.Stopping(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stopping(); err != nil { // idempotent
		t.Fatal(err)
	}
	// Stopping joins the pinger before it sends STOPPING=1: any pings still queued
	// come first, STOPPING=1 is the last message and comes once.
	var last string
	var stopping int
	for {
		m, err := recv(100 * time.Millisecond)
		if err != nil {
			break
		}
		if m != "WATCHDOG=1" && m != "STOPPING=1" {
			t.Errorf("unexpected message %q", m)
		}
		if m == "STOPPING=1" {
			stopping++
		}
		last = m
	}
	if last != "STOPPING=1" || stopping != 1 {
		t.Errorf("last message %q, STOPPING=1 sent %d times; want it last and once", last, stopping)
	}
}

// A failing liveness check withholds the pings, so systemd restarts a wedged vig.
func TestSystemdWatchdogWithheld(t *testing.T) {
	_, recv := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "20000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	asked := make(chan struct{}, 100)
	s, err := NewSystemd(func() error {
		select {
		case asked <- struct{}{}:
		default:
		}
		return errors.New("scheduler wedged")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	if m, _ := recv(10 * time.Second); m != "READY=1" {
		t.Fatalf("got %q, want READY=1", m)
	}
	for i := 0; i < 3; i++ {
		<-asked
	}
	if err := s.Stopping(); err != nil {
		t.Fatal(err)
	}
	if m, err := recv(10 * time.Second); err != nil || m != "STOPPING=1" {
		t.Errorf("after 3 failed checks got %q, %v; want STOPPING=1 and no ping before it", m, err)
	}
}

func TestSystemdEnv(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if s, err := NewSystemd(nil); s != nil || err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, %v; want nil, nil", s, err)
	}
	notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "")
	if s, err := NewSystemd(nil); err != nil || s.WatchdogInterval() != 0 {
		t.Errorf("no watchdog: %v, %v", s, err)
	}
	t.Setenv("WATCHDOG_USEC", "10000000")
	t.Setenv("WATCHDOG_PID", "1") // the watchdog is meant for another process
	if s, err := NewSystemd(nil); err != nil || s.WatchdogInterval() != 0 {
		t.Errorf("watchdog for pid 1: %v, %v; want none", s, err)
	}
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if s, err := NewSystemd(nil); err != nil || s.WatchdogInterval() != 5*time.Second {
		t.Errorf("WatchdogSec=10s: %v, %v; want 5s", s, err)
	}
	t.Setenv("WATCHDOG_USEC", "ten seconds")
	if _, err := NewSystemd(nil); err == nil {
		t.Error("malformed WATCHDOG_USEC: want an error")
	}
	// A socket that nobody listens on: READY=1 fails and says where it went.
	t.Setenv("WATCHDOG_USEC", "")
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone"))
	s, err := NewSystemd(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err == nil {
		t.Error("READY=1 to a missing socket: want an error")
	}
}
