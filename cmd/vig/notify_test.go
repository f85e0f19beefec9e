package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
)

// vig serve under a (fake) systemd: READY=1 once the listeners accept, watchdog
// pings while serving, STOPPING=1 when the drain starts and nothing after it.
func TestServeNotifiesSystemd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "20000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	recv := func(timeout time.Duration) (string, error) {
		buf := make([]byte, 512)
		sock.SetReadDeadline(time.Now().Add(timeout))
		n, err := sock.Read(buf)
		return string(buf[:n]), err
	}

	cfg, err := config.Parse("notify.yaml", []byte(`
listen: {grpc: "127.0.0.1:0", metrics: "off"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models: {det: {exec_ms: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil) }()
	var addrs map[string]string
	select {
	case addrs = <-ready:
	case err := <-served:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	if m, err := recv(10 * time.Second); err != nil || m != "READY=1" {
		t.Fatalf("first notification %q, %v; want READY=1", m, err)
	}
	c, err := net.Dial("tcp", addrs["grpc"])
	if err != nil {
		t.Fatalf("READY=1 sent but the listener does not accept: %v", err)
	}
	c.Close()
	if m, err := recv(10 * time.Second); err != nil || m != "WATCHDOG=1" {
		t.Fatalf("second notification %q, %v; want WATCHDOG=1", m, err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	var last string
	for {
		m, err := recv(100 * time.Millisecond)
		if err != nil {
			break
		}
		last = m
	}
	if last != "STOPPING=1" {
		t.Errorf("last notification %q, want STOPPING=1", last)
	}
}
