package ringback

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/wire"
)

// serveRuntime serves a ring at a new address as a test's runtime: serve runs
// for each session accepted, on a goroutine of its own, and the session is
// closed when it returns. At the test's end the listener closes and every
// session's serve has returned.
func serveRuntime(t *testing.T, serve func(c *shmring.Conn)) string {
	t.Helper()
	region, err := shmring.Probe()
	if err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	ln, err := shmring.Listen(ringAddr(), shmring.ServerConfig{AllowUnsealed: region == shmring.BackendShmFile})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr()
}

// slotKeeper serves a ring as a runtime that answers each request at once but
// keeps its payload slot until release is closed; after that it answers
// normally, releasing each slot as it answers.
func slotKeeper(t *testing.T) (addr string, release chan struct{}) {
	t.Helper()
	release = make(chan struct{})
	addr = serveRuntime(t, func(c *shmring.Conn) {
		var mu sync.Mutex
		var kept []*shmring.Request
		released := false
		stop := make(chan struct{})
		defer close(stop)
		go func() { // gives the kept slots back once release closes
			select {
			case <-release:
			case <-stop:
				return
			}
			mu.Lock()
			for _, k := range kept {
				c.Release(k)
			}
			kept, released = nil, true
			mu.Unlock()
		}()
		for {
			req := new(shmring.Request)
			if err := c.Recv(req); err != nil {
				return
			}
			mu.Lock()
			if released {
				mu.Unlock()
				c.Respond(req, &shmring.Response{Status: shmring.StatusOK, Payload: []byte("ok")})
				continue
			}
			// The answer goes out under the request's tag; the slot stays
			// the runtime's.
			var answer shmring.Request
			answer.Descriptor = req.Descriptor
			c.Respond(&answer, &shmring.Response{Status: shmring.StatusOK, Payload: []byte("ok")})
			kept = append(kept, req)
			mu.Unlock()
		}
	})
	return addr, release
}

// While the poster waits for the runtime to return a payload slot, other calls
// go on: one that finds room (and no slot) queues behind it at once instead of
// waiting with it. The poster used to wait holding the session's send lock,
// so such a call's Start — a client connection's reader, or one of vig's ring
// sessions — blocked until the runtime gave a slot back, however long.
func TestPosterWaitsWithoutTheSendLock(t *testing.T) {
	addr, release := slotKeeper(t)
	b := dialUp(t, addr, Options{Config: shmring.Config{
		Requests:  shmring.RingConfig{Descriptors: 8, Slots: 2, SlotSize: 64 << 10},
		Responses: shmring.RingConfig{Descriptors: 8, Slots: 2, SlotSize: 4096},
	}})
	s := b.cur.Load()
	start := func(frame uint64) (started, done chan struct{}, f *syncFinish) {
		msg := mem.BufferSlice{mem.SliceBuffer(marshal(t, request("m", frame, pattern(1000, byte(frame)))))}
		var h wire.InferHeader
		if err := h.ParseInfer(msg); err != nil {
			t.Fatal(err)
		}
		f = &syncFinish{done: make(chan struct{})}
		started = make(chan struct{})
		go func() {
			b.start(job{f: f, h: &h, msg: msg})
			close(started)
		}()
		return started, f.done, f
	}
	wait := func(what string, ch chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second): // a hang guard
			t.Fatalf("%s: not within 5 s", what)
		}
	}
	// Two calls are answered; the runtime keeps both slots.
	for frame := range uint64(2) {
		_, done, f := start(frame)
		wait("an answer while the runtime keeps the slots", done)
		if f.err != nil {
			t.Fatalf("call %d: %v", frame, f.err)
		}
		f.out.Free()
	}
	// The next call finds room and no slot: the poster takes it, and waits.
	_, doneB, fB := start(2)
	waitFor(t, "the poster to wait for a slot", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight == 1 && len(s.waitq) == 0
	})
	time.Sleep(20 * time.Millisecond) // let it reach its wait (the test passes either way on the new code)
	startedC, doneC, fC := start(3)
	wait("Start of a call while the poster waits for a slot", startedC)

	close(release)
	for _, c := range []struct {
		name string
		done chan struct{}
		f    *syncFinish
	}{{"the poster's call", doneB, fB}, {"the call queued behind it", doneC, fC}} {
		wait(c.name, c.done)
		if c.f.err != nil {
			t.Errorf("%s: %v", c.name, c.f.err)
		} else {
			c.f.out.Free()
		}
	}
}
