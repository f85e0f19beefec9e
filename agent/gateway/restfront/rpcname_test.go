package restfront

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/vig-edge/vig/internal/fuzztest"
)

// Every endpoint the router serves has its RPC's name; anything else is
// "other" (the label stays a fixed set whatever the path).
func TestRPCName(t *testing.T) {
	for path, want := range map[string]string{
		"/v2":                                        "ServerMetadata",
		"/v2/health/live":                            "ServerLive",
		"/v2/health/ready":                           "ServerReady",
		"/v2/models/det":                             "ModelMetadata",
		"/v2/models/det/versions/3":                  "ModelMetadata",
		"/v2/models/det/ready":                       "ModelReady",
		"/v2/models/det/config":                      "ModelConfig",
		"/v2/models/det/versions/3/stats":            "ModelStatistics",
		"/v2/models/stats":                           "ModelStatistics",
		"/v2/models/det/infer":                       "ModelInfer",
		"/v2/models/det/versions/1/infer":            "ModelInfer",
		"/v2/repository/index":                       "RepositoryIndex",
		"/v2/repository/models/det/load":             "RepositoryModelLoad",
		"/v2/repository/models/det/unload":           "RepositoryModelUnload",
		"/v2/systemsharedmemory/status":              "SystemSharedMemoryStatus",
		"/v2/systemsharedmemory/region/r/status":     "SystemSharedMemoryStatus",
		"/v2/systemsharedmemory/region/r/register":   "SystemSharedMemoryRegister",
		"/v2/cudasharedmemory/region/g/register":     "CudaSharedMemoryRegister",
		"/v2/cudasharedmemory/unregister":            "CudaSharedMemoryUnregister",
		"/v2/models/stats/ready":                     "ModelReady",
		"/v2/systemsharedmemory/unregister":          "SystemSharedMemoryUnregister",
		"/v2/systemsharedmemory/region/r/unregister": "SystemSharedMemoryUnregister",
		"/v2/models/det/frobnicate":                  "other",
		"/v2/models/det/infer/x":                     "other",
		"/v2/health":                                 "other",
		"/v2/":                                       "other",
		"/v2/models/":                                "other",
		"/v3":                                        "other",
		"/":                                          "other",
		"/v2/systemsharedmemory/region/r/x/status":   "other",
	} {
		if got := rpcName(path); got != want {
			t.Errorf("rpcName(%q) = %q, want %q", path, got, want)
		}
	}
	for _, c := range []struct {
		name   string
		status int
		want   codes.Code
	}{{"", 200, codes.OK}, {"", 0, codes.OK}, {"", 500, codes.Unknown}, {"ABORTED", 400, codes.Aborted}, {"UNAUTHENTICATED", 401, codes.Unauthenticated}, {"BOGUS", 400, codes.Unknown}} {
		if got := answerCode(c.name, c.status); got != c.want {
			t.Errorf("answerCode(%q, %d) = %v, want %v", c.name, c.status, got, c.want)
		}
	}
}

// rpcNames is every name rpcName may return: the label's whole range.
var rpcNames = []string{"ServerMetadata", "ServerLive", "ServerReady", "ModelMetadata", "ModelReady", "ModelConfig",
	"ModelStatistics", "ModelInfer", "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload",
	"SystemSharedMemoryStatus", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister", "other"}

// FuzzRPCName: whatever the path (any bytes, not only UTF-8), the metric label
// is one of the fixed names, never the client's text.
func FuzzRPCName(f *testing.F) {
	for _, p := range []string{"/v2", "/v2/models/m/versions/1/infer", "/v2/systemsharedmemory/region/r/register", "/v2/repository/models/x/load", "/v2//", "/\xff"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		defer fuzztest.Bound(t)()
		if got := rpcName(path); !slices.Contains(rpcNames, got) {
			t.Fatalf("rpcName(%q) = %q: not one of the fixed names", path, got)
		}
	})
}
