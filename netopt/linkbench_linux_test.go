package netopt

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/vishvananda/netns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"github.com/vig-edge/vig/proto/inference"
)

// BenchmarkBackendLink models a backend across a USB 2.0 tether: two network
// namespaces joined by a veth pair whose both directions a token bucket (tc tbf)
// limits to USBTetherRate, a Triton-protocol server in one namespace
// and a client in the other, sending one 1.2 MB frame per ModelInfer: a camera
// frame (smooth gradients with two bits of sensor noise per byte) and a
// segmentation-mask-like frame (large uniform regions). It compares each as is
// with the gRPC "gzip" encoding (done by klauspost/compress, registered in place
// of grpc-go's), reporting wire bytes per request beside the time. Needs root, ip and tc; run it with
//
//	sudo make bench-link      (go test -run '^$' -bench BackendLink ./netopt)
//
// Only the test's own namespaces' addresses (192.0.2.0/24) are used.
func BenchmarkBackendLink(b *testing.B) {
	link := newShapedLink(b)
	encoding.RegisterCompressor(&klauspostGzip{level: gzip.BestSpeed})

	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	inference.RegisterGRPCInferenceServiceServer(srv, sink{})
	ln := link.listen(b, "192.0.2.2:0")
	go srv.Serve(ln)
	b.Cleanup(srv.Stop)

	var wire atomic.Int64
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := link.dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, n: &wire}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	client := inference.NewGRPCInferenceServiceClient(cc)

	for _, c := range []struct {
		name  string
		frame []byte
		opts  []grpc.CallOption
	}{
		{"camera/identity", cameraFrame(640, 640), nil},
		{"camera/gzip", cameraFrame(640, 640), []grpc.CallOption{grpc.UseCompressor("gzip")}},
		{"mask/identity", maskFrame(640, 640), nil},
		{"mask/gzip", maskFrame(640, 640), []grpc.CallOption{grpc.UseCompressor("gzip")}},
	} {
		frame := c.frame
		req := &inference.ModelInferRequest{ModelName: "detector", RawInputContents: [][]byte{frame}}
		b.Run(c.name, func(b *testing.B) {
			if _, err := client.ModelInfer(context.Background(), req, c.opts...); err != nil { // warm the connection and windows
				b.Fatal(err)
			}
			wire.Store(0)
			b.SetBytes(int64(len(frame)))
			b.ResetTimer()
			for b.Loop() {
				r, err := client.ModelInfer(context.Background(), req, c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				if r.Id != fmt.Sprint(len(frame)) {
					b.Fatalf("server received %s bytes, want %d", r.Id, len(frame))
				}
			}
			b.ReportMetric(float64(wire.Load())/float64(b.N), "wire-B/op")
		})
	}
}

// USBTetherRate is what a USB 2.0 tether (RNDIS/NCM) carries in practice: the bus
// signals 480 Mbit/s, protocol overhead leaves about 280.
const USBTetherRate = "280mbit"

// sink answers each request with the size of its first raw input.
type sink struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

func (sink) ModelInfer(_ context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	n := 0
	if len(r.RawInputContents) > 0 {
		n = len(r.RawInputContents[0])
	}
	return &inference.ModelInferResponse{ModelName: r.ModelName, Id: fmt.Sprint(n)}, nil
}

// cameraFrame is a w×h RGB frame that compresses like a raw camera image: smooth
// gradients with two bits of sensor noise per byte. Deflate gets it to about 75 %:
// the noise is incompressible.
func cameraFrame(w, h int) []byte {
	f := make([]byte, w*h*3)
	seed := uint32(1)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			seed = seed*1664525 + 1013904223
			noise := byte(seed>>29) & 3
			i := (y*w + x) * 3
			f[i], f[i+1], f[i+2] = byte(x/3)+noise, byte(y/3)+noise, byte((x+y)/5)+noise
		}
	}
	return f
}

// maskFrame is a w×h RGB frame of a few uniform regions, like a segmentation mask
// or a mostly empty scene: deflate shrinks it to a few percent.
func maskFrame(w, h int) []byte {
	f := make([]byte, w*h*3)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := byte((x/160 + y/128) % 4 * 60)
			i := (y*w + x) * 3
			f[i], f[i+1], f[i+2] = c, c/2, 255-c
		}
	}
	return f
}

// klauspostGzip is grpc's "gzip" encoding done by klauspost/compress.
type klauspostGzip struct {
	level   int
	writers sync.Pool
}

func (*klauspostGzip) Name() string { return "gzip" }

func (g *klauspostGzip) Compress(w io.Writer) (io.WriteCloser, error) {
	if z, ok := g.writers.Get().(*gzip.Writer); ok {
		z.Reset(w)
		return &pooledWriter{Writer: z, pool: &g.writers}, nil
	}
	z, err := gzip.NewWriterLevel(w, g.level)
	if err != nil {
		return nil, err
	}
	return &pooledWriter{Writer: z, pool: &g.writers}, nil
}

func (*klauspostGzip) Decompress(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }

type pooledWriter struct {
	*gzip.Writer
	pool *sync.Pool
}

func (w *pooledWriter) Close() error {
	err := w.Writer.Close()
	w.pool.Put(w.Writer)
	return err
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// shapedLink is two namespaces, client (a, 192.0.2.1) and server (b, 192.0.2.2),
// joined by a veth pair shaped in both directions.
type shapedLink struct{ a, b netns.NsHandle }

func newShapedLink(tb testing.TB) *shapedLink {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to create network namespaces (sudo make bench-link)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("needs %s (apt-get install -y iproute2)", tool)
		}
	}
	a, b := fmt.Sprintf("vig-lb-a-%d", os.Getpid()), fmt.Sprintf("vig-lb-b-%d", os.Getpid())
	run := func(args ...string) {
		tb.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			tb.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "add", a).CombinedOutput(); err != nil {
		tb.Skipf("cannot create a network namespace here: %v: %s", err, out)
	}
	tb.Cleanup(func() { exec.Command("ip", "netns", "del", a).Run() })
	run("ip", "netns", "add", b)
	tb.Cleanup(func() { exec.Command("ip", "netns", "del", b).Run() })
	run("ip", "link", "add", "usb0", "netns", a, "type", "veth", "peer", "name", "rndis0", "netns", b)
	for _, s := range []struct{ ns, dev, addr string }{{a, "usb0", "192.0.2.1/24"}, {b, "rndis0", "192.0.2.2/24"}} {
		run("ip", "-n", s.ns, "link", "set", "lo", "up")
		run("ip", "-n", s.ns, "addr", "add", s.addr, "dev", s.dev)
		run("ip", "-n", s.ns, "link", "set", s.dev, "up")
		// tbf rather than netem: netem is a module many kernels (and this CI's) lack.
		run("ip", "netns", "exec", s.ns, "tc", "qdisc", "add", "dev", s.dev, "root", "tbf", "rate", USBTetherRate, "burst", "64kb", "latency", "50ms")
	}
	l := &shapedLink{}
	var err error
	if l.a, err = netns.GetFromName(a); err != nil {
		tb.Fatal(err)
	}
	if l.b, err = netns.GetFromName(b); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.a.Close(); l.b.Close() })
	return l
}

// in runs f on a thread moved into ns; sockets f creates stay in ns.
func in(ns netns.NsHandle, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		return err
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// This thread cannot go back: let it die with the goroutine, not serve others.
		runtime.LockOSThread()
		return fmt.Errorf("restoring the network namespace: %w", err)
	}
	return ferr
}

func (l *shapedLink) listen(tb testing.TB, addr string) net.Listener {
	var ln net.Listener
	if err := in(l.b, func() (err error) { ln, err = Listen("tcp", addr, nil); return err }); err != nil {
		tb.Fatal(err)
	}
	return ln
}

func (l *shapedLink) dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := in(l.a, func() (err error) { c, err = Dial(ctx, "tcp", addr, nil); return err })
	return c, err
}
