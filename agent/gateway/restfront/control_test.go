package restfront_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vig-edge/vig/agent/gateway/restfront"
	pb "github.com/vig-edge/vig/proto/inference"
)

// controlBackend answers the control RPCs the way a Triton server does, and
// keeps what it was sent.
type controlBackend struct {
	pb.UnimplementedGRPCInferenceServiceServer
	loads   chan *pb.RepositoryModelLoadRequest
	unloads chan *pb.RepositoryModelUnloadRequest
	cudaReg chan *pb.CudaSharedMemoryRegisterRequest
	ready   chan string
}

func (b *controlBackend) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (b *controlBackend) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "triton", Version: "2.50.0", Extensions: []string{"classification", "sequence",
		"model_repository", "model_repository(unload_dependents)", "schedule_policy", "model_configuration",
		"system_shared_memory", "cuda_shared_memory", "binary_tensor_data", "parameters", "statistics", "trace", "logging"}}, nil
}

func (b *controlBackend) ModelReady(_ context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	b.ready <- req.Name
	return &pb.ModelReadyResponse{Ready: true}, nil
}

func (b *controlBackend) RepositoryModelLoad(_ context.Context, req *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	b.loads <- req
	return &pb.RepositoryModelLoadResponse{}, nil
}

func (b *controlBackend) RepositoryModelUnload(_ context.Context, req *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	b.unloads <- req
	return &pb.RepositoryModelUnloadResponse{}, nil
}

func (b *controlBackend) CudaSharedMemoryRegister(_ context.Context, req *pb.CudaSharedMemoryRegisterRequest) (*pb.CudaSharedMemoryRegisterResponse, error) {
	b.cudaReg <- req
	return &pb.CudaSharedMemoryRegisterResponse{}, nil
}

func (b *controlBackend) CudaSharedMemoryUnregister(context.Context, *pb.CudaSharedMemoryUnregisterRequest) (*pb.CudaSharedMemoryUnregisterResponse, error) {
	return &pb.CudaSharedMemoryUnregisterResponse{}, nil
}

func (b *controlBackend) CudaSharedMemoryStatus(context.Context, *pb.CudaSharedMemoryStatusRequest) (*pb.CudaSharedMemoryStatusResponse, error) {
	var st []byte // RegionStatus{name, device_id, byte_size}
	st = protowire.AppendTag(st, 1, protowire.BytesType)
	st = protowire.AppendString(st, "gpu0")
	st = protowire.AppendTag(st, 2, protowire.VarintType)
	st = protowire.AppendVarint(st, 1)
	st = protowire.AppendTag(st, 3, protowire.VarintType)
	st = protowire.AppendVarint(st, 4096)
	return &pb.CudaSharedMemoryStatusResponse{Regions: [][]byte{mapEntry("gpu0", st)}}, nil
}

// ModelStatistics answers with Triton's fields past vig's proto: batch_stats
// (7), memory_usage (8), response_stats (9).
func (b *controlBackend) ModelStatistics(context.Context, *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	dur := func(num protowire.Number, count, ns uint64) []byte {
		var d []byte
		d = protowire.AppendTag(d, 1, protowire.VarintType)
		d = protowire.AppendVarint(d, count)
		d = protowire.AppendTag(d, 2, protowire.VarintType)
		d = protowire.AppendVarint(d, ns)
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), d)
	}
	var batch []byte
	batch = protowire.AppendTag(batch, 1, protowire.VarintType)
	batch = protowire.AppendVarint(batch, 4)
	batch = append(batch, dur(3, 7, 7000)...)
	var mem []byte
	mem = protowire.AppendTag(mem, 1, protowire.BytesType)
	mem = protowire.AppendString(mem, "GPU")
	mem = protowire.AppendTag(mem, 3, protowire.VarintType)
	mem = protowire.AppendVarint(mem, 1<<20)
	resp := dur(3, 2, 200)
	var extra []byte
	extra = protowire.AppendBytes(protowire.AppendTag(extra, 7, protowire.BytesType), batch)
	extra = protowire.AppendBytes(protowire.AppendTag(extra, 8, protowire.BytesType), mem)
	extra = protowire.AppendBytes(protowire.AppendTag(extra, 9, protowire.BytesType), mapEntry("0", resp))
	m := &pb.ModelStatistics{Name: "det", Version: "1", InferenceCount: 7, ExecutionCount: 2,
		InferenceStats: &pb.InferStatistics{Success: &pb.StatisticDuration{Count: 7, Ns: 9000}}}
	m.ProtoReflect().SetUnknown(extra)
	return &pb.ModelStatisticsResponse{ModelStats: []*pb.ModelStatistics{m}}, nil
}

func mapEntry(key string, val []byte) []byte {
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.BytesType)
	e = protowire.AppendString(e, key)
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	return protowire.AppendBytes(e, val)
}

func newControlRig(t *testing.T) (*rig, *controlBackend) {
	cb := &controlBackend{loads: make(chan *pb.RepositoryModelLoadRequest, 1), unloads: make(chan *pb.RepositoryModelUnloadRequest, 1),
		cudaReg: make(chan *pb.CudaSharedMemoryRegisterRequest, 1), ready: make(chan string, 1)}
	return newRig(t, restfront.Options{}, func(s *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(s, cb) }), cb
}

// Server metadata advertises the backend's extensions vig serves, not the
// others (trace, logging: vig has no such endpoints).
func TestExtensionsServed(t *testing.T) {
	r, _ := newControlRig(t)
	var md struct{ Extensions []string }
	decode(t, r.do(t, "GET", "/v2", nil, nil), &md)
	got := strings.Join(md.Extensions, " ")
	for _, e := range []string{"trace", "logging"} {
		if strings.Contains(" "+got+" ", " "+e+" ") {
			t.Errorf("extensions %v advertise %s", md.Extensions, e)
		}
	}
	if !strings.Contains(got, "binary_tensor_data") || !strings.Contains(got, "cuda_shared_memory") {
		t.Errorf("extensions %v lack ones vig serves", md.Extensions)
	}
}

// Model load and unload pass their body's parameters (Triton's HTTP
// semantics: "config" a string, "file:" keys base64 content as bytes,
// unload_dependents a boolean).
func TestRepositoryLoadParameters(t *testing.T) {
	r, cb := newControlRig(t)
	file := []byte{0, 1, 2, 0xff}
	body := `{"parameters": {"config": "{\"max_batch_size\": 4}", "file:1/model.onnx": "` + base64.StdEncoding.EncodeToString(file) + `"}}`
	if rep := r.do(t, "POST", "/v2/repository/models/det/load", []byte(body), nil); rep.code != http.StatusOK {
		t.Fatalf("load: HTTP %d %s", rep.code, rep.body)
	}
	got := params(t, (<-cb.loads).Parameters)
	if got["config"] != `s:{"max_batch_size": 4}` || got["file:1/model.onnx"] != "b:"+string(file) {
		t.Errorf("load parameters %q", got)
	}
	if rep := r.do(t, "POST", "/v2/repository/models/det/unload", []byte(`{"parameters": {"unload_dependents": true}}`), nil); rep.code != http.StatusOK {
		t.Fatalf("unload: HTTP %d %s", rep.code, rep.body)
	}
	if got := params(t, (<-cb.unloads).Parameters); got["unload_dependents"] != "t:true" {
		t.Errorf("unload parameters %q", got)
	}
	// Member names match exactly, as at Triton: "Parameters" is not "parameters".
	if rep := r.do(t, "POST", "/v2/repository/models/det/unload", []byte(`{"Parameters": {"unload_dependents": true}}`), nil); rep.code != http.StatusOK {
		t.Fatalf("unload: HTTP %d %s", rep.code, rep.body)
	}
	if got := params(t, (<-cb.unloads).Parameters); len(got) != 0 {
		t.Errorf("unload with \"Parameters\": parameters %q, want none", got)
	}
	if rep := r.do(t, "POST", "/v2/repository/models/det/load", []byte(`{"parameters": {"file:x": "not base64!"}}`), nil); rep.code != http.StatusBadRequest {
		t.Errorf("bad base64: HTTP %d %s, want 400", rep.code, rep.body)
	}
}

// params decodes ModelRepositoryParameter map entries into "kind:value".
func params(t *testing.T, entries [][]byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range entries {
		var key, val string
		for b := e; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			b = b[n:]
			v, n := protowire.ConsumeBytes(b)
			if typ != protowire.BytesType || n < 0 {
				t.Fatalf("bad entry %x", e)
			}
			b = b[n:]
			if num == 1 {
				key = string(v)
				continue
			}
			num, typ, n = protowire.ConsumeTag(v)
			v = v[n:]
			switch {
			case num == 1 && typ == protowire.VarintType:
				x, _ := protowire.ConsumeVarint(v)
				val = "t:" + map[bool]string{true: "true", false: "false"}[x != 0]
			case num == 3:
				s, _ := protowire.ConsumeBytes(v)
				val = "s:" + string(s)
			case num == 4:
				s, _ := protowire.ConsumeBytes(v)
				val = "b:" + string(s)
			}
		}
		out[key] = val
	}
	return out
}

// Statistics keep batch_stats, memory_usage and response_stats.
func TestStatisticsWhole(t *testing.T) {
	r, _ := newControlRig(t)
	var st struct {
		ModelStats []struct {
			Name           string
			InferenceCount uint64                                `json:"inference_count"`
			InferenceStats map[string]struct{ Count, Ns uint64 } `json:"inference_stats"`
			BatchStats     []struct {
				BatchSize    uint64                     `json:"batch_size"`
				ComputeInfer struct{ Count, Ns uint64 } `json:"compute_infer"`
			} `json:"batch_stats"`
			MemoryUsage []struct {
				Type     string
				ByteSize uint64 `json:"byte_size"`
			} `json:"memory_usage"`
			ResponseStats map[string]map[string]struct{ Count, Ns uint64 } `json:"response_stats"`
		} `json:"model_stats"`
	}
	for _, path := range []string{"/v2/models/stats", "/v2/models/det/stats"} {
		decode(t, r.do(t, "GET", path, nil, nil), &st)
		if len(st.ModelStats) != 1 {
			t.Fatalf("%s: %d models", path, len(st.ModelStats))
		}
		m := st.ModelStats[0]
		if m.Name != "det" || m.InferenceCount != 7 || m.InferenceStats["success"].Count != 7 {
			t.Errorf("%s: %+v", path, m)
		}
		if len(m.BatchStats) != 1 || m.BatchStats[0].BatchSize != 4 || m.BatchStats[0].ComputeInfer.Count != 7 {
			t.Errorf("%s: batch_stats %+v", path, m.BatchStats)
		}
		if len(m.MemoryUsage) != 1 || m.MemoryUsage[0].Type != "GPU" || m.MemoryUsage[0].ByteSize != 1<<20 {
			t.Errorf("%s: memory_usage %+v", path, m.MemoryUsage)
		}
		if m.ResponseStats["0"]["success"].Count != 2 {
			t.Errorf("%s: response_stats %+v", path, m.ResponseStats)
		}
	}
}

// A model named stats is reached by its own paths.
func TestModelNamedStats(t *testing.T) {
	r, cb := newControlRig(t)
	if rep := r.do(t, "GET", "/v2/models/stats/ready", nil, nil); rep.code != http.StatusOK {
		t.Fatalf("ready: HTTP %d %s", rep.code, rep.body)
	}
	if name := <-cb.ready; name != "stats" {
		t.Errorf("ModelReady for %q, want stats", name)
	}
}

// CUDA shared memory registration passes to the backend (the Jetson
// zero-copy path; perf_analyzer unregisters on exit).
func TestCudaSharedMemory(t *testing.T) {
	r, cb := newControlRig(t)
	handle := []byte("a cudaIpcMemHandle_t of 64 bytes")
	body := `{"raw_handle": {"b64": "` + base64.StdEncoding.EncodeToString(handle) + `"}, "device_id": 1, "byte_size": 4096}`
	if rep := r.do(t, "POST", "/v2/cudasharedmemory/region/gpu0/register", []byte(body), nil); rep.code != http.StatusOK {
		t.Fatalf("register: HTTP %d %s", rep.code, rep.body)
	}
	if req := <-cb.cudaReg; req.Name != "gpu0" || string(req.RawHandle) != string(handle) || req.DeviceId != 1 || req.ByteSize != 4096 {
		t.Errorf("backend got %+v", req)
	}
	var st []struct {
		Name     string
		DeviceID uint64 `json:"device_id"`
		ByteSize uint64 `json:"byte_size"`
	}
	decode(t, r.do(t, "GET", "/v2/cudasharedmemory/status", nil, nil), &st)
	if len(st) != 1 || st[0].Name != "gpu0" || st[0].DeviceID != 1 || st[0].ByteSize != 4096 {
		t.Errorf("status %+v", st)
	}
	for _, path := range []string{"/v2/cudasharedmemory/unregister", "/v2/cudasharedmemory/region/gpu0/unregister"} {
		if rep := r.do(t, "POST", path, nil, nil); rep.code != http.StatusOK {
			t.Errorf("%s: HTTP %d %s", path, rep.code, rep.body)
		}
	}
	if rep := r.do(t, "POST", "/v2/cudasharedmemory/region/gpu0/register", []byte(`{"device_id": 0}`), nil); rep.code != http.StatusBadRequest {
		t.Errorf("register without a handle: HTTP %d %s, want 400", rep.code, rep.body)
	}
	upper := strings.ReplaceAll(body, `"b64"`, `"B64"`)
	if rep := r.do(t, "POST", "/v2/cudasharedmemory/region/gpu0/register", []byte(upper), nil); rep.code != http.StatusBadRequest {
		t.Errorf("register with \"B64\": HTTP %d %s, want 400 (member names match exactly)", rep.code, rep.body)
	}
}

// Liveness is vig's own: 200 while the backend is down (a liveness probe
// must not restart a healthy vig); readiness follows the backend.
func TestLiveWhileBackendDown(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	if rep := r.do(t, "GET", "/v2/health/ready", nil, nil); rep.code != http.StatusOK {
		t.Fatalf("ready with the backend up: HTTP %d %s", rep.code, rep.body)
	}
	r.mock.Stop()
	if rep := r.do(t, "GET", "/v2/health/live", nil, nil); rep.code != http.StatusOK {
		t.Errorf("live with the backend down: HTTP %d %s, want 200", rep.code, rep.body)
	}
	rep := r.do(t, "GET", "/v2/health/ready", nil, nil)
	if rep.code != http.StatusBadRequest || !strings.Contains(string(rep.body), `"error"`) {
		t.Errorf("ready with the backend down: HTTP %d %s, want 400 with an error body", rep.code, rep.body)
	}
}
