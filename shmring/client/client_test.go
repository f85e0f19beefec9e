package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"

	"github.com/vig-edge/vig/shmring"
)

var addrSeq atomic.Int64

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// server starts a ring listener whose single connection is served by handle
// in a goroutine; it returns the address.
func server(t testing.TB, cfg shmring.ServerConfig, handle func(c *shmring.Conn)) string {
	t.Helper()
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared-memory backend: %v", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	l, err := shmring.Listen(fmt.Sprintf("@vig-client-test-%d-%d", os.Getpid(), addrSeq.Add(1)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		handle(c)
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr()
}

// echo answers each request with its payload's length and first byte, or
// with an error status when the stream says so.
func echo(c *shmring.Conn) {
	var req shmring.Request
	for c.Recv(&req) == nil {
		res := shmring.Response{Status: shmring.StatusOK}
		if req.Stream == "late" {
			res = shmring.Response{Status: shmring.StatusDeadlineExceeded, Message: "would be stale"}
		} else {
			p := req.Payload()
			first := byte(0)
			if len(p) > 0 {
				first = p[0]
			}
			res.Payload = fmt.Appendf(nil, "%s %d %d", req.Model, len(p), first)
		}
		c.Respond(&req, &res)
	}
}

var smallConfig = shmring.Config{
	Requests:  shmring.RingConfig{Descriptors: 8, Slots: 2, SlotSize: 1 << 20},
	Responses: shmring.RingConfig{Descriptors: 4, Slots: 3, SlotSize: 4096},
}

func TestClientRoundTrip(t *testing.T) {
	addr := server(t, shmring.ServerConfig{}, echo)
	c, err := Dial(addr, Options{Config: smallConfig, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Peer().PID != int32(os.Getpid()) {
		t.Errorf("peer %+v", c.Peer())
	}
	for i := range 10 {
		f, err := c.Loan()
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Bytes()) != 1<<20 {
			t.Fatalf("frame buffer of %d bytes", len(f.Bytes()))
		}
		f.Bytes()[0] = byte(i)
		req := Request{Stream: "cam", Model: "det", Frame: uint64(i), CaptureNs: int64(i) * 1000, Len: 1000 + i,
			NumTensors: 1}
		req.Tensors[0] = shmring.Tensor{Name: "images", Datatype: "UINT8", Rank: 1, Dims: [shmring.MaxRank]int64{int64(1000 + i)}, Length: uint64(1000 + i)}
		tag, err := c.Submit(f, &req)
		if err != nil {
			t.Fatal(err)
		}
		var r Result
		if err := c.Next(&r); err != nil {
			t.Fatal(err)
		}
		if r.Tag != tag || r.Frame != uint64(i) || r.CaptureNs != int64(i)*1000 || r.Err() != nil {
			t.Fatalf("result %+v for tag %d", r.Descriptor, tag)
		}
		if got, want := string(r.Payload()), fmt.Sprintf("det %d %d", 1000+i, i); got != want {
			t.Fatalf("payload %q, want %q", got, want)
		}
		c.Release(&r)
	}
	if c.Outstanding() != 0 {
		t.Errorf("%d outstanding", c.Outstanding())
	}
}

func TestClientErrorsAndLimits(t *testing.T) {
	addr := server(t, shmring.ServerConfig{}, echo)
	c, err := Dial(addr, Options{Config: smallConfig, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A status other than OK reaches the caller as an error.
	if _, err := c.Submit(nil, &Request{Stream: "late", Model: "vlm"}); err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := c.Next(&r); err != nil {
		t.Fatal(err)
	}
	if r.Status != shmring.StatusDeadlineExceeded || r.Err() == nil || r.Payload() != nil {
		t.Fatalf("result %+v err %v", r.Descriptor, r.Err())
	}
	c.Release(&r)

	// Frames: two slots, then ErrFull; Return gives one back.
	f1, _ := c.TryLoan()
	f2, err := c.TryLoan()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLoan(); !errors.Is(err, shmring.ErrFull) {
		t.Fatalf("third loan: %v", err)
	}
	c.Return(f2)
	c.Return(f2) // double return is harmless
	if _, err := c.Submit(f2, &Request{Len: 1}); err == nil {
		t.Fatal("submitted a returned frame")
	}
	if _, err := c.Submit(f1, &Request{Len: 2 << 20}); err == nil {
		t.Fatal("submitted a length past the buffer")
	}
	c.Return(f1)

	// In flight at most min(response descriptors, response slots) = 3.
	for range 3 {
		if _, err := c.Submit(nil, &Request{Model: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Submit(nil, &Request{Model: "m"}); !errors.Is(err, ErrTooManyOutstanding) {
		t.Fatalf("fourth in flight: %v", err)
	}
	for range 3 {
		if err := c.Next(&r); err != nil {
			t.Fatal(err)
		}
		c.Release(&r)
	}
}

func TestClientSeesServerGone(t *testing.T) {
	stop := make(chan struct{})
	addr := server(t, shmring.ServerConfig{}, func(c *shmring.Conn) { <-stop })
	c, err := Dial(addr, Options{Config: smallConfig, Logger: quiet, Spin: shmring.SpinNever})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() { var r Result; errc <- c.Next(&r) }()
	close(stop) // the server closes its Conn
	if err := <-errc; !errors.Is(err, shmring.ErrClosed) {
		t.Fatalf("Next after vig left: %v", err)
	}
	<-c.Done()
	if _, err := c.Loan(); !errors.Is(err, shmring.ErrClosed) {
		t.Errorf("Loan after vig left: %v", err)
	}
}

// TestZeroAllocs: a full round trip (loan, submit, receive and answer in
// vig, result, release) allocates nothing on either side once warm.
func TestZeroAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	addr := server(t, shmring.ServerConfig{}, func(c *shmring.Conn) {
		var req shmring.Request
		res := shmring.Response{Payload: make([]byte, 64)}
		for c.Recv(&req) == nil {
			c.Respond(&req, &res)
		}
	})
	c, err := Dial(addr, Options{Config: smallConfig, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := Request{Stream: "cam", Model: "det", Len: 4096}
	var r Result
	roundTrip := func() {
		f, err := c.Loan()
		if err != nil {
			panic(err)
		}
		if _, err := c.Submit(f, &req); err != nil {
			panic(err)
		}
		if err := c.Next(&r); err != nil {
			panic(err)
		}
		c.Release(&r)
	}
	roundTrip()
	if n := testing.AllocsPerRun(1000, roundTrip); n != 0 {
		t.Errorf("%.2f allocations per round trip, want 0", n)
	}
}

func TestReadmeFlow(t *testing.T) {
	addr := server(t, shmring.ServerConfig{}, echo)
	c, err := Dial(addr, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := c.Loan()
	if err != nil {
		t.Fatal(err)
	}
	n := copy(f.Bytes(), bytes.Repeat([]byte{9}, 6_220_800))
	if _, err := c.Submit(f, &Request{Stream: "detector", Model: "det", Frame: 1, Len: n}); err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := c.Next(&r); err != nil {
		t.Fatal(err)
	}
	if string(r.Payload()) != "det 6220800 9" {
		t.Fatalf("payload %q", r.Payload())
	}
	c.Release(&r)
}
