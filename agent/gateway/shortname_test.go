package gateway

import "testing"

// TestShortNameBounded: only Triton's own RPC names become metric labels; any other
// path, however it is spelled, counts as "other" (a label per client-chosen path grew
// the metrics without bound, and a non-UTF-8 one panicked in the Prometheus client).
func TestShortNameBounded(t *testing.T) {
	for path, want := range map[string]string{
		"/inference.GRPCInferenceService/ModelInfer":       "ModelInfer",
		"/inference.GRPCInferenceService/ModelStreamInfer": "ModelStreamInfer",
		"/inference.GRPCInferenceService/LogSettings":      "LogSettings",
		"/grpc.health.v1.Health/Check":                     "Health",
		"/inference.GRPCInferenceService/N\xc6StreamInfer": "other",
		"/inference.GRPCInferenceService/Made-Up-1":        "other",
		"/inference.GRPCInferenceService/a/ModelInfer":     "other",
		"/inference.GRPCInferenceService/":                 "other",
		"/other.Service/ModelInfer":                        "other",
		"":                                                 "other",
	} {
		if got := shortName(path); got != want {
			t.Errorf("shortName(%q) = %q, want %q", path, got, want)
		}
	}
	if n := len(tritonMethods); n != 20 {
		t.Errorf("%d Triton RPCs known, want the 20 of DESIGN.md §3", n)
	}
}
