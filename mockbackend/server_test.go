package mockbackend

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/proto/inference"
)

// Transport sizing as vig deploys it (gateway.ServerOptions, not imported here so
// that the gateway may embed this package): 64 MiB messages, 16 MiB windows.
const maxMsg, window = 64 << 20, 16 << 20

// serve starts a backend on a loopback socket and returns it with a client.
func serve(t testing.TB, addr string, cfg Config) (*Running, inference.GRPCInferenceServiceClient, *grpc.ClientConn) {
	t.Helper()
	if cfg.Spin == 0 {
		cfg.Spin = 200 * time.Microsecond // skip calibration: tests assert no timing
	}
	var st netopt.Stats
	r, err := Start(context.Background(), addr,
		cfg, []grpc.ServerOption{grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg),
			grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window)}, &st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	cc, err := grpc.NewClient("passthrough:///"+r.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(new(netopt.Stats).DialAddr),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)),
		grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return r, inference.NewGRPCInferenceServiceClient(cc), cc
}

func models() Config {
	return Config{Models: []Model{{Name: "detector", Exec: time.Millisecond}, {Name: "vlm", Exec: 2 * time.Millisecond}}}
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, code)
	}
}

func TestMetadataRPCs(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "unix:" + filepath.Join(t.TempDir(), "mock.sock")} {
		t.Run(addr[:4], func(t *testing.T) {
			_, c, cc := serve(t, addr, models())
			ctx := context.Background()
			if r, err := c.ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil || !r.Live {
				t.Errorf("ServerLive: %v, %v", r, err)
			}
			if r, err := c.ServerReady(ctx, &inference.ServerReadyRequest{}); err != nil || !r.Ready {
				t.Errorf("ServerReady: %v, %v", r, err)
			}
			for _, tc := range []struct {
				name, version string
				ready         bool
			}{{"detector", "", true}, {"detector", "1", true}, {"detector", "2", false}, {"nope", "", false}} {
				r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: tc.name, Version: tc.version})
				if err != nil || r.Ready != tc.ready {
					t.Errorf("ModelReady(%s, %q) = %v, %v; want ready=%v", tc.name, tc.version, r, err, tc.ready)
				}
			}
			sm, err := c.ServerMetadata(ctx, &inference.ServerMetadataRequest{})
			if err != nil || sm.Name != "vig-mock-backend" || sm.Version == "" || len(sm.Extensions) == 0 {
				t.Errorf("ServerMetadata: %v, %v", sm, err)
			}
			mm, err := c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "vlm"})
			if err != nil {
				t.Fatal(err)
			}
			if mm.Name != "vlm" || len(mm.Versions) != 1 || len(mm.Inputs) != 1 || len(mm.Outputs) != 1 ||
				mm.Outputs[0].Name != OutputName || mm.Outputs[0].Datatype != "INT64" || len(mm.Outputs[0].Shape) != 1 || mm.Outputs[0].Shape[0] != 2 {
				t.Errorf("ModelMetadata: %v", mm)
			}
			_, err = c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "nope"})
			wantCode(t, "ModelMetadata(unknown)", err, codes.NotFound)

			mc, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "detector"})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mc.Config, EncodeModelConfig("detector")) {
				t.Errorf("ModelConfig bytes differ from EncodeModelConfig")
			}
			if name, plat := decodeConfig(t, mc.Config); name != "detector" || plat != platform {
				t.Errorf("ModelConfig decodes to name %q platform %q", name, plat)
			}
			_, err = c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "nope"})
			wantCode(t, "ModelConfig(unknown)", err, codes.NotFound)

			h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "inference.GRPCInferenceService"})
			if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health: %v, %v", h, err)
			}
		})
	}
}

// decodeConfig reads fields 1 and 2 of an encoded ModelConfig and checks the rest parses.
func decodeConfig(t *testing.T, b []byte) (name, plat string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				t.Fatalf("bad field %d", num)
			}
			switch num {
			case 1:
				name = string(v)
			case 2:
				plat = string(v)
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			t.Fatalf("bad field %d", num)
		}
		b = b[n:]
	}
	return name, plat
}

func TestUnsupportedFeatures(t *testing.T) {
	_, c, _ := serve(t, "127.0.0.1:0", models())
	ctx := context.Background()
	cs, err := c.CudaSharedMemoryStatus(ctx, &inference.CudaSharedMemoryStatusRequest{})
	if err != nil || len(cs.Regions) != 0 {
		t.Errorf("CudaSharedMemoryStatus: %v, %v", cs, err)
	}
	_, err = c.CudaSharedMemoryStatus(ctx, &inference.CudaSharedMemoryStatusRequest{Name: "x"})
	wantCode(t, "CudaSharedMemoryStatus(x)", err, codes.NotFound)
	_, err = c.CudaSharedMemoryRegister(ctx, &inference.CudaSharedMemoryRegisterRequest{Name: "x"})
	wantCode(t, "CudaSharedMemoryRegister", err, codes.Unimplemented)
	_, err = c.CudaSharedMemoryUnregister(ctx, &inference.CudaSharedMemoryUnregisterRequest{})
	wantCode(t, "CudaSharedMemoryUnregister", err, codes.OK)
	ri, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
	if err != nil || len(ri.Models) != 2 {
		t.Errorf("RepositoryIndex: %v, %v", ri, err)
	} else if name, _ := decodeConfig(t, ri.Models[0]); name != "detector" {
		t.Errorf("RepositoryIndex[0] names %q", name)
	}
	_, err = c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "x"})
	wantCode(t, "RepositoryModelLoad", err, codes.Unimplemented)
	_, err = c.RepositoryModelUnload(ctx, &inference.RepositoryModelUnloadRequest{ModelName: "x"})
	wantCode(t, "RepositoryModelUnload", err, codes.Unimplemented)
	_, err = c.TraceSetting(ctx, &inference.TraceSettingRequest{})
	wantCode(t, "TraceSetting", err, codes.Unimplemented)
	_, err = c.LogSettings(ctx, &inference.LogSettingsRequest{})
	wantCode(t, "LogSettings", err, codes.Unimplemented)
}

func rawRequest(model, id string, inputs ...[]byte) *inference.ModelInferRequest {
	req := &inference.ModelInferRequest{ModelName: model, Id: id}
	for i, in := range inputs {
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{
			Name: "INPUT" + string(rune('0'+i)), Datatype: "UINT8", Shape: []int64{int64(len(in))},
		})
		req.RawInputContents = append(req.RawInputContents, in)
	}
	return req
}

// output decodes OUTPUT0 from raw bytes.
func decodeOutput(t *testing.T, raw []byte) (digest, frame uint64) {
	t.Helper()
	if len(raw) != outputBytes {
		t.Fatalf("OUTPUT0 has %d bytes, want %d", len(raw), outputBytes)
	}
	return binary.LittleEndian.Uint64(raw), binary.LittleEndian.Uint64(raw[8:])
}

func TestInferSizes(t *testing.T) {
	r, c, _ := serve(t, "127.0.0.1:0", models())
	rng := rand.NewChaCha8([32]byte{1})
	for i, size := range []int{0, 150 << 10, 6200 << 10} {
		in := make([]byte, size)
		rng.Read(in)
		resp, err := c.ModelInfer(context.Background(), rawRequest("detector", FrameID("cam", uint64(100+i)), in))
		if err != nil {
			t.Fatalf("%d B: %v", size, err)
		}
		if resp.ModelName != "detector" || resp.ModelVersion != "1" || resp.Id != FrameID("cam", uint64(100+i)) {
			t.Errorf("%d B: echoed %q %q %q", size, resp.ModelName, resp.ModelVersion, resp.Id)
		}
		if len(resp.Outputs) != 1 || resp.Outputs[0].Name != OutputName || len(resp.RawOutputContents) != 1 {
			t.Fatalf("%d B: outputs %v, %d raw", size, resp.Outputs, len(resp.RawOutputContents))
		}
		d, f := decodeOutput(t, resp.RawOutputContents[0])
		if d != Digest([][]byte{in}) || f != uint64(100+i) {
			t.Errorf("%d B: OUTPUT0 = (%x, %d), want (%x, %d)", size, d, f, Digest([][]byte{in}), 100+i)
		}
	}
	// Without a frame id the frame is the model's arrival counter.
	for want := range uint64(3) {
		resp, err := c.ModelInfer(context.Background(), rawRequest("vlm", "plain-id", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		if _, f := decodeOutput(t, resp.RawOutputContents[0]); f != want {
			t.Errorf("request %d without frame id: frame %d", want, f)
		}
	}
	// Shapes are checked against byte sizes for fixed-size types only.
	for _, in := range []*inference.ModelInferRequest_InferInputTensor{
		{Name: "F", Datatype: "FP32", Shape: []int64{2, 3}},
		{Name: "S", Datatype: "BYTES", Shape: []int64{1}},
		{Name: "E", Datatype: "UINT8", Shape: []int64{0, 5}},
	} {
		data := map[string][]byte{"F": make([]byte, 24), "S": []byte("\x03\x00\x00\x00abc"), "E": {}}[in.Name]
		req := &inference.ModelInferRequest{ModelName: "vlm", Inputs: []*inference.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{data}}
		if _, err := c.ModelInfer(context.Background(), req); err != nil {
			t.Errorf("%s %v: %v", in.Datatype, in.Shape, err)
		}
	}
	// contents (not raw) are accepted too.
	req := &inference.ModelInferRequest{ModelName: "vlm", Inputs: []*inference.ModelInferRequest_InferInputTensor{{
		Name: "INPUT0", Datatype: "INT64", Shape: []int64{2}, Contents: &inference.InferTensorContents{Int64Contents: []int64{1, 2}},
	}}}
	if _, err := c.ModelInfer(context.Background(), req); err != nil {
		t.Errorf("contents input: %v", err)
	}
	if m := r.slots.maxRunning.Load(); m != 1 {
		t.Errorf("sequential requests ran %d at once", m)
	}
}

func TestDigest(t *testing.T) {
	a := Digest([][]byte{[]byte("ab"), []byte("c")})
	for name, d := range map[string]uint64{
		"joined":    Digest([][]byte{[]byte("abc")}),
		"split":     Digest([][]byte{[]byte("a"), []byte("bc")}),
		"reordered": Digest([][]byte{[]byte("c"), []byte("ab")}),
		"changed":   Digest([][]byte{[]byte("ab"), []byte("d")}),
	} {
		if d == a {
			t.Errorf("%s inputs hash the same", name)
		}
	}
	if a != Digest([][]byte{[]byte("ab"), []byte("c")}) {
		t.Error("Digest is not deterministic")
	}
}

func i64(v int64) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
}

func str(v string) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: v}}
}

func TestInferErrors(t *testing.T) {
	_, c, _ := serve(t, "127.0.0.1:0", models())
	contents := &inference.InferTensorContents{Int64Contents: []int64{1}}
	in := func(params map[string]*inference.InferParameter, contents *inference.InferTensorContents) *inference.ModelInferRequest_InferInputTensor {
		return &inference.ModelInferRequest_InferInputTensor{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{1}, Parameters: params, Contents: contents}
	}
	for _, tc := range []struct {
		name string
		req  *inference.ModelInferRequest
		code codes.Code
	}{
		{"unknown model", rawRequest("nope", ""), codes.NotFound},
		{"unknown version", &inference.ModelInferRequest{ModelName: "detector", ModelVersion: "3"}, codes.NotFound},
		// Triton ignores raw entries no input takes.
		{"more raw than inputs", &inference.ModelInferRequest{ModelName: "detector",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{in(nil, nil)}, RawInputContents: [][]byte{{1}, {2}}}, codes.OK},
		{"fewer raw than inputs", &inference.ModelInferRequest{ModelName: "detector",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{in(nil, nil), in(nil, nil)}, RawInputContents: [][]byte{{1}}}, codes.InvalidArgument},
		{"raw and contents", &inference.ModelInferRequest{ModelName: "detector",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{in(nil, contents)}, RawInputContents: [][]byte{{1}}}, codes.InvalidArgument},
		{"raw shorter than shape", &inference.ModelInferRequest{ModelName: "detector",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "I", Datatype: "FP32", Shape: []int64{2, 3}}}, RawInputContents: [][]byte{make([]byte, 23)}}, codes.InvalidArgument},
		{"negative dimension", &inference.ModelInferRequest{ModelName: "detector",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "I", Datatype: "UINT8", Shape: []int64{-1}}}, RawInputContents: [][]byte{{}}}, codes.InvalidArgument},
		{"huge shape", &inference.ModelInferRequest{ModelName: "detector",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "I", Datatype: "INT64", Shape: []int64{1 << 40, 1 << 40}}}, RawInputContents: [][]byte{{}}}, codes.InvalidArgument},
		{"no data for a shaped input", &inference.ModelInferRequest{ModelName: "detector",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "I", Datatype: "UINT8", Shape: []int64{4}}}}, codes.InvalidArgument},
		{"unknown output", &inference.ModelInferRequest{ModelName: "detector",
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT9"}}}, codes.InvalidArgument},
		{"unknown region", &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			in(map[string]*inference.InferParameter{paramRegion: str("nope"), paramByteSize: i64(1)}, nil)}}, codes.NotFound},
		{"size without region", &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			in(map[string]*inference.InferParameter{paramByteSize: i64(1)}, nil)}}, codes.InvalidArgument},
		{"offset without region", &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			in(map[string]*inference.InferParameter{paramOffset: i64(0)}, nil)}}, codes.InvalidArgument},
		{"region without size", &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			in(map[string]*inference.InferParameter{paramRegion: str("r")}, nil)}}, codes.InvalidArgument},
		{"region and contents", &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			in(map[string]*inference.InferParameter{paramRegion: str("r"), paramByteSize: i64(1)}, contents)}}, codes.InvalidArgument},
		{"size as string", &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			in(map[string]*inference.InferParameter{paramRegion: str("r"), paramByteSize: str("1")}, nil)}}, codes.InvalidArgument},
		{"negative offset", &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			in(map[string]*inference.InferParameter{paramRegion: str("r"), paramByteSize: i64(1), paramOffset: i64(-1)}, nil)}}, codes.InvalidArgument},
	} {
		_, err := c.ModelInfer(context.Background(), tc.req)
		wantCode(t, tc.name, err, tc.code)
	}
}

// shmObject creates a POSIX shared-memory object of size bytes and returns its key.
func shmObject(t *testing.T, size int) (key string, f *os.File) {
	t.Helper()
	if fi, err := os.Stat(shmDir); err != nil || !fi.IsDir() {
		t.Skipf("no %s on this machine: %v", shmDir, err)
	}
	key = "/vig-mock-test-" + t.Name() + "-" + randomSuffix()
	f, err := os.Create(shmDir + key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); os.Remove(shmDir + key) })
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	return key, f
}

func randomSuffix() string { return strconv.FormatUint(rand.Uint64(), 36) }

func TestSharedMemoryRegistry(t *testing.T) {
	r, c, _ := serve(t, "127.0.0.1:0", models())
	ctx := context.Background()
	key, _ := shmObject(t, 8192)
	reg := func(name, key string, off, size uint64) error {
		_, err := c.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{Name: name, Key: key, Offset: off, ByteSize: size})
		return err
	}
	if err := reg("in", key, 0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := reg("out", key, 4096+100, 1000); err != nil { // unaligned offset
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, regName, key string
		off, size          uint64
		code               codes.Code
	}{
		{"duplicate", "in", key, 0, 16, codes.AlreadyExists},
		{"key without slash", "k1", key[1:], 0, 16, codes.InvalidArgument},
		{"key with two slashes", "k2", key + "/x", 0, 16, codes.InvalidArgument},
		{"empty key", "k3", "", 0, 16, codes.InvalidArgument},
		{"beyond the object", "k4", key, 8000, 193, codes.InvalidArgument},
		{"offset overflow", "k5", key, 1<<64 - 8, 16, codes.InvalidArgument},
		{"zero size", "k6", key, 0, 0, codes.InvalidArgument},
		{"missing object", "k7", "/vig-mock-test-does-not-exist", 0, 16, codes.Internal},
	} {
		wantCode(t, "Register "+tc.name, reg(tc.regName, tc.key, tc.off, tc.size), tc.code)
	}
	st, err := c.SystemSharedMemoryStatus(ctx, &inference.SystemSharedMemoryStatusRequest{})
	if err != nil || len(st.Regions) != 2 {
		t.Fatalf("Status(all): %v, %v", st, err)
	}
	if o := st.Regions["out"]; o == nil || o.Key != key || o.Offset != 4196 || o.ByteSize != 1000 || o.Name != "out" {
		t.Errorf("Status[out] = %v", o)
	}
	st, err = c.SystemSharedMemoryStatus(ctx, &inference.SystemSharedMemoryStatusRequest{Name: "in"})
	if err != nil || len(st.Regions) != 1 || st.Regions["in"].ByteSize != 4096 {
		t.Errorf("Status(in): %v, %v", st, err)
	}
	_, err = c.SystemSharedMemoryStatus(ctx, &inference.SystemSharedMemoryStatusRequest{Name: "nope"})
	wantCode(t, "Status(unknown)", err, codes.NotFound)

	if _, err := c.SystemSharedMemoryUnregister(ctx, &inference.SystemSharedMemoryUnregisterRequest{Name: "in"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SystemSharedMemoryUnregister(ctx, &inference.SystemSharedMemoryUnregisterRequest{Name: "never-registered"}); err != nil {
		t.Errorf("Unregister(unknown): %v", err)
	}
	st, _ = c.SystemSharedMemoryStatus(ctx, &inference.SystemSharedMemoryStatusRequest{})
	if len(st.Regions) != 1 {
		t.Errorf("after Unregister(in): %d regions", len(st.Regions))
	}
	if err := reg("in", key, 0, 4096); err != nil {
		t.Errorf("re-register after unregister: %v", err)
	}
	if _, err := c.SystemSharedMemoryUnregister(ctx, &inference.SystemSharedMemoryUnregisterRequest{}); err != nil {
		t.Fatal(err)
	}
	st, _ = c.SystemSharedMemoryStatus(ctx, &inference.SystemSharedMemoryStatusRequest{})
	if len(st.Regions) != 0 {
		t.Errorf("after Unregister(\"\"): %d regions", len(st.Regions))
	}
	// Close unmaps what is left.
	if err := reg("left", key, 0, 16); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	if n := len(r.shm.regions); n != 0 {
		t.Errorf("%d regions mapped after Stop", n)
	}
}

func TestSharedMemoryInfer(t *testing.T) {
	_, c, _ := serve(t, "127.0.0.1:0", models())
	ctx := context.Background()
	const size = 256 << 10
	key, f := shmObject(t, size)
	payload := make([]byte, 150<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	const inOff = 1000
	if _, err := f.WriteAt(payload, inOff); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{Name: "in", Key: key, ByteSize: 200 << 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{Name: "out", Key: key, Offset: 200 << 10, ByteSize: 4096}); err != nil {
		t.Fatal(err)
	}
	input := func(region string, off, size int64) *inference.ModelInferRequest_InferInputTensor {
		p := map[string]*inference.InferParameter{paramRegion: str(region), paramByteSize: i64(size)}
		if off >= 0 {
			p[paramOffset] = i64(off)
		}
		return &inference.ModelInferRequest_InferInputTensor{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{size}, Parameters: p}
	}
	outParams := map[string]*inference.InferParameter{paramRegion: str("out"), paramByteSize: i64(16), paramOffset: i64(32)}
	req := &inference.ModelInferRequest{ModelName: "detector", Id: "cam#9",
		Inputs:  []*inference.ModelInferRequest_InferInputTensor{input("in", inOff, int64(len(payload)))},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: OutputName, Parameters: outParams}},
	}
	resp, err := c.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != OutputName || len(resp.RawOutputContents) != 1 || len(resp.RawOutputContents[0]) != 0 {
		t.Fatalf("shm output answered with outputs %v and raw %d entries (first %d B)", resp.Outputs, len(resp.RawOutputContents), len(resp.RawOutputContents[0]))
	}
	got := make([]byte, 16)
	if _, err := f.ReadAt(got, 200<<10+32); err != nil {
		t.Fatal(err)
	}
	if d, fr := decodeOutput(t, got); d != Digest([][]byte{payload}) || fr != 9 {
		t.Errorf("OUTPUT0 in shm = (%x, %d), want (%x, 9)", d, fr, Digest([][]byte{payload}))
	}

	// Mixed, as tritonclient.grpc sends it: an shm input beside a data one,
	// whose raw entry is the only one (Triton's rule: inputs in shared memory
	// take none).
	req2 := &inference.ModelInferRequest{ModelName: "detector", Id: "cam#10",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{input("in", inOff, int64(len(payload))),
			{Name: "INPUT1", Datatype: "UINT8", Shape: []int64{3}}},
		RawInputContents: [][]byte{{1, 2, 3}},
	}
	resp, err = c.ModelInfer(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := decodeOutput(t, resp.RawOutputContents[0]); d != Digest([][]byte{payload, {1, 2, 3}}) {
		t.Errorf("mixed shm/raw inputs: wrong digest")
	}

	for _, tc := range []struct {
		name string
		in   *inference.ModelInferRequest_InferInputTensor
		out  map[string]*inference.InferParameter
		code codes.Code
	}{
		{"offset at region size", input("in", 200<<10, 0), nil, codes.InvalidArgument},
		{"offset beyond region", input("in", 300<<10, 1), nil, codes.InvalidArgument},
		{"offset+size beyond region", input("in", 200<<10-10, 11), nil, codes.InvalidArgument},
		{"offset+size overflow", input("in", 1<<62, 1<<62), nil, codes.InvalidArgument},
		{"unknown region", input("nope", 0, 1), nil, codes.NotFound},
		{"output region too small", input("in", -1, 1), map[string]*inference.InferParameter{paramRegion: str("out"), paramByteSize: i64(8)}, codes.InvalidArgument},
		{"output beyond region", input("in", -1, 1), map[string]*inference.InferParameter{paramRegion: str("out"), paramByteSize: i64(16), paramOffset: i64(4090)}, codes.InvalidArgument},
		{"output unknown region", input("in", -1, 1), map[string]*inference.InferParameter{paramRegion: str("nope"), paramByteSize: i64(16)}, codes.NotFound},
		{"output offset without region", input("in", -1, 1), map[string]*inference.InferParameter{paramOffset: i64(0)}, codes.InvalidArgument},
	} {
		req := &inference.ModelInferRequest{ModelName: "detector", Inputs: []*inference.ModelInferRequest_InferInputTensor{tc.in}}
		if tc.out != nil {
			req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: OutputName, Parameters: tc.out}}
		}
		_, err := c.ModelInfer(ctx, req)
		wantCode(t, tc.name, err, tc.code)
	}
	// A raw entry beside an shm input is no input's: Triton ignores it.
	req3 := &inference.ModelInferRequest{ModelName: "detector",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{input("in", 0, 4)}, RawInputContents: [][]byte{{1}}}
	_, err = c.ModelInfer(ctx, req3)
	wantCode(t, "region and a raw entry left over", err, codes.OK)
	// The old reading (one entry per input, empty for the shm one) gives the
	// data input an empty entry, as Triton would: refused for its size.
	req4 := &inference.ModelInferRequest{ModelName: "detector",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{input("in", inOff, int64(len(payload))),
			{Name: "INPUT1", Datatype: "UINT8", Shape: []int64{3}}},
		RawInputContents: [][]byte{{}, {1, 2, 3}}}
	_, err = c.ModelInfer(ctx, req4)
	wantCode(t, "an empty entry for the shm input", err, codes.InvalidArgument)
}

func TestStatistics(t *testing.T) {
	_, c, _ := serve(t, "127.0.0.1:0", models())
	ctx := context.Background()
	const ok, bad = 5, 2
	before := uint64(time.Now().UnixMilli())
	for i := range ok {
		if _, err := c.ModelInfer(ctx, rawRequest("detector", FrameID("d", uint64(i)), []byte{1})); err != nil {
			t.Fatal(err)
		}
	}
	for range bad {
		_, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "detector",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "I", Datatype: "UINT8", Shape: []int64{4}}}})
		wantCode(t, "an input without data", err, codes.InvalidArgument)
	}
	if _, err := c.ModelInfer(ctx, rawRequest("vlm", "", nil)); err != nil {
		t.Fatal(err)
	}
	all, err := c.ModelStatistics(ctx, &inference.ModelStatisticsRequest{})
	if err != nil || len(all.ModelStats) != 2 {
		t.Fatalf("ModelStatistics(all): %v, %v", all, err)
	}
	one, err := c.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "detector"})
	if err != nil || len(one.ModelStats) != 1 {
		t.Fatalf("ModelStatistics(detector): %v, %v", one, err)
	}
	s := one.ModelStats[0]
	is := s.InferenceStats
	if s.Name != "detector" || s.Version != "1" || s.InferenceCount != ok || s.ExecutionCount != ok ||
		is.Success.Count != ok || is.Fail.Count != bad || is.Queue.Count != ok ||
		is.ComputeInput.Count != ok || is.ComputeInfer.Count != ok || is.ComputeOutput.Count != ok {
		t.Errorf("detector statistics: %v", s)
	}
	// compute_infer covers at least the base × 0.9 of each job (the slot's timeline
	// runs it to its scheduled end); success covers at least that.
	if min := uint64(ok) * uint64(900*time.Microsecond); is.ComputeInfer.Ns < min || is.Success.Ns < is.ComputeInfer.Ns {
		t.Errorf("durations: compute_infer %d ns, success %d ns; want compute_infer ≥ %d ≤ success", is.ComputeInfer.Ns, is.Success.Ns, min)
	}
	if s.LastInference < before {
		t.Errorf("last_inference %d before the test started (%d)", s.LastInference, before)
	}
	if v := all.ModelStats[1]; v.Name != "vlm" || v.InferenceCount != 1 || v.InferenceStats.Fail.Count != 0 {
		t.Errorf("vlm statistics: %v", v)
	}
	_, err = c.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "nope"})
	wantCode(t, "ModelStatistics(unknown)", err, codes.NotFound)
}

func TestStreamInfer(t *testing.T) {
	r, c, _ := serve(t, "127.0.0.1:0", Config{Models: models().Models, Slots: 2})
	st, err := c.ModelStreamInfer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := st.Send(rawRequest("detector", FrameID("s", uint64(i)), []byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Send(rawRequest("nope", "bad#1")); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	seen := map[string]bool{}
	var errs int
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorMessage != "" {
			errs++
			if resp.InferResponse.GetId() != "bad#1" {
				t.Errorf("error for %q: %s", resp.InferResponse.GetId(), resp.ErrorMessage)
			}
			continue
		}
		id := resp.InferResponse.Id
		_, frame, _ := ParseFrameID(id)
		if d, f := decodeOutput(t, resp.InferResponse.RawOutputContents[0]); f != frame || d != Digest([][]byte{{byte(frame)}}) {
			t.Errorf("%s: OUTPUT0 (%x, %d)", id, d, f)
		}
		seen[id] = true
	}
	if len(seen) != n || errs != 1 {
		t.Errorf("%d distinct answers and %d errors, want %d and 1", len(seen), errs, n)
	}
	if m := r.slots.maxRunning.Load(); m > 2 {
		t.Errorf("%d jobs ran at once on 2 slots", m)
	}
}

// TestSlotLimitUnderLoad counts, inside the server, how many jobs ran at once while
// many clients called concurrently, and checks the queue worked FIFO per arrival.
func TestSlotLimitUnderLoad(t *testing.T) {
	for _, slots := range []int{1, 2} {
		// Jobs of ~20 ms: long enough that 24 concurrent clients surely overlap.
		r, c, _ := serve(t, "127.0.0.1:0", Config{Models: []Model{{Name: "detector", Exec: 20 * time.Millisecond}}, Slots: slots})
		var wg sync.WaitGroup
		for i := range 24 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.ModelInfer(context.Background(), rawRequest("detector", FrameID("l", uint64(i)), []byte{1})); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if m := r.slots.maxRunning.Load(); m != int64(slots) {
			t.Errorf("slots=%d: at most %d jobs ran at once, want exactly %d under load", slots, m, slots)
		}
	}
}

// TestFIFOOverGRPC queues requests one at a time behind a slot the test holds and
// checks that the slot was then granted in arrival order. Grant order is read from
// the slot timeline the server recorded (each start is the previous job's scheduled
// end, so starts strictly increase in grant order), not from the clock or the order
// in which answers arrive.
func TestFIFOOverGRPC(t *testing.T) {
	r, c, _ := serve(t, "127.0.0.1:0", Config{Models: []Model{{Name: "fast", Exec: time.Millisecond}}})
	var mu sync.Mutex
	starts := map[string]time.Time{}
	hook := func(id string, g grant) {
		mu.Lock()
		starts[id] = g.start
		mu.Unlock()
	}
	r.grantHook.Store(&hook)
	held, err := r.slots.acquire(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ModelInfer(context.Background(), rawRequest("fast", FrameID("f", uint64(i)))); err != nil {
				t.Error(err)
			}
		}()
		waitQueued(t, r.slots, i+1)
	}
	r.slots.release(held.slot, time.Now())
	wg.Wait()
	if len(starts) != n {
		t.Fatalf("%d grants recorded, want %d", len(starts), n)
	}
	for i := 1; i < n; i++ {
		prev, cur := starts[FrameID("f", uint64(i-1))], starts[FrameID("f", uint64(i))]
		if !cur.After(prev) {
			t.Errorf("job %d (arrived after job %d) was granted the slot at %v, not after job %d (%v)", i, i-1, cur, i-1, prev)
		}
	}
}

// TestCancelledWaiterLeavesQueue cancels a request queued behind a slot the test
// holds: it fails with CANCELED, leaves the queue and counts as a failure.
func TestCancelledWaiterLeavesQueue(t *testing.T) {
	r, c, _ := serve(t, "127.0.0.1:0", Config{Models: []Model{{Name: "fast", Exec: 0}}})
	held, err := r.slots.acquire(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(ctx, rawRequest("fast", ""))
		errc <- err
	}()
	waitQueued(t, r.slots, 1)
	cancel()
	wantCode(t, "cancelled waiter", <-errc, codes.Canceled)
	for r.slots.waiting() != 0 { // the server sees the cancellation after the client
		time.Sleep(100 * time.Microsecond)
	}
	r.slots.release(held.slot, time.Now())
	if _, err := c.ModelInfer(context.Background(), rawRequest("fast", "")); err != nil {
		t.Fatal(err)
	}
	// The failure is recorded when the handler returns, which may be after the
	// client saw CANCELED: wait for it (no clock involved).
	for {
		st, err := c.ModelStatistics(context.Background(), &inference.ModelStatisticsRequest{Name: "fast"})
		if err != nil {
			t.Fatal(err)
		}
		is := st.ModelStats[0]
		if is.InferenceStats.Fail.Count == 1 {
			if is.InferenceCount != 1 {
				t.Errorf("fast: %d ran, want 1", is.InferenceCount)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFromConfig(t *testing.T) {
	c, err := config.Parse("t.yaml", []byte(`
backend: {slots: 2, seed: 9}
models:
  vlm: {exec_ms: 200}
  det: {exec_ms: 8.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := FromConfig(c)
	if got.Slots != 2 || got.Seed != 9 || len(got.Models) != 2 ||
		got.Models[0] != (Model{Name: "det", Exec: 8500 * time.Microsecond}) || got.Models[1] != (Model{Name: "vlm", Exec: 200 * time.Millisecond}) {
		t.Errorf("FromConfig = %+v", got)
	}
}

func TestNewRejects(t *testing.T) {
	for name, cfg := range map[string]Config{
		"negative slots": {Slots: -1},
		"no name":        {Models: []Model{{Exec: 1}}},
		"negative exec":  {Models: []Model{{Name: "a", Exec: -1}}},
		"duplicate":      {Models: []Model{{Name: "a"}, {Name: "a"}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// BenchmarkInfer is one ModelInfer round trip over loopback TCP to a model with no
// execution time: the mock's own cost per request, the floor under every benchmark
// that uses it.
func BenchmarkInfer(b *testing.B) {
	_, c, _ := serve(b, "127.0.0.1:0", Config{Models: []Model{{Name: "zero"}}})
	for _, size := range []int{0, 150 << 10, 6200 << 10} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			req := rawRequest("zero", "", make([]byte, size))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.ModelInfer(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
