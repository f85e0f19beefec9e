package restfront_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/gateway/restfront"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
)

const testConfig = `
backend: {slots: 1, stats_interval_ms: -1}
models:
  det: {exec_ms: 1}
  cam_detector: {exec_ms: 1}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 5000}
`

// countingConn counts the bytes vig writes to the backend connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// maxControlBytes bounds what vig may write to the backend connection that is
// not a request: HTTP/2 control frames (a SETTINGS or PING acknowledgement is 9
// bytes). Any forwarded RPC writes more: its HEADERS frame alone carries the
// method path (40+ bytes).
const maxControlBytes = 32

// rig is vig (governor, gateway with its gRPC frontend, REST frontend) in front
// of a backend: the mock, or the gRPC server register sets up.
type rig struct {
	base     string // the REST frontend's http://host:port
	addr     string // its host:port
	grpcAddr string // the gRPC frontend's
	gov      *gateway.Governor
	gw       *gateway.Gateway
	mock     *mockbackend.Running
	toBack   atomic.Int64
	accepted atomic.Int64
	client   *http.Client
	fe       *restfront.Frontend
}

func newRig(t *testing.T, opts restfront.Options, register func(*grpc.Server)) *rig {
	t.Helper()
	cfg, err := config.Parse("rest.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	return newRigWith(t, cfg, opts, register)
}

// newRigWith is newRig for a config of the test's own.
func newRigWith(t *testing.T, cfg *config.Config, opts restfront.Options, register func(*grpc.Server)) *rig {
	t.Helper()
	r := &rig{}
	if register == nil {
		mcfg := mockbackend.FromConfig(cfg)
		mcfg.Spin = -1 // tests assert no timing: skip the calibration
		mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mcfg, gateway.ServerOptions(cfg.GRPC), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mb.Stop() })
		r.mock = mb
		cfg.Backend.Address = mb.Addr()
	} else {
		srv := grpc.NewServer(gateway.ServerOptions(cfg.GRPC)...)
		register(srv)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
		cfg.Backend.Address = ln.Addr().String()
	}
	gov, err := gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic, WallDiff: clock.WallOffset})
	if err != nil {
		t.Fatal(err)
	}
	r.gov = gov
	var st netopt.Stats
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := st.DialAddr(ctx, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &r.toBack}, nil
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: dial, Admit: gov})
	if err != nil {
		t.Fatal(err)
	}
	r.gw = gw
	// The backend connection is set up (its SETTINGS exchanged) before a test
	// counts what vig writes to it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := gw.Invoke(ctx, "/inference.GRPCInferenceService/ServerLive", nil); err != nil && register == nil {
		t.Fatalf("backend: %v", err)
	}
	// vig reads the backend's model configuration when it connects: done
	// before a test counts what vig writes to the backend.
	for until := time.Now().Add(5 * time.Second); gw.ServerModelReads() == 0 && time.Now().Before(until); {
		time.Sleep(time.Millisecond)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(gln)
	r.grpcAddr = gln.Addr().String()
	t.Cleanup(gw.Stop)

	if opts.MaxBody == 0 {
		opts.MaxBody = int64(cfg.GRPC.MaxMessageMiB) << 20
	}
	fe := restfront.New(gw, opts)
	r.fe = fe
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- fe.Serve(countingListener{ln, &r.accepted}) }()
	t.Cleanup(func() {
		fe.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	r.addr = ln.Addr().String()
	r.base = "http://" + r.addr
	tr := &http.Transport{DisableCompression: true, ExpectContinueTimeout: 30 * time.Second}
	r.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return r
}

// grpcClient is a Triton gRPC client of vig's gRPC frontend.
func (r *rig) grpcClient(t *testing.T) pb.GRPCInferenceServiceClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewGRPCInferenceServiceClient(cc)
}

// reply is an HTTP answer.
type reply struct {
	code   int
	header http.Header
	body   []byte
}

func (r *rig) do(t *testing.T, method, path string, body []byte, header map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, r.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// binaryBody is a request with the binary tensor data extension: the JSON
// header, then each tensor's bytes.
func binaryBody(t testing.TB, hdr any, tensors ...[]byte) ([]byte, map[string]string) {
	j, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte(nil), j...)
	for _, b := range tensors {
		body = append(body, b...)
	}
	return body, map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(j)), "Content-Type": "application/octet-stream"}
}

// splitAnswer splits a binary answer into its JSON header and binary part.
func splitAnswer(t *testing.T, rep reply) (map[string]any, []byte) {
	t.Helper()
	if rep.code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rep.code, rep.body)
	}
	n := len(rep.body)
	if h := rep.header.Get("Inference-Header-Content-Length"); h != "" {
		var err error
		if n, err = strconv.Atoi(h); err != nil || n > len(rep.body) {
			t.Fatalf("Inference-Header-Content-Length %q for a %d-byte body", h, len(rep.body))
		}
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(rep.body[:n]))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("answer header %q: %v", rep.body[:n], err)
	}
	return m, rep.body[n:]
}

// output0 is the mock's OUTPUT0 for a frame: INT64 [digest, frame].
func output0(digest, frame uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, digest)
	return binary.LittleEndian.AppendUint64(b, frame)
}

func frameBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func id(frame uint64) string { return fmt.Sprintf("cam#%d", frame) }

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
