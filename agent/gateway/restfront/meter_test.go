package restfront_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/gateway/restfront"
)

// HTTP requests are counted per Triton RPC and answer code in vig_http_*
// (the same registry as the gRPC frontend's vig_grpc_*, which they leave
// alone), bytes each way included; a path that is no endpoint is "other".
func TestRequestMetrics(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	body, h := binaryBody(t, obj{"id": id(1), "inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{4}, "parameters": obj{"binary_data_size": 4}}},
		"outputs": []obj{{"name": "OUTPUT0", "parameters": obj{"binary_data": true}}}}, []byte{1, 2, 3, 4})
	ok := r.do(t, "POST", "/v2/models/det/infer", body, h)
	if ok.code != http.StatusOK {
		t.Fatalf("infer: HTTP %d %s", ok.code, ok.body)
	}
	r.do(t, "POST", "/v2/models/det/infer", []byte(`{"inputs": [}`), nil)
	r.do(t, "POST", "/v2/models/nope/infer", body, h)
	r.do(t, "GET", "/v2/health/live", nil, nil)
	r.do(t, "GET", "/v2/models/det/versions/1/config", nil, nil)
	r.do(t, "GET", "/v2/no/such/thing", nil, nil)

	rec := httptest.NewRecorder()
	r.gw.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	scrape, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`vig_http_requests_total{code="OK",method="ModelInfer"} 1`,
		`vig_http_requests_total{code="InvalidArgument",method="ModelInfer"} 1`,
		`vig_http_requests_total{code="NotFound",method="ModelInfer"} 1`,
		`vig_http_requests_total{code="OK",method="ServerLive"} 1`,
		`vig_http_requests_total{code="OK",method="ModelConfig"} 1`,
		`vig_http_requests_total{code="NotFound",method="other"} 1`,
		`vig_http_in_flight{method="ModelInfer"} 0`,
		`vig_http_sent_bytes_total{method="ServerLive"} 0`,
	} {
		if !strings.Contains(string(scrape), want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	// Bytes: the three infer bodies in, the answers out.
	in := 2*len(body) + len(`{"inputs": [}`)
	if want := "vig_http_received_bytes_total{method=\"ModelInfer\"} " + strconv.Itoa(in) + "\n"; !strings.Contains(string(scrape), want) {
		t.Errorf("scrape lacks %s", strings.TrimSpace(want))
	}
	if strings.Contains(string(scrape), `vig_grpc_requests_total{code="OK",method="ModelInfer"}`) {
		t.Error("an HTTP infer was counted as a gRPC RPC")
	}
}
