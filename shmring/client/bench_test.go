//go:build linux

package client

import (
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/shmring"
)

// Payload sizes from a 64-byte feature vector to a 1920×1080 RGB frame.
var benchSizes = []struct {
	name string
	n    int
}{
	{"64B", 64}, {"4KiB", 4096}, {"150KB", 150_000}, {"1.2MB", 1_200_000}, {"6.2MB", 6_220_800},
}

var benchConfig = shmring.Config{
	Requests:  shmring.RingConfig{Descriptors: 4, Slots: 2, SlotSize: 8 << 20},
	Responses: shmring.RingConfig{Descriptors: 4, Slots: 2, SlotSize: 4096},
}

// BenchmarkHandoff measures a ring round trip: the sensor loans a frame
// buffer, writes its first and last byte, submits; vig receives it, reads
// those bytes in place and answers 64 bytes; the sensor reads the result and
// releases it. ns/handoff is half the round trip: the one-way hand-off cost.
// Nothing is copied, so it should not grow with the frame size.
//
// "spin" never sleeps (both sides poll); "parked" always sleeps on the doorbell
// (every message is a wake-up); "adaptive" is the default a deployment uses.
func BenchmarkHandoff(b *testing.B) {
	for _, mode := range []struct {
		name string
		spin shmring.Spin
	}{{"spin", shmring.SpinForever}, {"adaptive", shmring.SpinAdaptive}, {"parked", shmring.SpinNever}} {
		for _, sz := range benchSizes {
			b.Run(mode.name+"/"+sz.name, func(b *testing.B) {
				benchHandoff(b, mode.spin, sz.n)
			})
		}
	}
}

func benchHandoff(b *testing.B, spin shmring.Spin, n int) {
	addr := server(b, shmring.ServerConfig{Spin: spin}, func(c *shmring.Conn) {
		var req shmring.Request
		res := shmring.Response{Payload: make([]byte, 64)}
		var sink byte
		for c.Recv(&req) == nil {
			p := req.Payload()
			sink += p[0] + p[len(p)-1]
			res.Payload[0] = sink
			c.Respond(&req, &res)
		}
	})
	c, err := Dial(addr, Options{Config: benchConfig, Spin: spin, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := Request{Stream: "cam", Model: "det", Len: n}
	var r Result
	b.ReportAllocs()
	b.SetBytes(int64(n))
	w0, k0 := shmring.DoorbellCalls()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := c.Loan()
		if err != nil {
			b.Fatal(err)
		}
		buf := f.Bytes()
		buf[0], buf[n-1] = byte(i), byte(i>>8)
		req.Frame = uint64(i)
		if _, err := c.Submit(f, &req); err != nil {
			b.Fatal(err)
		}
		if err := c.Next(&r); err != nil {
			b.Fatal(err)
		}
		c.Release(&r)
	}
	b.StopTimer()
	w1, k1 := shmring.DoorbellCalls()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/handoff")
	// Both ends run in this process, so this is the doorbell cost (waits + rings) of a round
	// trip for vig and the sensor together.
	b.ReportMetric(float64(w1-w0+k1-k0)/float64(b.N), "doorbell/roundtrip")
}

// BenchmarkUnixSocket is the baseline: the same exchange over a Unix stream
// socket pair, the frame copied through the kernel and a 64-byte answer back.
func BenchmarkUnixSocket(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) { benchUnixSocket(b, sz.n) })
	}
}

func socketPair(b *testing.B) (net.Conn, net.Conn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

func benchUnixSocket(b *testing.B, n int) {
	cl, sv := socketPair(b)
	defer cl.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sv.Close()
		in := make([]byte, n)
		out := make([]byte, 64)
		for {
			if _, err := io.ReadFull(sv, in); err != nil {
				return
			}
			out[0] = in[0] + in[n-1]
			if _, err := sv.Write(out); err != nil {
				return
			}
		}
	}()
	frame := make([]byte, n)
	res := make([]byte, 64)
	b.ReportAllocs()
	b.SetBytes(int64(n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		frame[0], frame[n-1] = byte(i), byte(i>>8)
		if _, err := cl.Write(frame); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(cl, res); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/handoff")
	cl.Close()
	<-done
}

// BenchmarkStream is steady load: the sensor keeps four frames in flight,
// submitting a new one as each result arrives, so vig always finds work
// queued. doorbell/msg is the number of doorbell waits and rings per message, both sides
// together; with the adaptive wait it should be near zero.
func BenchmarkStream(b *testing.B) {
	for _, mode := range []struct {
		name string
		spin shmring.Spin
	}{{"adaptive", shmring.SpinAdaptive}, {"parked", shmring.SpinNever}} {
		b.Run(mode.name+"/1.2MB", func(b *testing.B) { benchStream(b, mode.spin, 1_200_000) })
	}
}

func benchStream(b *testing.B, spin shmring.Spin, n int) {
	addr := server(b, shmring.ServerConfig{Spin: spin}, func(c *shmring.Conn) {
		var req shmring.Request
		res := shmring.Response{Payload: make([]byte, 64)}
		for c.Recv(&req) == nil {
			p := req.Payload()
			res.Payload[0] = p[0] + p[len(p)-1]
			c.Respond(&req, &res)
		}
	})
	const depth = 4
	cfg := shmring.Config{
		Requests:  shmring.RingConfig{Descriptors: 8, Slots: depth, SlotSize: 2 << 20},
		Responses: shmring.RingConfig{Descriptors: 8, Slots: depth, SlotSize: 4096},
	}
	c, err := Dial(addr, Options{Config: cfg, Spin: spin, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := Request{Stream: "cam", Model: "det", Len: n}
	var r Result
	submit := func(i int) {
		f, err := c.Loan()
		if err != nil {
			b.Fatal(err)
		}
		f.Bytes()[0], f.Bytes()[n-1] = byte(i), 1
		req.Frame = uint64(i)
		if _, err := c.Submit(f, &req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(n))
	w0, k0 := shmring.DoorbellCalls()
	b.ResetTimer()
	sent := 0
	for ; sent < min(depth, b.N); sent++ {
		submit(sent)
	}
	for range b.N {
		if err := c.Next(&r); err != nil {
			b.Fatal(err)
		}
		c.Release(&r)
		if sent < b.N {
			submit(sent)
			sent++
		}
	}
	b.StopTimer()
	w1, k1 := shmring.DoorbellCalls()
	b.ReportMetric(float64(w1-w0+k1-k0)/float64(b.N), "doorbell/msg")
}
