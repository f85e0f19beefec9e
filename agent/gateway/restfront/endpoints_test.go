package restfront_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vig-edge/vig/agent/gateway/restfront"
	"github.com/vig-edge/vig/mockbackend"
)

func decode(t *testing.T, rep reply, v any) {
	t.Helper()
	if rep.code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rep.code, rep.body)
	}
	if ct := rep.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if err := json.Unmarshal(rep.body, v); err != nil {
		t.Fatalf("%s: %v", rep.body, err)
	}
}

// Every endpoint of Triton's HTTP protocol but infer, answered from the backend
// as Triton's HTTP server writes it.
func TestEndpoints(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	for _, path := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/det/ready", "/v2/models/det/versions/1/ready"} {
		if rep := r.do(t, "GET", path, nil, nil); rep.code != http.StatusOK || len(rep.body) != 0 {
			t.Errorf("GET %s: HTTP %d %q, want 200 and no body", path, rep.code, rep.body)
		}
	}
	if rep := r.do(t, "GET", "/v2/models/nope/ready", nil, nil); rep.code != http.StatusBadRequest {
		t.Errorf("unknown model ready: HTTP %d, want 400", rep.code)
	}

	var server struct {
		Name, Version string
		Extensions    []string
	}
	decode(t, r.do(t, "GET", "/v2", nil, nil), &server)
	if server.Name == "" || len(server.Extensions) == 0 {
		t.Errorf("server metadata %+v", server)
	}

	type tensor struct {
		Name, Datatype string
		Shape          []int64
	}
	var meta struct {
		Name            string
		Versions        []string
		Platform        string
		Inputs, Outputs []tensor
	}
	decode(t, r.do(t, "GET", "/v2/models/det", nil, nil), &meta)
	if meta.Name != "det" || len(meta.Versions) != 1 || len(meta.Inputs) != 1 || meta.Outputs[0].Name != "OUTPUT0" || meta.Outputs[0].Shape[0] != 2 {
		t.Errorf("model metadata %+v", meta)
	}
	decode(t, r.do(t, "GET", "/v2/models/det/versions/1", nil, nil), &meta)
	rep := r.do(t, "GET", "/v2/models/nope", nil, nil)
	if rep.code != http.StatusNotFound || !bytes.Contains(rep.body, []byte(`"error":`)) || !bytes.Contains(rep.body, []byte("nope")) {
		t.Errorf("unknown model metadata: HTTP %d %s, want 404 {\"error\": …}", rep.code, rep.body)
	}

	var cfg struct {
		Name, Platform string
		MaxBatchSize   int `json:"max_batch_size"`
		Input, Output  []struct {
			Name     string
			DataType string `json:"data_type"`
			Dims     []int64
		}
	}
	decode(t, r.do(t, "GET", "/v2/models/det/config", nil, nil), &cfg)
	if cfg.Name != "det" || len(cfg.Input) != 1 || cfg.Input[0].DataType != "TYPE_UINT8" || cfg.Input[0].Dims[0] != -1 ||
		cfg.Output[0].Name != "OUTPUT0" || cfg.Output[0].DataType != "TYPE_INT64" || cfg.Output[0].Dims[0] != 2 {
		t.Errorf("model config %+v", cfg)
	}

	// One inference, then the statistics count it.
	body, h := binaryBody(t, obj{"inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{4}, "parameters": obj{"binary_data_size": 4}}}}, []byte{1, 2, 3, 4})
	splitAnswer(t, r.do(t, "POST", "/v2/models/det/infer", body, h))
	var stats struct {
		ModelStats []struct {
			Name           string
			InferenceCount uint64 `json:"inference_count"`
			InferenceStats struct {
				Success struct{ Count, Ns uint64 }
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	decode(t, r.do(t, "GET", "/v2/models/det/stats", nil, nil), &stats)
	if len(stats.ModelStats) != 1 || stats.ModelStats[0].InferenceCount != 1 || stats.ModelStats[0].InferenceStats.Success.Count != 1 {
		t.Errorf("model stats %+v", stats)
	}
	decode(t, r.do(t, "GET", "/v2/models/stats", nil, nil), &stats)
	if len(stats.ModelStats) != 2 {
		t.Errorf("all models' stats: %+v", stats)
	}

	var index []struct{ Name, Version, State string }
	decode(t, r.do(t, "POST", "/v2/repository/index", nil, nil), &index)
	decode(t, r.do(t, "POST", "/v2/repository/index", []byte(`{"ready": true}`), nil), &index)
	if len(index) != 2 || index[0].Name == "" {
		t.Errorf("repository index %+v", index)
	}

	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/v2/models/det/infer", http.StatusMethodNotAllowed},
		{"POST", "/v2/health/live", http.StatusMethodNotAllowed},
		{"GET", "/v2/nothing", http.StatusNotFound},
		{"GET", "/v3", http.StatusNotFound},
		{"GET", "/v2/models/det/frobnicate", http.StatusNotFound},
	} {
		if rep := r.do(t, c.method, c.path, nil, nil); rep.code != c.code || !bytes.Contains(rep.body, []byte(`"error":`)) {
			t.Errorf("%s %s: HTTP %d %s, want %d with an error body", c.method, c.path, rep.code, rep.body, c.code)
		}
	}
}

// System shared memory: a region registered over HTTP is registered with the
// backend and in vig's registry; infer reads inputs from it and writes outputs
// into it; vig checks references before forwarding; status and unregister.
func TestSystemSharedMemory(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine (Android): Triton system shared memory needs it: %v", err)
	}
	r := newRig(t, restfront.Options{}, nil)
	key := fmt.Sprintf("/vig-restfront-test-%d", os.Getpid())
	path := filepath.Join("/dev/shm", key[1:])
	const size = 1 << 16
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	data := frameBytes(1000, 9)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 4096); err != nil {
		t.Fatal(err)
	}

	reg := func(name string, body string) reply {
		return r.do(t, "POST", "/v2/systemsharedmemory/region/"+name+"/register", []byte(body), nil)
	}
	if rep := reg("in", fmt.Sprintf(`{"key": %q, "offset": 0, "byte_size": %d}`, key, size)); rep.code != http.StatusOK {
		t.Fatalf("register: HTTP %d %s", rep.code, rep.body)
	}
	if rep := reg("in", fmt.Sprintf(`{"key": %q, "offset": 0, "byte_size": %d}`, key, size)); rep.code != http.StatusBadRequest {
		t.Errorf("duplicate register: HTTP %d %s, want 400 (ALREADY_EXISTS)", rep.code, rep.body)
	}
	if rep := reg("bad", `{"key": "no-slash", "byte_size": 8}`); rep.code != http.StatusBadRequest {
		t.Errorf("bad key: HTTP %d %s, want 400", rep.code, rep.body)
	}
	if rep := reg("bad", fmt.Sprintf(`{"Key": %q, "byte_size": 8}`, key)); rep.code != http.StatusBadRequest {
		t.Errorf("register with \"Key\": HTTP %d %s, want 400 (member names match exactly)", rep.code, rep.body)
	}
	if rep := reg("bad", `{"offset": 3}`); rep.code != http.StatusBadRequest {
		t.Errorf("register without key: HTTP %d %s, want 400", rep.code, rep.body)
	}
	var st []struct {
		Name, Key string
		Offset    uint64
		ByteSize  uint64 `json:"byte_size"`
	}
	decode(t, r.do(t, "GET", "/v2/systemsharedmemory/status", nil, nil), &st)
	if len(st) != 1 || st[0].Name != "in" || st[0].Key != key || st[0].ByteSize != size {
		t.Errorf("status %+v", st)
	}
	decode(t, r.do(t, "GET", "/v2/systemsharedmemory/region/in/status", nil, nil), &st)

	before := r.toBack.Load()
	hdr := obj{"id": id(5), "parameters": obj{"vig_stream": "cam"},
		"inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{1000},
			"parameters": obj{"shared_memory_region": "in", "shared_memory_offset": 4096, "shared_memory_byte_size": 1000}}},
		"outputs": []obj{{"name": "OUTPUT0", "parameters": obj{"shared_memory_region": "in", "shared_memory_offset": 8192, "shared_memory_byte_size": 16}}}}
	body, _ := json.Marshal(hdr)
	m, bin := splitAnswer(t, r.do(t, "POST", "/v2/models/det/infer", body, nil))
	if sent := r.toBack.Load() - before; sent > 2048 {
		t.Errorf("vig wrote %d bytes to the backend for a 1000-byte shm input: the tensor went through the socket", sent)
	}
	o := m["outputs"].([]any)[0].(obj)
	if _, hasParams := o["parameters"]; len(bin) != 0 || o["data"] != nil || hasParams {
		t.Errorf("shm output answered %v with %d binary bytes; Triton gives it no parameters and no data", o, len(bin))
	}
	if err := parseAsTritonCppClient(t, m); err != nil {
		t.Errorf("shm output: %v", err)
	}
	got := make([]byte, 16)
	if _, err := f.ReadAt(got, 8192); err != nil {
		t.Fatal(err)
	}
	if want := output0(mockbackend.Digest([][]byte{data}), 5); !bytes.Equal(got, want) {
		t.Errorf("output in shared memory %x, want %x", got, want)
	}

	// One input in shared memory, one as binary data (as tritonclient.http
	// sends them): the backend reads the region's bytes, then the data's.
	mask := []byte{3, 1, 4}
	hdr = obj{"id": id(6), "parameters": obj{"vig_stream": "cam"},
		"inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{1000},
			"parameters": obj{"shared_memory_region": "in", "shared_memory_offset": 4096, "shared_memory_byte_size": 1000}},
			{"name": "MASK", "datatype": "UINT8", "shape": []int{3}, "parameters": obj{"binary_data_size": 3}}},
		"outputs": []obj{{"name": "OUTPUT0", "parameters": obj{"binary_data": true}}}}
	js, _ := json.Marshal(hdr)
	_, bin = splitAnswer(t, r.do(t, "POST", "/v2/models/det/infer", append(js, mask...),
		map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(js))}))
	if want := output0(mockbackend.Digest([][]byte{data, mask}), 6); !bytes.Equal(bin, want) {
		t.Errorf("shm input beside a binary one: output %x, want %x", bin, want)
	}

	// Bad references are refused by vig, before the backend sees them.
	for _, c := range []struct {
		params obj
		code   int
	}{
		{obj{"shared_memory_region": "nope", "shared_memory_byte_size": 8}, http.StatusNotFound},
		{obj{"shared_memory_region": "in", "shared_memory_offset": size - 4, "shared_memory_byte_size": 8}, http.StatusBadRequest},
		{obj{"shared_memory_region": "in"}, http.StatusBadRequest},
		{obj{"shared_memory_byte_size": 8}, http.StatusBadRequest},
	} {
		before := r.toBack.Load()
		body, _ := json.Marshal(obj{"inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{8}, "parameters": c.params}}})
		rep := r.do(t, "POST", "/v2/models/det/infer", body, nil)
		if rep.code != c.code {
			t.Errorf("%v: HTTP %d %s, want %d", c.params, rep.code, rep.body, c.code)
		}
		// Only the backend's region list may have been read (NOT_FOUND looks there once).
		if d := r.toBack.Load() - before; d > 512 {
			t.Errorf("%v: %d bytes went to the backend", c.params, d)
		}
	}

	if rep := r.do(t, "POST", "/v2/systemsharedmemory/region/in/unregister", nil, nil); rep.code != http.StatusOK {
		t.Errorf("unregister: HTTP %d %s", rep.code, rep.body)
	}
	decode(t, r.do(t, "GET", "/v2/systemsharedmemory/status", nil, nil), &st)
	if len(st) != 0 {
		t.Errorf("after unregister: %+v", st)
	}
	if rep := reg("in", fmt.Sprintf(`{"key": %q, "byte_size": %d}`, key, size)); rep.code != http.StatusOK {
		t.Fatalf("register again: HTTP %d %s", rep.code, rep.body)
	}
	if rep := r.do(t, "POST", "/v2/systemsharedmemory/unregister", nil, nil); rep.code != http.StatusOK {
		t.Errorf("unregister all: HTTP %d %s", rep.code, rep.body)
	}
	decode(t, r.do(t, "GET", "/v2/systemsharedmemory/status", nil, nil), &st)
	if len(st) != 0 {
		t.Errorf("after unregister all: %+v", st)
	}
}
