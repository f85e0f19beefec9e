package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/shmring"
)

// An address other machines can reach, in plain text and without insecure: true,
// stops vig serve with exit 2 and an error that names the file, line, key and fix.
func TestExposedPlainTextExits2(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0"} {
		path := filepath.Join(t.TempDir(), "exposed.yaml")
		os.WriteFile(path, []byte(fmt.Sprintf("listen:\n  grpc: %q\nbackend: {embedded: true, address: \"127.0.0.1:0\"}\n", addr)), 0o600)
		stderr := captureStderr(t, func() {
			if code := run([]string{"serve", "-c", path}); code != 2 {
				t.Errorf("%s: exit code %d, want 2", addr, code)
			}
		})
		for _, want := range []string{"exposed.yaml:2", "listen.grpc", "listen.tls.cert_file", "listen.insecure: true"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: error does not mention %q:\n%s", addr, want, stderr)
			}
		}
	}
}

// A file the config names that cannot be used is a config error too (exit 2,
// naming the key), found before anything listens.
func TestExposureFilesExit2(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-token")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, tc := range []struct{ listen, key string }{
		{fmt.Sprintf("tls: {cert_file: %s/none.pem, key_file: %s/none.key}", dir, dir), "listen.tls.cert_file"},
		{fmt.Sprintf("auth: {token_file: %s}", empty), "listen.auth.token_file"},
		{fmt.Sprintf("auth: {token_file: %s/missing}", dir), "listen.auth.token_file"},
	} {
		path := filepath.Join(dir, "files.yaml")
		os.WriteFile(path, []byte("listen: {grpc: \"127.0.0.1:0\", metrics: \"off\", "+tc.listen+"}\nbackend: {embedded: true, address: \"127.0.0.1:0\", stats_interval_ms: -1}\n"), 0o600)
		stderr := captureStderr(t, func() {
			if code := run([]string{"serve", "--no-device-checks", "-c", path}); code != 2 {
				t.Errorf("%s: exit code %d, want 2", tc.listen, code)
			}
		})
		if !strings.Contains(stderr, tc.key) || !strings.Contains(stderr, "files.yaml") {
			t.Errorf("%s: error does not name the file and %s:\n%s", tc.listen, tc.key, stderr)
		}
	}
}

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type pki struct {
	dir                 string
	caFile, certFile    string
	keyFile             string
	roots               *x509.CertPool
	client, otherClient tls.Certificate // signed by the CA; by another CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), roots: x509.NewCertPool()}
	caCert, caKey := makeCA(t, "vig test CA")
	otherCA, otherKey := makeCA(t, "another CA")
	p.roots.AddCert(caCert)
	p.caFile = writePEM(t, p.dir, "ca.pem", "CERTIFICATE", caCert.Raw)
	srvDER, srvKey := makeLeaf(t, caCert, caKey, "vig", x509.ExtKeyUsageServerAuth)
	p.certFile = writePEM(t, p.dir, "cert.pem", "CERTIFICATE", srvDER)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	p.keyFile = writePEM(t, p.dir, "key.pem", "EC PRIVATE KEY", keyDER)
	cliDER, cliKey := makeLeaf(t, caCert, caKey, "sensor", x509.ExtKeyUsageClientAuth)
	p.client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	othDER, othKey := makeLeaf(t, otherCA, otherKey, "stranger", x509.ExtKeyUsageClientAuth)
	p.otherClient = tls.Certificate{Certificate: [][]byte{othDER}, PrivateKey: othKey}
	return p
}

func makeCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func makeLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startServe runs serve with cfgText (a config) until the test ends.
func startServe(t *testing.T, cfgText string) (map[string]string, *config.Config) {
	t.Helper()
	cfg, err := config.Parse("exposure.yaml", []byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	return startServeConfig(t, cfg)
}

// startServeConfig runs serve with cfg until the test ends.
func startServeConfig(t *testing.T, cfg *config.Config) (map[string]string, *config.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan map[string]string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil) }()
	var addrs map[string]string
	select {
	case addrs = <-ready:
	case err := <-served:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return addrs, cfg
}

// TLS with required client certificates and a bearer token, end to end through
// vig serve: the one client that has all three gets answers; each one missing
// something is refused, and says so.
func TestTLSClientCertAndToken(t *testing.T) {
	p := newPKI(t)
	token := filepath.Join(p.dir, "token")
	os.WriteFile(token, []byte("s3cr3t\n"), 0o600)
	addrs, cfg := startServe(t, fmt.Sprintf(`
listen:
  grpc: "127.0.0.1:0"
  metrics: "127.0.0.1:0"
  tls: {cert_file: %s, key_file: %s, client_ca_file: %s}
  auth: {token_file: %s}
backend: {address: "127.0.0.1:0", embedded: true, stats_interval_ms: -1}
models: {det: {exec_ms: 1}}
`, p.certFile, p.keyFile, p.caFile, token))

	dial := func(creds credentials.TransportCredentials) pb.GRPCInferenceServiceClient {
		cc, err := grpc.NewClient("passthrough:///"+addrs["grpc"], append(gateway.DialOptions(cfg.GRPC), grpc.WithTransportCredentials(creds))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return pb.NewGRPCInferenceServiceClient(cc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cr3t")
	infer := &pb.ModelInferRequest{ModelName: "det", Id: "cam#1"}

	good := dial(credentials.NewTLS(&tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.client}}))
	var err error
	for { // the embedded backend connects in the background
		var r *pb.ServerReadyResponse
		if r, err = good.ServerReady(authed, &pb.ServerReadyRequest{}); err != nil || r.Ready {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("ServerReady over TLS with a client certificate and the token: %v", err)
	}
	if _, err := good.ModelInfer(authed, infer); err != nil {
		t.Errorf("ModelInfer over TLS: %v", err)
	}
	if _, err := good.ModelInfer(ctx, infer); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ModelInfer over TLS without the token: %v, want UNAUTHENTICATED", err)
	}

	for name, creds := range map[string]credentials.TransportCredentials{
		"no client certificate":              credentials.NewTLS(&tls.Config{RootCAs: p.roots}),
		"a client certificate of another CA": credentials.NewTLS(&tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.otherClient}}),
		"plain text":                         insecure.NewCredentials(),
	} {
		sctx, scancel := context.WithTimeout(authed, 3*time.Second)
		_, err := dial(creds).ServerReady(sctx, &pb.ServerReadyRequest{})
		scancel()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want UNAVAILABLE (connection refused in the handshake)", name, err)
		}
	}

	// Metrics: the same TLS, and the token as an HTTP bearer header.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.client}}}}
	get := func(auth string) (int, string) {
		req, _ := http.NewRequest("GET", "https://"+addrs["metrics"]+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("metrics over TLS: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("metrics without the token: %d, want 401", code)
	}
	if code, _ := get("Bearer nope"); code != http.StatusUnauthorized {
		t.Errorf("metrics with a wrong token: %d, want 401", code)
	}
	code, body := get("Bearer s3cr3t")
	if code != http.StatusOK {
		t.Fatalf("metrics with the token: %d", code)
	}
	for _, want := range []string{`vig_access_refused_total{listener="grpc",reason="token"} 1`, `vig_access_refused_total{listener="metrics",reason="token"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Plain HTTP to the TLS port: net/http answers 400 "HTTP request to an
	// HTTPS server", never the metrics.
	if resp, err := http.Get("http://" + addrs["metrics"] + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "vig_") {
			t.Errorf("plain-text HTTP to the TLS metrics port: %d %.80q", resp.StatusCode, b)
		}
	}
}

// listen.allow_uids on the gRPC Unix socket and the ring socket: a process whose
// uid is listed is served; one whose uid is not is refused, logged and counted.
// vig's own uid stands in for both (listed or not), so no uid change is needed.
func TestPeerAllowlist(t *testing.T) {
	me := uint32(os.Getuid())
	for _, admitted := range []bool{true, false} {
		allowed := me
		if !admitted {
			allowed = me + 4242
		}
		dir := t.TempDir()
		ring := ""
		if _, err := shmring.Probe(); err == nil {
			ring = fmt.Sprintf("@vig-allowlist-test-%d-%d", os.Getpid(), time.Now().UnixNano())
		} else {
			t.Logf("no shared memory for rings (%v): only the gRPC socket is checked", err)
		}
		addrs, cfg := startServe(t, fmt.Sprintf(`
listen: {grpc: "off", unix: %s/vig.sock, ring: %q, metrics: "127.0.0.1:0", allow_uids: [%d]}
backend: {address: "127.0.0.1:0", embedded: true, stats_interval_ms: -1}
models: {det: {exec_ms: 1}}
`, dir, ring, allowed))
		cc, err := grpc.NewClient("unix://"+dir+"/vig.sock", append(gateway.DialOptions(cfg.GRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = pb.NewGRPCInferenceServiceClient(cc).ServerLive(ctx, &pb.ServerLiveRequest{})
		cancel()
		if admitted && err != nil {
			t.Errorf("uid %d listed: %v", me, err)
		}
		if !admitted && status.Code(err) != codes.Unavailable {
			t.Errorf("uid %d not listed: %v, want UNAVAILABLE (connection closed)", me, err)
		}
		if ring != "" {
			s, err := shmring.Dial(addrs["ring"], shmring.DialOptions{Timeout: 5 * time.Second})
			if admitted && err != nil {
				t.Errorf("ring, uid %d listed: %v", me, err)
			}
			if !admitted && (err == nil || !strings.Contains(err.Error(), "listen.allow_uids")) {
				t.Errorf("ring, uid %d not listed: %v, want a refusal naming listen.allow_uids", me, err)
			}
			if s != nil {
				s.Close()
			}
		}
		resp, err := http.Get("http://" + addrs["metrics"] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		unixRefused := strings.Contains(string(b), `vig_access_refused_total{listener="unix",reason="peer"}`)
		ringRefused := strings.Contains(string(b), `vig_access_refused_total{listener="ring",reason="peer"} 1`)
		if unixRefused == admitted || (ring != "" && ringRefused == admitted) {
			t.Errorf("admitted=%v: refusals counted unix %v ring %v", admitted, unixRefused, ringRefused)
		}
	}
}
