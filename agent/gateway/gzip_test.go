package gateway_test

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	pb "github.com/vig-edge/vig/proto/inference"
)

type countConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// backend.compression: gzip sends inference requests gzip-encoded (a compressible
// 1.2 MB frame crosses the link in a fraction of its size), decodes the backend's
// gzip answers, and the answer is the same as without compression.
func TestBackendGzip(t *testing.T) {
	for _, comp := range []string{"none", "gzip"} {
		t.Run(comp, func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.Backend.Compression = comp
			mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mockbackend.FromConfig(cfg), gateway.ServerOptions(cfg.GRPC), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mb.Stop() })
			cfg.Backend.Address = mb.Addr()
			var sent atomic.Int64
			var st netopt.Stats
			dial := func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := st.DialAddr(ctx, addr)
				if err != nil {
					return nil, err
				}
				return countConn{c, &sent}, nil
			}
			gw, err := gateway.New(gateway.Options{Config: cfg, Dial: dial})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gw.Stop)
			ln, err := netopt.Listen("tcp", "127.0.0.1:0", &st)
			if err != nil {
				t.Fatal(err)
			}
			go gw.Serve(ln)
			e := &env{cfg: cfg, tcp: ln.Addr().String()}
			waitBackendReady(t, e)
			via := pb.NewGRPCInferenceServiceClient(e.dial(t, ln.Addr().String()))
			direct := pb.NewGRPCInferenceServiceClient(e.dial(t, mb.Addr()))
			req := inferRequest("detector", mockbackend.FrameID("cam0", 3), 1_200_000)
			before := sent.Load()
			got, err := via.ModelInfer(ctxT(t), req)
			if err != nil {
				t.Fatal(err)
			}
			n := sent.Load() - before
			want, err := direct.ModelInfer(ctxT(t), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.RawOutputContents) != 1 || !bytes.Equal(got.RawOutputContents[0], want.RawOutputContents[0]) {
				t.Fatalf("answer through vig %x, direct %x", got.RawOutputContents, want.RawOutputContents)
			}
			switch {
			case comp == "gzip" && n > 1_200_000/10:
				t.Errorf("gzip: %d bytes to the backend for a compressible 1.2 MB frame", n)
			case comp == "none" && n < 1_200_000:
				t.Errorf("none: %d bytes to the backend for a 1.2 MB frame", n)
			}
			t.Logf("%s: %d bytes to the backend", comp, n)
		})
	}
}
