package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The metrics port against slowloris: clients that trickle their headers, hold
// kept-alive connections idle, or send oversized headers are cut off at the
// server's bounds (shortened here), while a scraper keeps being answered.
func TestMetricsPortSlowloris(t *testing.T) {
	defer func(h, i time.Duration) { metricsHeaderTimeout, metricsIdleTimeout = h, i }(metricsHeaderTimeout, metricsIdleTimeout)
	metricsHeaderTimeout, metricsIdleTimeout = 300*time.Millisecond, 300*time.Millisecond

	srv := newMetricsServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "vig_up 1\n") }))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	// closedBy reads c until the server closes it (each read bounded by a
	// generous liveness deadline); it fails if the server never does.
	closedBy := func(c net.Conn, what string) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%s: the server never closed the connection", what)
			}
		}
	}

	const n = 20
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() { // trickles a header, one byte at a time, forever
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: vig\r\n")
			stop := make(chan struct{})
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
						if _, err := c.Write([]byte("X")); err != nil {
							return
						}
					}
				}
			}()
			closedBy(c, "a client trickling its headers")
			close(stop)
		}()
		go func() { // one request, then the kept-alive connection left idle
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: vig\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("the idle client's one request: %v", err)
				return
			}
			resp.Body.Close()
			closedBy(c, "an idle kept-alive client")
		}()
	}

	// Meanwhile a scraper is answered every time.
	for i := 0; i < 10; i++ {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatalf("scrape %d during the flood: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "vig_up 1") {
			t.Fatalf("scrape %d: %q", i, b)
		}
		time.Sleep(30 * time.Millisecond)
	}

	// Oversized headers: refused with 431, not buffered.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: vig\r\nX-Big: "+strings.Repeat("a", 2*metricsMaxHeaderBytes)+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("oversized headers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversized headers: status %d, want 431", resp.StatusCode)
	}
	wg.Wait()
}
