package restfront

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vig-edge/vig/internal/fuzztest"
)

// pm builds a protobuf message from (field, value) pairs: a string or []byte is
// length-delimited, an int or uint64 a varint, a []int64 packed varints.
func pm(kv ...any) []byte {
	var b []byte
	for i := 0; i < len(kv); i += 2 {
		num := protowire.Number(kv[i].(int))
		switch v := kv[i+1].(type) {
		case string:
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), []byte(v))
		case []byte:
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
		case int:
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), uint64(v))
		case uint64:
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
		case []int64:
			var p []byte
			for _, x := range v {
				p = protowire.AppendVarint(p, uint64(x))
			}
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), p)
		}
	}
	return b
}

// A config with the parts clients read (perf_analyzer: max_batch_size, the
// tensors, dynamic and sequence batching, ensembles, decoupled, the response
// cache) renders as Triton's JSON: proto field names, defaults printed, int64
// as numbers, enums by name, unknown fields skipped.
func TestModelConfigJSON(t *testing.T) {
	cfg := pm(
		1, "det", 2, "tensorrt_plan", 17, "tensorrt", 4, 8,
		3, pm(1, pm(1, 2)),
		5, pm(1, "images", 2, 11, 3, 2, 4, []int64{3, -1, 640}),
		5, pm(1, "mask", 2, 1, 8, 1),
		6, pm(1, "boxes", 2, 11, 3, []int64{-1, 4}, 4, "labels.txt"),
		11, pm(1, []int64{4, 8}, 2, 100),
		7, pm(1, "det_0", 4, 1, 2, 2, 3, []int64{0, 1}),
		7, pm(4, 2, 2, 1),
		14, pm(1, "precision", 2, pm(1, "fp16")),
		10, pm(1, "team", 2, "perception"),
		19, pm(1, 1),
		24, pm(1, 1),
		99, "a field of a newer Triton",
	)
	got, err := decodeModelConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"det","platform":"tensorrt_plan","backend":"tensorrt","runtime":"","version_policy":{"latest":{"num_versions":2}},"max_batch_size":8,` +
		`"input":[{"name":"images","data_type":"TYPE_FP32","format":"FORMAT_NCHW","dims":[3,-1,640],"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,"is_non_linear_format_io":false},` +
		`{"name":"mask","data_type":"TYPE_BOOL","format":"FORMAT_NONE","dims":[],"is_shape_tensor":false,"allow_ragged_batch":false,"optional":true,"is_non_linear_format_io":false}],` +
		`"output":[{"name":"boxes","data_type":"TYPE_FP32","dims":[-1,4],"label_filename":"labels.txt","is_shape_tensor":false,"is_non_linear_format_io":false}],` +
		`"batch_input":[],"batch_output":[],"dynamic_batching":{"preferred_batch_size":[4,8],"max_queue_delay_microseconds":100,"preserve_ordering":false,"priority_levels":0},` +
		`"instance_group":[{"name":"det_0","kind":"KIND_GPU","count":2,"gpus":[0,1],"profile":[],"passive":false,"host_policy":""},` +
		`{"name":"","kind":"KIND_CPU","count":1,"gpus":[],"profile":[],"passive":false,"host_policy":""}],` +
		`"default_model_filename":"","cc_model_filenames":{},"metric_tags":{"team":"perception"},"parameters":{"precision":{"string_value":"fp16"}},` +
		`"model_transaction_policy":{"decoupled":true},"response_cache":{"enable":true}}`
	if string(got) != want {
		t.Fatalf("config JSON:\n got %s\nwant %s", got, want)
	}

	ens, err := decodeModelConfig(pm(1, "pipeline", 2, "ensemble", 13, pm(), 15, pm(1, pm(1, "pre", 2, -1, 3, pm(1, "IN", 2, "raw")), 1, pm(1, "det", 2, 3))))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		SequenceBatching   *struct{} `json:"sequence_batching"`
		EnsembleScheduling struct {
			Step []struct {
				ModelName    string            `json:"model_name"`
				ModelVersion int64             `json:"model_version"`
				InputMap     map[string]string `json:"input_map"`
			}
		} `json:"ensemble_scheduling"`
	}
	if err := json.Unmarshal(ens, &e); err != nil {
		t.Fatalf("%v: %s", err, ens)
	}
	st := e.EnsembleScheduling.Step
	if e.SequenceBatching == nil || len(st) != 2 || st[0].ModelName != "pre" || st[0].ModelVersion != -1 || st[0].InputMap["IN"] != "raw" || st[1].ModelVersion != 3 {
		t.Fatalf("ensemble config: %s", ens)
	}
}

// Whatever bytes the backend sends, the answer is valid JSON or an error.
func FuzzDecodeModelConfig(f *testing.F) {
	f.Add(pm(1, "det", 5, pm(1, "x", 4, []int64{1, 2})))
	f.Add(pm(15, pm(1, pm(3, pm(1, "k", 2, "v")))))
	f.Add([]byte{0x2a, 0x05, 0x22, 0x03, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		out, err := decodeModelConfig(b)
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid JSON %q from %x", out, b)
		}
	})
}
