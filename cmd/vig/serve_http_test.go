package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/vig-edge/vig/agent/config"
)

// vig serve with listen.http and listen.http_unix: Triton's HTTP/REST protocol
// on TCP and on a Unix socket, into the same governor and backend, drained on
// SIGTERM.
func TestServeHTTP(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "vig-http.sock")
	cfg, err := config.Parse("http.yaml", []byte(`
listen: {grpc: "127.0.0.1:0", metrics: "off", http: "127.0.0.1:0", http_unix: "`+sock+`"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1, stats_interval_ms: -1}
models:
  det: {exec_ms: 1}
streams:
  - {name: cam, model: det, class: protected, period_ms: 50, max_age_ms: 5000}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil) }()
	addrs := <-ready
	if addrs["http"] == "" || addrs["http_unix"] == "" {
		t.Fatalf("addresses %v: no http or http_unix", addrs)
	}
	tcp := &http.Client{Transport: &http.Transport{}}
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", addrs["http_unix"])
	}}}
	body := []byte(`{"id":"cam#3","parameters":{"vig_stream":"cam"},"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[3],"data":[1,2,3]}]}`)
	for name, c := range map[string]*http.Client{"tcp": tcp, "unix": unix} {
		base := "http://" + addrs["http"]
		if name == "unix" {
			base = "http://vig"
		}
		resp, err := c.Get(base + "/v2/health/ready")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: ready %d", name, resp.StatusCode)
		}
		resp, err = c.Post(base+"/v2/models/det/infer", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var m struct {
			ID      string
			Outputs []struct{ Data []int64 }
		}
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || m.ID != "cam#3" || len(m.Outputs) != 1 || m.Outputs[0].Data[1] != 3 {
			t.Errorf("%s: infer HTTP %d %+v %v", name, resp.StatusCode, m, err)
		}
		c.CloseIdleConnections()
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
}
