package ringfront_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/shmring/client"
)

// BenchmarkRing measures one frame from a ring client through vig (ring frontend,
// governor, gateway) to the mock backend over loopback gRPC and back, on each
// data path. Client, vig and backend share the process, so allocs/op counts all
// three (grpc-go's client and the mock's protobuf decoding included).
func BenchmarkRing(b *testing.B) {
	for _, p := range []struct {
		name    string
		backend shmring.Backend
	}{{"copy-memfd", shmring.BackendMemfd}, {"by_reference", shmring.BackendShmKey}} {
		for _, sz := range []struct {
			name string
			n    int
		}{{"0B", 0}, {"1.2MB", 1_200_000}} {
			b.Run(p.name+"/"+sz.name, func(b *testing.B) {
				r := newRigB(b, shmring.ServerConfig{AllowShmKey: true})
				c, err := client.Dial(r.addr, client.Options{Backend: p.backend})
				if err != nil {
					b.Skip(err)
				}
				defer c.Close()
				frame := uint64(0)
				one := func() {
					frame++
					f, err := c.Loan()
					if err != nil {
						b.Fatal(err)
					}
					if _, err := c.Submit(f, &client.Request{Stream: "cam", Model: "det", Frame: frame, Len: sz.n}); err != nil {
						b.Fatal(err)
					}
					var res client.Result
					if err := c.Next(&res); err != nil {
						b.Fatal(err)
					}
					if err := res.Err(); err != nil {
						b.Fatal(err)
					}
					c.Release(&res)
				}
				one() // connect and warm up
				b.ReportAllocs()
				b.SetBytes(int64(sz.n))
				for b.Loop() {
					one()
				}
			})
		}
	}
}

// BenchmarkRingBatchKey measures a ring frame of shape [1, n] through vig to
// the mock backend, alone, with its model batching (max_batch 8: its message
// is built on arrival and its batch key read, so that it may join a batch)
// and without (max_batch 1: built at dispatch). The difference is what a ring
// frame pays to be able to join.
func BenchmarkRingBatchKey(b *testing.B) {
	for _, mb := range []int{1, 8} {
		for _, n := range []int{1024, 150_000, 1_200_000} {
			b.Run(fmt.Sprintf("max_batch=%d/%dB", mb, n), func(b *testing.B) {
				rigConfig = strings.Replace(testConfig, "det: {exec_ms: 1}", fmt.Sprintf("det: {exec_ms: 1, max_batch: %d}", mb), 1)
				defer func() { rigConfig = testConfig }()
				r := newRigB(b, shmring.ServerConfig{})
				c, err := client.Dial(r.addr, client.Options{})
				if err != nil {
					b.Skip(err)
				}
				defer c.Close()
				frame := uint64(0)
				one := func() {
					frame++
					f, err := c.Loan()
					if err != nil {
						b.Fatal(err)
					}
					req := client.Request{Stream: "cam", Model: "det", Frame: frame, Len: n, NumTensors: 1}
					req.Tensors[0] = shmring.Tensor{Name: "IN", Datatype: "UINT8", Rank: 2, Dims: [shmring.MaxRank]int64{1, int64(n)}, Length: uint64(n)}
					if _, err := c.Submit(f, &req); err != nil {
						b.Fatal(err)
					}
					var res client.Result
					if err := c.Next(&res); err != nil {
						b.Fatal(err)
					}
					if err := res.Err(); err != nil {
						b.Fatal(err)
					}
					c.Release(&res)
				}
				one() // connect and warm up
				b.ReportAllocs()
				b.SetBytes(int64(n))
				for b.Loop() {
					one()
				}
			})
		}
	}
}
