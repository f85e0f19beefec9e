package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// env is vig in front of a real mock backend, over real sockets.
type env struct {
	cfg      *config.Config
	gw       *gateway.Gateway
	reg      *metrics.Registry
	sockets  *netopt.Stats
	tcp      string // vig's TCP address
	unix     string // vig's Unix socket ("unix:PATH")
	backend  *mockbackend.Running
	direct   pb.GRPCInferenceServiceClient // straight to the backend
	clientSt netopt.Stats                  // the test clients' own sockets
}

func testConfig(t *testing.T, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(`
listen: {metrics: "off"}
backend: {slots: 2, seed: 7}
models:
  detector: {exec_ms: 1}
  pose: {exec_ms: 2}
`+extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startEnv(t *testing.T, cfg *config.Config, withBackend bool) *env {
	t.Helper()
	return startEnvDial(t, cfg, withBackend, nil)
}

// dialFunc is how vig dials its backend.
type dialFunc = func(ctx context.Context, addr string) (net.Conn, error)

// startEnvDial is startEnv whose gateway dials its backend through wrap
// (nil: directly).
func startEnvDial(t *testing.T, cfg *config.Config, withBackend bool, wrap func(dialFunc) dialFunc) *env {
	t.Helper()
	e := &env{cfg: cfg, reg: metrics.New(), sockets: new(netopt.Stats)}
	e.reg.Sockets(e.sockets)
	if withBackend {
		mb, err := mockbackend.Start(context.Background(), "127.0.0.1:0", mockbackend.FromConfig(cfg), gateway.ServerOptions(cfg.GRPC), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mb.Stop() })
		e.backend = mb
		cfg.Backend.Address = mb.Addr()
		e.direct = pb.NewGRPCInferenceServiceClient(e.dial(t, mb.Addr()))
	}
	dial := dialFunc(e.sockets.DialAddr)
	if wrap != nil {
		dial = wrap(dial)
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Dial: dial, Metrics: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	tcp, err := netopt.Listen("tcp", "127.0.0.1:0", e.sockets)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "vig.sock")
	uds, err := netopt.Listen("unix", sock, e.sockets)
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(tcp)
	go gw.Serve(uds)
	t.Cleanup(gw.Stop)
	e.tcp, e.unix = tcp.Addr().String(), "unix:"+sock
	if withBackend {
		// vig answers UNAVAILABLE until its backend connection is up, which on
		// a loaded machine can be after the test's first call.
		waitBackendReady(t, e)
	}
	return e
}

func (e *env) dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append(gateway.DialOptions(e.cfg.GRPC),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(e.clientSt.DialAddr))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func inferRequest(model, id string, payload int) *pb.ModelInferRequest {
	data := make([]byte, payload)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return &pb.ModelInferRequest{
		ModelName: model, Id: id,
		Parameters: map[string]*pb.InferParameter{
			wire.ParamStream: {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "cam0"}},
		},
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{int64(payload)}}},
		RawInputContents: [][]byte{data},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestPassThrough runs every RPC class through vig, over TCP and the Unix socket,
// and compares with what the backend answers directly.
func TestPassThrough(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	for _, addr := range []string{e.tcp, e.unix} {
		t.Run(strings.SplitN(addr, ":", 2)[0], func(t *testing.T) {
			ctx := ctxT(t)
			c := pb.NewGRPCInferenceServiceClient(e.dial(t, addr))
			if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
				t.Fatalf("ServerLive: %v %v", r, err)
			}
			if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.Ready {
				t.Fatalf("ServerReady: %v %v", r, err)
			}
			if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "detector"}); err != nil || !r.Ready {
				t.Fatalf("ModelReady: %v %v", r, err)
			}
			md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "pose"})
			if err != nil || md.Name != "pose" {
				t.Fatalf("ModelMetadata: %v %v", md, err)
			}
			if _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
				t.Errorf("ModelMetadata of unknown model: %v, want the backend's NOT_FOUND", err)
			}
			// ModelConfig: vig has no message type for the config; bytes must match.
			viaCfg, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "detector"})
			if err != nil {
				t.Fatal(err)
			}
			dirCfg, err := e.direct.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "detector"})
			if err != nil || len(dirCfg.Config) == 0 || !bytes.Equal(viaCfg.Config, dirCfg.Config) {
				t.Errorf("ModelConfig via vig %x, direct %x (%v)", viaCfg.Config, dirCfg.Config, err)
			}

			for i, size := range []int{0, 150_000, 6_200_000} {
				id := mockbackend.FrameID("cam0", uint64(i))
				via, err := c.ModelInfer(ctx, inferRequest("detector", id, size))
				if err != nil {
					t.Fatalf("ModelInfer %d B: %v", size, err)
				}
				dir, err := e.direct.ModelInfer(ctx, inferRequest("detector", id, size))
				if err != nil {
					t.Fatal(err)
				}
				if via.Id != id || len(via.RawOutputContents) != 1 || !bytes.Equal(via.RawOutputContents[0], dir.RawOutputContents[0]) {
					t.Errorf("ModelInfer %d B: via vig %v, direct %v", size, via, dir)
				}
				if size > 0 && binary.LittleEndian.Uint64(via.RawOutputContents[0]) == mockbackend.Digest(nil) {
					t.Errorf("ModelInfer %d B: backend saw no input", size)
				}
			}

			s, err := c.ModelStreamInfer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			for i := range 3 {
				id := mockbackend.FrameID("cam0", uint64(10+i))
				ids[id] = true
				if err := s.Send(inferRequest("pose", id, 1000)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Send(inferRequest("nope", "bad#1", 10)); err != nil {
				t.Fatal(err)
			}
			s.CloseSend()
			var errorsSeen int
			for {
				r, err := s.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if r.ErrorMessage != "" {
					errorsSeen++
					if !strings.Contains(r.ErrorMessage, "NotFound") || r.InferResponse.GetId() != "bad#1" {
						t.Errorf("stream error %q for %q", r.ErrorMessage, r.InferResponse.GetId())
					}
					continue
				}
				if !ids[r.InferResponse.Id] {
					t.Errorf("stream answered unknown or repeated id %q", r.InferResponse.Id)
				}
				delete(ids, r.InferResponse.Id)
			}
			if len(ids) != 0 || errorsSeen != 1 {
				t.Errorf("stream: unanswered %v, errors %d", ids, errorsSeen)
			}

			st, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "detector"})
			if err != nil || len(st.ModelStats) != 1 || st.ModelStats[0].InferenceCount == 0 ||
				st.ModelStats[0].InferenceStats.GetComputeInfer().GetCount() == 0 {
				t.Errorf("ModelStatistics: %v %v", st, err)
			}

			testSystemShm(t, ctx, c)
		})
	}
	e.checkSockets(t)
}

func testSystemShm(t *testing.T, ctx context.Context, c pb.GRPCInferenceServiceClient) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine: %v", err)
	}
	key := fmt.Sprintf("/vig-gw-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	f, err := os.Create("/dev/shm" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove("/dev/shm" + key)
	f.Truncate(4096)
	f.Close()
	name := "region" + key[1:]
	if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: name, Key: key, ByteSize: 4096}); err != nil {
		t.Fatalf("register: %v", err)
	}
	if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: name, Key: key, ByteSize: 4096}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("duplicate register: %v, want ALREADY_EXISTS", err)
	}
	st, err := c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: name})
	if err != nil || st.Regions[name].GetKey() != key || st.Regions[name].GetByteSize() != 4096 {
		t.Errorf("status: %v %v", st, err)
	}
	if _, err := c.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: name}); err != nil {
		t.Errorf("unregister: %v", err)
	}
	if _, err := c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: name}); status.Code(err) != codes.NotFound {
		t.Errorf("status after unregister: %v, want NOT_FOUND", err)
	}
}

// checkSockets reads vig's metrics: every TCP connection vig accepted or dialed
// reports TCP_NODELAY on.
func (e *env) checkSockets(t *testing.T) {
	t.Helper()
	m := scrape(t, e.reg)
	tcp := m[`vig_sockets_opened_total{network="tcp",role="accepted"}`] + m[`vig_sockets_opened_total{network="tcp",role="dialed"}`]
	if tcp < 2 {
		t.Fatalf("expected at least one accepted and one dialed TCP connection, metrics: %v", m)
	}
	if m["vig_sockets_nodelay_verified_total"] != tcp || m["vig_sockets_nodelay_failed_total"] != 0 {
		t.Errorf("NODELAY verified %v failed %v of %v TCP connections", m["vig_sockets_nodelay_verified_total"], m["vig_sockets_nodelay_failed_total"], tcp)
	}
	if m[`vig_sockets_opened_total{network="unix",role="accepted"}`] < 1 {
		t.Errorf("Unix-socket connection not counted: %v", m)
	}
}

func scrape(t *testing.T, reg *metrics.Registry) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func TestHealthFollowsBackend(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	h := healthpb.NewHealthClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	waitHealth(t, ctx, h, healthpb.HealthCheckResponse_SERVING)
	e.backend.Stop()
	waitHealth(t, ctx, h, healthpb.HealthCheckResponse_NOT_SERVING)
}

// waitHealth waits for a status with Watch (a stream, no polling).
func waitHealth(t *testing.T, ctx context.Context, h healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{Service: wire.Service})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("waiting for %v: %v", want, err)
		}
		if r.Status == want {
			return
		}
	}
}

func TestBackendDownIsUnavailable(t *testing.T) {
	cfg := testConfig(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port nobody serves on
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend.Address = ln.Addr().String()
	ln.Close()
	e := startEnv(t, cfg, false)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	for range 3 {
		// A hang would end in DEADLINE_EXCEEDED after 1 s; vig must say UNAVAILABLE before.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ModelInfer(ctx, inferRequest("detector", "cam0#1", 10))
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("backend down: %v, want UNAVAILABLE within 1 s", err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		_, err = c.ServerLive(ctx, &pb.ServerLiveRequest{})
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("backend down (pass-through): %v, want UNAVAILABLE within 1 s", err)
		}
	}
}

func TestBadRequests(t *testing.T) {
	cfg := testConfig(t, "grpc: {max_message_mib: 1}\n")
	e := startEnv(t, cfg, true)
	cc := e.dial(t, e.tcp)
	ctx := ctxT(t)

	// Bytes that are not a ModelInferRequest, sent with a raw codec.
	var resp wire.Frame
	err := cc.Invoke(ctx, "/inference.GRPCInferenceService/ModelInfer", rawBytes{0x0a, 0xff, 0xff, 0xff}, &resp, grpc.ForceCodecV2(wire.RawCodec()))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed request: %v, want INVALID_ARGUMENT", err)
	}
	c := pb.NewGRPCInferenceServiceClient(cc)
	_, err = c.ModelInfer(ctx, inferRequest("detector", "cam0#1", 2<<20), grpc.MaxCallSendMsgSize(64<<20))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized request: %v, want RESOURCE_EXHAUSTED", err)
	}
	bad := inferRequest("detector", "cam0#1", 10)
	bad.Parameters[wire.ParamCapture] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "yesterday"}}
	if _, err := c.ModelInfer(ctx, bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), wire.ParamCapture) {
		t.Errorf("bad vig_capture_ns: %v, want INVALID_ARGUMENT naming it", err)
	}
	if _, err := c.ModelInfer(ctx, inferRequest("detector", "cam0#2", 10)); err != nil {
		t.Errorf("vig stopped serving after bad requests: %v", err)
	}
}

type rawBytes []byte

// startEnvBehind serves backend on a loopback port and starts vig in front of
// it, its connection up.
func startEnvBehind(t *testing.T, backend *grpc.Server) *env {
	t.Helper()
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go backend.Serve(ln)
	t.Cleanup(backend.Stop)
	cfg := testConfig(t, "")
	cfg.Backend.Address = ln.Addr().String()
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	return e
}

// TestMetadataDeadlineAndStatus uses a backend that reports what reached it.
func TestMetadataDeadlineAndStatus(t *testing.T) {
	echo := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		_, hasDeadline := ss.Context().Deadline()
		ss.SetHeader(metadata.Pairs("x-echo-trace", strings.Join(md.Get("x-trace"), ","), "x-echo-deadline", strconv.FormatBool(hasDeadline)))
		ss.SetTrailer(metadata.Pairs("x-echo-trailer", "t"))
		var f wire.Frame
		ss.RecvMsg(&f)
		f.Free()
		return status.Error(codes.FailedPrecondition, "echo backend says no")
	}), grpc.ForceServerCodecV2(wire.RawCodec()))
	e := startEnvBehind(t, echo)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-trace", "abc"), 10*time.Second)
	defer cancel()
	var hdr, trl metadata.MD
	_, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "m"}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "echo backend says no") {
		t.Errorf("backend status lost: %v", err)
	}
	hdr = metadata.Join(hdr, trl) // an error answer carries its headers in the trailers
	if got := hdr.Get("x-echo-trace"); len(got) != 1 || got[0] != "abc" {
		t.Errorf("client metadata did not reach the backend: header %v", hdr)
	}
	if got := hdr.Get("x-echo-deadline"); len(got) != 1 || got[0] != "true" {
		t.Errorf("deadline did not reach the backend: header %v", hdr)
	}
	if got := trl.Get("x-echo-trailer"); len(got) != 1 {
		t.Errorf("backend trailer lost: %v", trl)
	}
}
