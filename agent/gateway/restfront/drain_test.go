package restfront_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway/restfront"
)

// REST requests count with the gRPC RPCs in the gateway's Accepted and
// Answered (vig serve's "drained: N answered, M lost"): every request, a
// refused one too, and one still running when the frontend shuts down is
// answered and counted before Shutdown returns.
func TestRESTRequestsCountedInDrain(t *testing.T) {
	cfg, err := config.Parse("drain.yaml", []byte(`
backend: {slots: 1, stats_interval_ms: -1}
models:
  slow: {exec_ms: 300}
streams:
  - {name: cam, model: slow, class: protected, period_ms: 1000, max_age_ms: 5000}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := newRigWith(t, cfg, restfront.Options{}, nil)
	acc0, ans0 := r.gw.Accepted(), r.gw.Answered()
	r.do(t, "GET", "/v2/health/live", nil, nil)
	r.do(t, "GET", "/v2/models/slow/ready", nil, nil)
	r.do(t, "GET", "/v2/nowhere", nil, nil)
	if acc, ans := r.gw.Accepted()-acc0, r.gw.Answered()-ans0; acc != 3 || ans != 3 {
		t.Fatalf("3 REST requests: gateway counts %d accepted, %d answered", acc, ans)
	}

	body, _ := json.Marshal(obj{"id": id(1), "parameters": obj{"vig_stream": "cam"},
		"inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{4}, "data": []int{1, 2, 3, 4}}}})
	done := make(chan error, 1)
	go func() {
		res, err := r.client.Post(r.base+"/v2/models/slow/infer", "application/json", bytes.NewReader(body))
		if err == nil {
			res.Body.Close()
			if res.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d", res.StatusCode)
			}
		}
		done <- err
	}()
	for until := time.Now().Add(30 * time.Second); r.gw.Accepted() == r.gw.Answered(); time.Sleep(time.Millisecond) {
		if time.Now().After(until) {
			t.Fatal("the infer request never reached the handler")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.fe.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if acc, ans := r.gw.Accepted(), r.gw.Answered(); acc != ans || acc-acc0 != 4 {
		t.Errorf("after Shutdown: %d accepted, %d answered; want 4 more of each than %d, %d", acc, ans, acc0, ans0)
	}
	if err := <-done; err != nil {
		t.Errorf("request in flight at Shutdown: %v", err)
	}
}
