package gateway_test

import (
	"testing"

	"github.com/vig-edge/vig/agent/gateway"
)

// A malformed grpc-timeout header is answered INTERNAL on its stream, and the
// connection and vig go on serving. (FuzzServerConn found that it crashed vig:
// the stream was answered before its method's counters were resolved.)
func TestH2MalformedTimeout(t *testing.T) {
	e, _ := withProbe(t, "")
	h := dialH2(t, e.tcp)
	for i, v := range []string{"bogus", "", "1", "99999999999S", "-1S"} {
		r, err := h.call(uint32(2*i+1), "/"+gateway.Service+"/ServerLive", nil, "grpc-timeout", v)
		if err != nil {
			t.Fatalf("grpc-timeout %q: %v", v, err)
		}
		if got := field(r.trailers, "grpc-status"); got != "13" {
			t.Errorf("grpc-timeout %q: grpc-status %q, want 13 (INTERNAL)", v, got)
		}
	}
	r, err := h.call(21, "/"+gateway.Service+"/ServerLive", nil, "grpc-timeout", "5S")
	if err != nil || field(r.trailers, "grpc-status") != "0" {
		t.Fatalf("after malformed timeouts: %v, trailers %v", err, r.trailers)
	}
}
