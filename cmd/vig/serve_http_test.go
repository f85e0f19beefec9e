package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// listen.http under TLS with client certificates and the bearer token: health
// checks stay open, everything else needs the token and is refused with
// Triton's error body otherwise.
func TestServeHTTPTLSAndToken(t *testing.T) {
	p := newPKI(t)
	token := filepath.Join(p.dir, "token")
	os.WriteFile(token, []byte("s3cr3t\n"), 0o600)
	addrs, _ := startServe(t, fmt.Sprintf(`
listen:
  grpc: "127.0.0.1:0"
  metrics: "off"
  http: "127.0.0.1:0"
  tls: {cert_file: %s, key_file: %s, client_ca_file: %s}
  auth: {token_file: %s}
backend: {address: "127.0.0.1:0", embedded: true, stats_interval_ms: -1}
models: {det: {exec_ms: 1}}
`, p.certFile, p.keyFile, p.caFile, token))
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.client}}}}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(path, auth string) (int, string) {
		req, _ := http.NewRequest("GET", "https://"+addrs["http"]+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/v2/health/live", ""); code != http.StatusOK {
		t.Errorf("live without the token: %d, want 200 (health stays open)", code)
	}
	if code, body := get("/v2", ""); code != http.StatusUnauthorized || !strings.Contains(body, `"error"`) {
		t.Errorf("server metadata without the token: %d %s, want 401 with an error body", code, body)
	}
	if code, body := get("/v2", "Bearer s3cr3t"); code != http.StatusOK || !strings.Contains(body, `"extensions"`) {
		t.Errorf("server metadata with the token: %d %s", code, body)
	}
	// Plain HTTP to the TLS port: an error, or the TLS server's 400, never a served request.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addrs["http"] + "/v2/health/live"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: HTTP %d, want a refusal", resp.StatusCode)
		}
	}
}
