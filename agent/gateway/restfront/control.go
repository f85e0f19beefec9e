package restfront

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/wire"

	pb "github.com/vig-edge/vig/proto/inference"
)

// The endpoints other than infer: each is the Triton gRPC RPC of the same
// meaning, made on the backend (Gateway.InvokeModel: a logical model's are
// answered from its variants'), its answer written as Triton's HTTP server
// writes it. A ring backend has no control plane: vig answers
// liveness and readiness itself, and 501 for the rest, as for a gRPC client.

const invokeTimeout = 10 * time.Second

func rpc(name string) string { return "/" + wire.Service + "/" + name }

// call makes one RPC on the backend: req in, the answer decoded into resp.
func (f *Frontend) call(r *http.Request, name string, req, resp proto.Message) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), invokeTimeout)
	defer cancel()
	out, err := f.gw.InvokeModel(ctx, rpc(name), b)
	if err != nil {
		return err
	}
	return proto.Unmarshal(out, resp)
}

func writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		failCode(w, http.StatusInternalServerError, codes.Internal, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	writeAnswer(w, r, &answer{json: b})
}

// ok answers a health or readiness question: 200, or 400 when the answer is no
// (Triton's HTTP server does the same).
func ok(w http.ResponseWriter, yes bool) {
	if yes {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	failCode(w, http.StatusBadRequest, codes.Unavailable, "not ready")
}

// ring reports whether the backend is a ring runtime (no control plane).
func (f *Frontend) ring() bool { return !f.gw.SystemSharedMemory() }

func (f *Frontend) control(w http.ResponseWriter, r *http.Request, seg []string) {
	key := ""
	if len(seg) > 0 {
		key = seg[0]
	}
	switch {
	case len(seg) == 0:
		if !method(w, r, http.MethodGet) {
			return
		}
		var resp pb.ServerMetadataResponse
		if err := f.call(r, "ServerMetadata", &pb.ServerMetadataRequest{}, &resp); err != nil {
			fail(w, err)
			return
		}
		exts := servedExtensions(resp.Extensions)
		writeJSON(w, r, struct {
			Name       string   `json:"name"`
			Version    string   `json:"version"`
			Extensions []string `json:"extensions"`
		}{resp.Name, resp.Version, exts})
	case key == "health" && len(seg) == 2 && (seg[1] == "live" || seg[1] == "ready"):
		if !method(w, r, http.MethodGet) {
			return
		}
		if seg[1] == "live" {
			// vig answering is vig alive: a liveness probe must not restart a
			// healthy vig for a backend that is down (readiness says that).
			ok(w, true)
			return
		}
		if f.ring() {
			ok(w, f.gw.BackendUp())
			return
		}
		var resp pb.ServerReadyResponse
		err := f.call(r, "ServerReady", &pb.ServerReadyRequest{}, &resp)
		ok(w, err == nil && resp.Ready)
	case key == "models" && len(seg) == 2 && seg[1] == "stats":
		if !method(w, r, http.MethodGet) {
			return
		}
		f.stats(w, r, "", "")
	case key == "repository" && len(seg) == 2 && seg[1] == "index":
		if !method(w, r, http.MethodPost) {
			return
		}
		f.repositoryIndex(w, r)
	case key == "repository" && len(seg) == 4 && seg[1] == "models" && (seg[3] == "load" || seg[3] == "unload"):
		if !method(w, r, http.MethodPost) {
			return
		}
		params, good := f.repositoryParams(w, r, seg[3])
		if !good {
			return
		}
		var err error
		if seg[3] == "load" {
			err = f.call(r, "RepositoryModelLoad", &pb.RepositoryModelLoadRequest{ModelName: seg[2], Parameters: params}, &pb.RepositoryModelLoadResponse{})
		} else {
			err = f.call(r, "RepositoryModelUnload", &pb.RepositoryModelUnloadRequest{ModelName: seg[2], Parameters: params}, &pb.RepositoryModelUnloadResponse{})
		}
		if err != nil {
			fail(w, err)
			return
		}
		ok(w, true)
	case key == "systemsharedmemory":
		f.systemShm(w, r, seg[1:])
	case key == "cudasharedmemory":
		f.cudaShm(w, r, seg[1:])
	default:
		failCode(w, http.StatusNotFound, codes.NotFound, fmt.Sprintf("%s: vig serves /v2, /v2/health/{live,ready}, /v2/models/..., /v2/repository/..., /v2/systemsharedmemory/... and /v2/cudasharedmemory/...", r.URL.Path))
	}
}

// modelInfo serves a model's metadata, ready, config and stats.
func (f *Frontend) modelInfo(w http.ResponseWriter, r *http.Request, what, model, version string) {
	switch what {
	case "ready":
		if f.ring() {
			ok(w, f.gw.BackendUp() && f.gw.KnownModel(model))
			return
		}
		var resp pb.ModelReadyResponse
		err := f.call(r, "ModelReady", &pb.ModelReadyRequest{Name: model, Version: version}, &resp)
		ok(w, err == nil && resp.Ready)
	case "stats":
		f.stats(w, r, model, version)
	case "config":
		var resp pb.ModelConfigResponse
		if err := f.call(r, "ModelConfig", &pb.ModelConfigRequest{Name: model, Version: version}, &resp); err != nil {
			fail(w, err)
			return
		}
		cfg, err := decodeModelConfig(resp.Config)
		if err != nil {
			failCode(w, http.StatusInternalServerError, codes.Internal, "backend ModelConfig: "+err.Error())
			return
		}
		writeJSON(w, r, cfg)
	default:
		var resp pb.ModelMetadataResponse
		if err := f.call(r, "ModelMetadata", &pb.ModelMetadataRequest{Name: model, Version: version}, &resp); err != nil {
			fail(w, err)
			return
		}
		type tensor struct {
			Name     string  `json:"name"`
			Datatype string  `json:"datatype"`
			Shape    []int64 `json:"shape"`
		}
		conv := func(ts []*pb.ModelMetadataResponse_TensorMetadata) []tensor {
			out := make([]tensor, 0, len(ts))
			for _, t := range ts {
				s := t.Shape
				if s == nil {
					s = []int64{}
				}
				out = append(out, tensor{t.Name, t.Datatype, s})
			}
			return out
		}
		vs := resp.Versions
		if vs == nil {
			vs = []string{}
		}
		writeJSON(w, r, struct {
			Name     string   `json:"name"`
			Versions []string `json:"versions"`
			Platform string   `json:"platform"`
			Inputs   []tensor `json:"inputs"`
			Outputs  []tensor `json:"outputs"`
		}{resp.Name, vs, resp.Platform, conv(resp.Inputs), conv(resp.Outputs)})
	}
}

type duration struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

// decodeDuration reads a StatisticDuration{count = 1, ns = 2}.
func decodeDuration(b []byte) (d duration, err error) {
	err = fields(b, func(num protowire.Number, _ []byte, x uint64) error {
		switch num {
		case 1:
			d.Count = x
		case 2:
			d.Ns = x
		}
		return nil
	})
	return d, err
}

// durations decodes a message whose fields 1… are StatisticDurations, named
// by names in field order (absent ones zero, as Triton writes them).
func durations(b []byte, names ...string) (map[string]duration, error) {
	out := make(map[string]duration, len(names))
	for _, n := range names {
		out[n] = duration{}
	}
	err := fields(b, func(num protowire.Number, v []byte, _ uint64) error {
		if v == nil || num < 1 || int(num) > len(names) {
			return nil
		}
		d, err := decodeDuration(v)
		out[names[num-1]] = d
		return err
	})
	return out, err
}

// modelStats is one model's statistics as Triton's HTTP server writes them.
type modelStats struct {
	Name           string                         `json:"name"`
	Version        string                         `json:"version"`
	LastInference  uint64                         `json:"last_inference"`
	InferenceCount uint64                         `json:"inference_count"`
	ExecutionCount uint64                         `json:"execution_count"`
	InferenceStats map[string]duration            `json:"inference_stats"`
	ResponseStats  map[string]map[string]duration `json:"response_stats"`
	BatchStats     []map[string]any               `json:"batch_stats"`
	MemoryUsage    []memoryUsage                  `json:"memory_usage"`
}

type memoryUsage struct {
	Type     string `json:"type"`
	ID       int64  `json:"id"`
	ByteSize uint64 `json:"byte_size"`
}

// decodeModelStats reads a ModelStatistics message whole: vig's proto
// declares its first fields only; batch_stats (7), memory_usage (8) and
// response_stats (9) are read here from the wire.
func decodeModelStats(b []byte) (m modelStats, err error) {
	m.ResponseStats, m.BatchStats, m.MemoryUsage = map[string]map[string]duration{}, []map[string]any{}, []memoryUsage{}
	m.InferenceStats, _ = durations(nil, inferNames...)
	err = fields(b, func(num protowire.Number, v []byte, x uint64) error {
		switch num {
		case 1:
			m.Name = string(v)
		case 2:
			m.Version = string(v)
		case 3:
			m.LastInference = x
		case 4:
			m.InferenceCount = x
		case 5:
			m.ExecutionCount = x
		case 6:
			d, err := durations(v, inferNames...)
			m.InferenceStats = d
			return err
		case 7: // InferBatchStatistics{batch_size = 1, compute_input = 2, compute_infer = 3, compute_output = 4}
			var size uint64
			if err := fields(v, func(num protowire.Number, _ []byte, x uint64) error {
				if num == 1 {
					size = x
				}
				return nil
			}); err != nil {
				return err
			}
			d, err := durations(v, "batch_size", "compute_input", "compute_infer", "compute_output")
			bs := map[string]any{"batch_size": size}
			for _, k := range []string{"compute_input", "compute_infer", "compute_output"} {
				bs[k] = d[k]
			}
			m.BatchStats = append(m.BatchStats, bs)
			return err
		case 8: // MemoryUsage{type = 1, id = 2, byte_size = 3}
			var u memoryUsage
			err := fields(v, func(num protowire.Number, v []byte, x uint64) error {
				switch num {
				case 1:
					u.Type = string(v)
				case 2:
					u.ID = int64(x)
				case 3:
					u.ByteSize = x
				}
				return nil
			})
			m.MemoryUsage = append(m.MemoryUsage, u)
			return err
		case 9: // map<string, InferResponseStatistics>
			var key string
			var val []byte
			if err := fields(v, func(num protowire.Number, v []byte, _ uint64) error {
				switch num {
				case 1:
					key = string(v)
				case 2:
					val = v
				}
				return nil
			}); err != nil {
				return err
			}
			d, err := durations(val, "compute_infer", "compute_output", "success", "fail", "empty_response", "cancel")
			m.ResponseStats[key] = d
			return err
		}
		return nil
	})
	return m, err
}

var inferNames = []string{"success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"}

func (f *Frontend) stats(w http.ResponseWriter, r *http.Request, model, version string) {
	req, _ := proto.Marshal(&pb.ModelStatisticsRequest{Name: model, Version: version})
	ctx, cancel := context.WithTimeout(r.Context(), invokeTimeout)
	defer cancel()
	resp, err := f.gw.InvokeModel(ctx, rpc("ModelStatistics"), req)
	if err != nil {
		fail(w, err)
		return
	}
	out := struct {
		ModelStats []modelStats `json:"model_stats"`
	}{ModelStats: []modelStats{}}
	err = fields(resp, func(num protowire.Number, v []byte, _ uint64) error {
		if num != 1 || v == nil {
			return nil
		}
		m, err := decodeModelStats(v)
		out.ModelStats = append(out.ModelStats, m)
		return err
	})
	if err != nil {
		failCode(w, http.StatusInternalServerError, codes.Internal, "backend ModelStatistics: "+err.Error())
		return
	}
	writeJSON(w, r, out)
}

// repositoryIndex serves POST /v2/repository/index ({"ready": bool} optional).
func (f *Frontend) repositoryIndex(w http.ResponseWriter, r *http.Request) {
	src, good := f.readBody(w, r)
	if !good {
		return
	}
	defer src.free()
	body := src.bytes()
	var in struct {
		Ready bool `json:"ready"`
	}
	if len(body) > 0 {
		if err := exactUnmarshal(body, &in); err != nil {
			failCode(w, http.StatusBadRequest, codes.InvalidArgument, "repository index request: "+err.Error())
			return
		}
	}
	var resp pb.RepositoryIndexResponse
	if err := f.call(r, "RepositoryIndex", &pb.RepositoryIndexRequest{Ready: in.Ready}, &resp); err != nil {
		fail(w, err)
		return
	}
	type index struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
		State   string `json:"state,omitempty"`
		Reason  string `json:"reason,omitempty"`
	}
	out := []index{}
	for _, m := range resp.Models {
		// ModelIndex{name=1, version=2, state=3, reason=4}, all strings.
		var x index
		fields, err := stringFields(m)
		if err != nil {
			failCode(w, http.StatusInternalServerError, codes.Internal, "backend RepositoryIndex: "+err.Error())
			return
		}
		x.Name, x.Version, x.State, x.Reason = fields[1], fields[2], fields[3], fields[4]
		out = append(out, x)
	}
	writeJSON(w, r, out)
}

// stringFields reads the string fields numbered 1–4 of a message.
func stringFields(b []byte) ([5]string, error) {
	var out [5]string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out, protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType && num >= 1 && num <= 4 {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return out, protowire.ParseError(n)
			}
			out[num] = string(v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return out, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return out, nil
}

// systemShm serves /v2/systemsharedmemory/{status, unregister} and
// /v2/systemsharedmemory/region/{name}/{status, register, unregister}.
func (f *Frontend) systemShm(w http.ResponseWriter, r *http.Request, seg []string) {
	region, op := shmPath(seg)
	uid, hasUID := peerUID(r)
	ctx, cancel := context.WithTimeout(r.Context(), invokeTimeout)
	defer cancel()
	switch op {
	case "status":
		if !method(w, r, http.MethodGet) {
			return
		}
		var resp pb.SystemSharedMemoryStatusResponse
		if err := f.call(r, "SystemSharedMemoryStatus", &pb.SystemSharedMemoryStatusRequest{Name: region}, &resp); err != nil {
			fail(w, err)
			return
		}
		type st struct {
			Name     string `json:"name"`
			Key      string `json:"key"`
			Offset   uint64 `json:"offset"`
			ByteSize uint64 `json:"byte_size"`
		}
		out := []st{}
		for _, name := range sortedKeys(resp.Regions) {
			s := resp.Regions[name]
			out = append(out, st{name, s.Key, s.Offset, s.ByteSize})
		}
		writeJSON(w, r, out)
	case "register":
		if !method(w, r, http.MethodPost) || region == "" {
			if region == "" {
				failCode(w, http.StatusNotFound, codes.NotFound, "register: use /v2/systemsharedmemory/region/{name}/register")
			}
			return
		}
		src, good := f.readBody(w, r)
		if !good {
			return
		}
		defer src.free()
		body := src.bytes()
		var in struct {
			Key      *string `json:"key"`
			Offset   uint64  `json:"offset"`
			ByteSize *uint64 `json:"byte_size"`
		}
		if err := exactUnmarshal(body, &in); err != nil || in.Key == nil || in.ByteSize == nil {
			msg := "shared memory register request needs \"key\" (string) and \"byte_size\" (integer); \"offset\" is optional"
			if err != nil {
				msg += ": " + err.Error()
			}
			failCode(w, http.StatusBadRequest, codes.InvalidArgument, msg)
			return
		}
		b, _ := proto.Marshal(&pb.SystemSharedMemoryRegisterRequest{Name: region, Key: *in.Key, Offset: in.Offset, ByteSize: *in.ByteSize})
		if _, err := f.gw.ShmControl(ctx, wire.MethodShmRegister, b, uid, hasUID); err != nil {
			fail(w, err)
			return
		}
		ok(w, true)
	case "unregister":
		if !method(w, r, http.MethodPost) {
			return
		}
		b, _ := proto.Marshal(&pb.SystemSharedMemoryUnregisterRequest{Name: region})
		if _, err := f.gw.ShmControl(ctx, wire.MethodShmUnregister, b, uid, hasUID); err != nil {
			fail(w, err)
			return
		}
		ok(w, true)
	default:
		failCode(w, http.StatusNotFound, codes.NotFound, fmt.Sprintf("%s: not a system shared memory endpoint", r.URL.Path))
	}
}

// shmPath splits the path of a shared-memory endpoint after its prefix:
// "OP" (every region) or "region/NAME/OP".
func shmPath(seg []string) (region, op string) {
	switch {
	case len(seg) == 1:
		op = seg[0]
	case len(seg) == 3 && seg[0] == "region" && seg[1] != "":
		region, op = seg[1], seg[2]
	}
	return region, op
}
