//go:build linux

package shmring

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
)

// The doorbell is rung only when the peer has announced that it sleeps: n
// requests to a vig that never sleeps (SpinForever) and a client that polls
// for its answers ring nothing; n requests each posted once vig sleeps
// (SpinNever, its waiters word set) ring exactly n times, and vig, whose
// client never sleeps, rings nothing back.
func TestDoorbellRungOnlyWhenPeerSleeps(t *testing.T) {
	const n = 50
	for _, tc := range []struct {
		name      string
		spin      Spin
		wantRings uint64
	}{{"vig spins", SpinForever, 0}, {"vig sleeps", SpinNever, n}} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, _ := pair(t, ServerConfig{Spin: tc.spin}, DialOptions{})
			served := make(chan error, 1)
			go func() {
				for {
					var req Request
					if err := c.Recv(&req); err != nil {
						served <- err
						return
					}
					if err := c.Respond(&req, &Response{Status: StatusOK}); err != nil {
						served <- err
						return
					}
				}
			}()
			for i := range n {
				if tc.spin == SpinNever {
					// Post only once vig has announced its sleep (or is about
					// to sleep: it re-checks the ring after announcing).
					for atomic.LoadUint32(s.Requests.readyWaiters) == 0 {
						runtime.Gosched()
					}
				}
				if err := s.Requests.TryPost(&Descriptor{Tag: uint64(i + 1), Slot: NoSlot, Model: "m"}); err != nil {
					t.Fatal(err)
				}
				var d Descriptor
				for {
					ok, err := s.Responses.TryNext(&d) // polls: the client never sleeps
					if err != nil {
						t.Fatal(err)
					}
					if ok {
						break
					}
					runtime.Gosched()
				}
				if d.Tag != uint64(i+1) {
					t.Fatalf("answer %d has tag %d", i+1, d.Tag)
				}
			}
			if got := s.Requests.readyBell.rang.Load(); got != tc.wantRings {
				t.Errorf("the client rang vig's doorbell %d times for %d requests, want %d", got, n, tc.wantRings)
			}
			if got := c.resp.readyBell.rang.Load() + c.reqs.spaceBell.rang.Load(); got != 0 {
				t.Errorf("vig rang the client's doorbells %d times; the client never slept", got)
			}
			s.Close()
			if err := <-served; !errors.Is(err, ErrClosed) {
				t.Errorf("vig's Recv after the client left: %v, want ErrClosed", err)
			}
		})
	}
}

// A client that rings vig's doorbell without posting, in a tight loop, only
// wakes vig to find the ring empty: vig serves what is then posted, and the
// session's end returns Recv.
func TestDoorbellRungWithoutPost(t *testing.T) {
	c, s, _ := pair(t, ServerConfig{Spin: SpinNever}, DialOptions{})
	got := make(chan error, 1)
	go func() {
		var req Request
		err := c.Recv(&req)
		if err == nil && req.Tag != 7 {
			err = errors.New("Recv returned another request")
		}
		if err == nil {
			c.Release(&req)
		}
		got <- err
	}()
	for range 10000 {
		s.Requests.readyBell.ring()
	}
	select {
	case err := <-got:
		t.Fatalf("Recv returned %v with nothing posted", err)
	default:
	}
	if err := s.Requests.TryPost(&Descriptor{Tag: 7, Slot: NoSlot, Model: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// Sessions that end, by either side, leave no descriptor behind: neither the
// socket, nor the region, nor any of the three doorbells on either side.
// (Goroutines are checked for the whole package by goleak in TestMain.)
func TestSessionsLeaveNoFds(t *testing.T) {
	count := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	l, _ := listen(t, ServerConfig{})
	before := count()
	for i := range 20 {
		type res struct {
			c   *Conn
			err error
		}
		ch := make(chan res, 1)
		go func() { c, err := l.Accept(); ch <- res{c, err} }()
		s, err := Dial(l.Addr(), DialOptions{Config: testConfig})
		if err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		// Half the sessions end from the client's side, half from vig's; the
		// other side follows when it reads the socket's end.
		first, second := func() { s.Close() }, func() { r.c.Close() }
		if i%2 == 1 {
			first, second = second, first
		}
		first()
		if i%2 == 0 {
			<-r.c.Done()
		} else {
			<-s.Done()
		}
		second()
	}
	if after := count(); after > before {
		t.Errorf("%d open descriptors after 20 sessions, %d before", after, before)
	}
}

// Each side registers with the netpoller only the doorbells it waits on: vig
// waits on request-ready and rings the other two, the client the reverse. A
// rung-only doorbell in the netpoller would take an EPOLLOUT edge each time
// the peer reads it, and wake a sleeping vig for nothing.
func TestOnlyWaitedDoorbellsArePolled(t *testing.T) {
	c, s, _ := pair(t, ServerConfig{}, DialOptions{})
	for _, b := range []struct {
		name   string
		b      *bell
		polled bool
	}{
		{"vig request-ready", c.reqs.readyBell, true},
		{"vig request-space", c.reqs.spaceBell, false},
		{"vig response-ready", c.resp.readyBell, false},
		{"client request-ready", s.Requests.readyBell, false},
		{"client request-space", s.Requests.spaceBell, true},
		{"client response-ready", s.Responses.readyBell, true},
	} {
		if got := b.b.rc != nil; got != b.polled {
			t.Errorf("%s: in the netpoller %v, want %v", b.name, got, b.polled)
		}
	}
}
