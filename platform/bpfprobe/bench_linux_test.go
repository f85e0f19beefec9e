package bpfprobe

import (
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BenchmarkOverhead measures two syscall-heavy loops in this process,
// without and with the collector attached to it (syscalls hooked by raw
// and by classic tracepoints): getppid (the probes'
// fixed cost per syscall) and a 64-byte TCP round trip over loopback with
// NODELAY (a request through a proxy-like data path: writes, reads, NET_RX
// softirqs, wake-ups). With the collector it also reports, from the
// kernel's BPF statistics, how long the syscall programs ran per call.
//
//	go test -run '^$' -bench Overhead -benchtime 20000x -count 5 ./platform/bpfprobe
func BenchmarkOverhead(b *testing.B) {
	for _, wl := range []struct {
		name string
		run  func(b *testing.B)
	}{
		{"getppid", func(b *testing.B) {
			for range b.N {
				syscall.Getppid()
			}
		}},
		{"tcp-rtt-64B", tcpRoundTrips},
	} {
		b.Run(wl.name+"/plain", wl.run)
		for _, probe := range []string{"raw_tracepoint", "tracepoint"} {
			b.Run(wl.name+"/"+probe, func(b *testing.B) {
				old := rawSyscalls
				rawSyscalls = probe == "raw_tracepoint"
				defer func() { rawSyscalls = old }()
				overhead(b, wl.run)
			})
		}
	}
}

// overhead runs a workload with the collector attached to this process.
func overhead(b *testing.B, run func(b *testing.B)) {
	if err := Available(); err != nil {
		b.Skip(err)
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Logf("no BPF run-time statistics: %v", err)
	} else {
		defer stats.Close()
	}
	c, err := Start(Options{PID: os.Getpid()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ResetTimer()
	run(b)
	b.StopTimer()
	if stats == nil {
		return
	}
	// progs[0] and [1] are sys_enter and sys_exit.
	var rt time.Duration
	var runs uint64
	for _, p := range c.progs[:2] {
		s, err := p.Stats()
		if err != nil {
			b.Fatal(err)
		}
		rt += s.Runtime
		runs += s.RunCount
	}
	if runs > 0 {
		b.ReportMetric(float64(rt.Nanoseconds())/float64(runs)*2, "ns-bpf/syscall")
	}
}

// tcpRoundTrips sends b.N 64-byte requests over loopback TCP to an echo
// goroutine and waits for each answer.
func tcpRoundTrips(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}
