package ringfront_test

import (
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
