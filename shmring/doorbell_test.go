//go:build linux

package shmring

import (
	"errors"
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
