package netopt_test

import (
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/vig-edge/vig/netopt"
)

type recorder struct {
	src   **netopt.Source
	got   chan []byte
	ended chan error
}

// Ready reads once, as the loop's handlers do.
func (r recorder) Ready() {
	b := make([]byte, 64)
	n, err := (*r.src).Read(b)
	switch {
	case errors.Is(err, netopt.ErrWouldBlock):
	case err != nil:
		r.ended <- err
	default:
		r.got <- b[:n]
	}
}

// The loop delivers readiness on its own goroutine, reads never block (a Poke on
// an empty socket reads nothing), and Source.Close ends the source through the
// loop with its reads failing.
func TestPoller(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loop is epoll: Linux only")
	}
	p, err := netopt.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- p.Run() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var src *netopt.Source
	r := recorder{src: &src, got: make(chan []byte, 8), ended: make(chan error, 8)}
	h := netopt.Handler(r)
	src, err = p.Add(c, h)
	if err != nil {
		t.Fatal(err)
	}
	src.Poke() // nothing to read: no data, no error
	peer.Write([]byte("hello"))
	select {
	case b := <-r.got:
		if string(b) != "hello" {
			t.Fatalf("read %q", b)
		}
	case err := <-r.ended:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("no readiness for 5 s")
	}
	src.Close()
	select {
	case err := <-r.ended:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not reach the handler")
	}
	// The loop closed the connection: the peer sees EOF.
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("peer after Close: %v, want EOF", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Told once after Close (plus, at most, one readiness that raced the Close
	// and read after it), not again for each readiness of the shut-down socket
	// before the loop deregistered it.
	if n := len(r.ended); n > 1 {
		t.Fatalf("handler told of the close %d more times", n)
	}
}
