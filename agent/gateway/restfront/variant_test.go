package restfront_test

import (
	"encoding/json"
	"testing"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway/restfront"
)

// A REST request for a logical model reaches the backend as the variant the
// scheduler picks; the JSON answer's model_name is that variant (the mock
// echoes the name it was sent).
func TestRESTVariant(t *testing.T) {
	r := logicalRig(t)
	for i := range 3 {
		body, _ := json.Marshal(obj{"id": id(uint64(i)), "parameters": obj{"vig_stream": "cam"},
			"inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{4}, "data": []int{1, 2, 3, 4}}}})
		rep := r.do(t, "POST", "/v2/models/det/infer", body, nil)
		m, _ := splitAnswer(t, rep)
		if name := m["model_name"]; name != "det_a" && name != "det_b" {
			t.Fatalf("frame %d answered as %v, want a variant: %s", i, name, rep.body)
		}
	}
}

// logicalRig is a rig whose config has the logical model det, of variants
// det_a and det_b (the mock serves the variants only).
func logicalRig(t *testing.T) *rig {
	t.Helper()
	cfg, err := config.Parse("v.yaml", []byte(`
backend: {stats_interval_ms: -1}
accelerators: {gpu: 1, dla0: 1}
models:
  det: {variants: [det_a, det_b]}
  det_a: {exec_ms: 1, on: gpu}
  det_b: {exec_ms: 3, on: dla0}
streams:
  - {name: cam, model: det, class: high, period_ms: 1000, max_age_ms: 5000}
`))
	if err != nil {
		t.Fatal(err)
	}
	return newRigWith(t, cfg, restfront.Options{}, nil)
}

// A logical model answers for itself on the model routes: ready (a variant
// is), metadata and config (the first variant's, named det), statistics
// (each variant's entry); a name that is neither served nor logical is the
// backend's NOT_FOUND as before.
func TestRESTLogicalModelRoutes(t *testing.T) {
	r := logicalRig(t)
	if rep := r.do(t, "GET", "/v2/models/det/ready", nil, nil); rep.code != 200 {
		t.Errorf("ready: HTTP %d %s, want 200", rep.code, rep.body)
	}
	if rep := r.do(t, "GET", "/v2/models/nothing/ready", nil, nil); rep.code != 400 {
		t.Errorf("ready of an unknown model: HTTP %d %s, want 400", rep.code, rep.body)
	}
	if rep := r.do(t, "GET", "/v2/models/nothing", nil, nil); rep.code != 404 {
		t.Errorf("metadata of an unknown model: HTTP %d %s, want 404", rep.code, rep.body)
	}
	var meta struct {
		Name   string `json:"name"`
		Inputs []struct {
			Name string `json:"name"`
		} `json:"inputs"`
	}
	rep := r.do(t, "GET", "/v2/models/det", nil, nil)
	if rep.code != 200 || json.Unmarshal(rep.body, &meta) != nil || meta.Name != "det" || len(meta.Inputs) != 1 || meta.Inputs[0].Name != "INPUT0" {
		t.Errorf("metadata: HTTP %d %s, want det with the variants' input INPUT0", rep.code, rep.body)
	}
	var cfg struct {
		Name  string `json:"name"`
		Input []struct {
			Name string `json:"name"`
		} `json:"input"`
	}
	rep = r.do(t, "GET", "/v2/models/det/config", nil, nil)
	if rep.code != 200 || json.Unmarshal(rep.body, &cfg) != nil || cfg.Name != "det" || len(cfg.Input) != 1 || cfg.Input[0].Name != "INPUT0" {
		t.Errorf("config: HTTP %d %s, want det with input INPUT0", rep.code, rep.body)
	}
	var stats struct {
		ModelStats []struct {
			Name string `json:"name"`
		} `json:"model_stats"`
	}
	rep = r.do(t, "GET", "/v2/models/det/stats", nil, nil)
	if rep.code != 200 || json.Unmarshal(rep.body, &stats) != nil || len(stats.ModelStats) != 2 ||
		stats.ModelStats[0].Name != "det_a" || stats.ModelStats[1].Name != "det_b" {
		t.Errorf("stats: HTTP %d %s, want the entries of det_a and det_b", rep.code, rep.body)
	}
}

// A raw binary request (no JSON header) for a logical model is parsed with
// its first variant's configuration and answered by a variant.
func TestRESTLogicalRawBinary(t *testing.T) {
	r := logicalRig(t)
	rep := r.do(t, "POST", "/v2/models/det/infer", []byte{1, 2, 3, 4}, map[string]string{"Inference-Header-Content-Length": "0"})
	m, _ := splitAnswer(t, rep)
	if name := m["model_name"]; name != "det_a" && name != "det_b" {
		t.Fatalf("answered as %v, want a variant: %s", name, rep.body)
	}
}
