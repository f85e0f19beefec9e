package restfront_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/vig-edge/vig/agent/gateway/restfront"
)

// parseAsTritonCppClient reads an infer answer's JSON header as Triton's C++
// HTTP client (InferResultHttp, used by perf_analyzer) does: for each
// output, a "parameters" object, when present, must hold "binary_data_size"
// as an unsigned integer (the client reads it with MemberAsUInt and fails
// with "attempt to access non-existing object member 'binary_data_size'");
// an output without it is read from "data", or is in shared memory.
func parseAsTritonCppClient(t *testing.T, m map[string]any) error {
	t.Helper()
	outs, ok := m["outputs"].([]any)
	if !ok {
		return fmt.Errorf("no outputs array: %v", m)
	}
	for _, o := range outs {
		out := o.(map[string]any)
		p, has := out["parameters"]
		if !has {
			continue
		}
		params, ok := p.(map[string]any)
		if !ok {
			return fmt.Errorf("output %v: parameters is not an object", out["name"])
		}
		v, ok := params["binary_data_size"]
		if !ok {
			return fmt.Errorf("output %v: attempt to access non-existing object member 'binary_data_size'", out["name"])
		}
		if _, err := strconv.ParseUint(fmt.Sprint(v), 10, 64); err != nil {
			return fmt.Errorf("output %v: binary_data_size %v is not an unsigned integer", out["name"], v)
		}
	}
	return nil
}

// Every shape of answer parses as Triton's C++ client reads it: binary,
// JSON, shared-memory outputs, and one of each in one answer.
func TestAnswersParseAsTritonCppClient(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine (Android): the shared-memory output needs it: %v", err)
	}
	r := newRig(t, restfront.Options{}, nil)
	key := shmRegion(t, r, "out", 4096)
	in := []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{4}, "data": []int{1, 2, 3, 4}}}
	for i, outputs := range [][]obj{
		{{"name": "OUTPUT0", "parameters": obj{"binary_data": true}}},
		{{"name": "OUTPUT0", "parameters": obj{"binary_data": false}}},
		{{"name": "OUTPUT0", "parameters": obj{"shared_memory_region": "out", "shared_memory_byte_size": 16}}},
		{{"name": "OUTPUT0"}},
	} {
		body, _ := json.Marshal(obj{"id": id(uint64(i + 1)), "inputs": in, "outputs": outputs})
		m, _ := splitAnswer(t, r.do(t, "POST", "/v2/models/det/infer", body, nil))
		if err := parseAsTritonCppClient(t, m); err != nil {
			t.Errorf("outputs %v: %v (key %s)", outputs, err, key)
		}
	}
	// Both a region and binary_data for one output: Triton answers 400.
	body, _ := json.Marshal(obj{"id": id(9), "inputs": in, "outputs": []obj{{"name": "OUTPUT0",
		"parameters": obj{"shared_memory_region": "out", "shared_memory_byte_size": 16, "binary_data": true}}}})
	if rep := r.do(t, "POST", "/v2/models/det/infer", body, nil); rep.code != http.StatusBadRequest {
		t.Errorf("shm output with binary_data: HTTP %d %s, want 400", rep.code, rep.body)
	}
}

// shmRegion creates a POSIX shared-memory object of size bytes and registers
// it with vig over HTTP as name; it returns the object's key.
func shmRegion(t *testing.T, r *rig, name string, size int) string {
	t.Helper()
	key := fmt.Sprintf("/vig-restfront-%s-%d", name, os.Getpid())
	path := "/dev/shm" + key
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	body := fmt.Sprintf(`{"key": %q, "byte_size": %d}`, key, size)
	if rep := r.do(t, "POST", "/v2/systemsharedmemory/region/"+name+"/register", []byte(body), nil); rep.code != http.StatusOK {
		t.Fatalf("register %s: HTTP %d %s", name, rep.code, rep.body)
	}
	return key
}
