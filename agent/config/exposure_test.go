package config

import (
	"errors"
	"strings"
	"testing"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9001":        true,
		"127.1.2.3:9001":        true,
		"[::1]:9001":            true,
		"[::ffff:127.0.0.1]:90": true,
		"localhost:9001":        true,
		"LocalHost:9001":        true,
		"0.0.0.0:9001":          false,
		"[::]:9001":             false,
		":9001":                 false,
		"192.168.1.20:9001":     false,
		"[fe80::1%eth0]:9001":   false,
		"[2001:db8::1]:9001":    false,
		"robot.local:9001":      false,
		"localhost.evil:9001":   false,
		"not an address":        false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// Every exposure that the rules refuse is an error naming the key, its line and
// the fix; every accepted form parses.
func TestExposureErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       []string // substrings of the error
	}{
		{"ipv4 any", "listen:\n  grpc: \"0.0.0.0:9001\"\n", 2, []string{"listen.grpc", `"0.0.0.0:9001" is reachable from other machines`, "listen.tls.cert_file", "listen.insecure: true"}},
		{"ipv6 any", "listen:\n  metrics: \"[::]:9090\"\n", 2, []string{"listen.metrics", "plain text", "127.0.0.1"}},
		{"empty host", "listen: {grpc: \":9001\"}\n", 1, []string{"listen.grpc", `":9001"`}},
		{"interface address", "listen:\n  grpc: \"127.0.0.1:9001\"\n  metrics: \"192.168.1.20:9090\"\n", 3, []string{"listen.metrics"}},
		{"ipv6 address", "listen:\n  grpc: \"[2001:db8::1]:9001\"\n", 2, []string{"listen.grpc"}},
		{"host name", "listen:\n  grpc: \"robot.local:9001\"\n", 2, []string{"listen.grpc", "robot.local"}},
		{"cert without key", "listen:\n  grpc: \"0.0.0.0:1\"\n  tls:\n    cert_file: /etc/vig/cert.pem\n", 3, []string{"listen.tls.key_file", "missing", "cert.pem"}},
		{"key without cert", "listen:\n  tls:\n    key_file: /etc/vig/key.pem\n", 2, []string{"listen.tls.cert_file", "missing"}},
		{"client ca without tls", "listen:\n  tls:\n    client_ca_file: /etc/vig/ca.pem\n", 3, []string{"listen.tls.client_ca_file", "set tls.cert_file and tls.key_file"}},
		{"insecure and tls", "listen:\n  insecure: true\n  tls: {cert_file: c, key_file: k}\n", 2, []string{"listen.insecure", "drop one"}},
		{"tls without tcp", "listen:\n  grpc: \"off\"\n  metrics: \"off\"\n  unix: /tmp/v.sock\n  tls: {cert_file: c, key_file: k}\n", 5, []string{"listen.tls", "all are off"}},
		{"allow list without unix", "listen:\n  allow_gids: [1000]\n", 2, []string{"listen.allow_gids", "listen.unix, listen.http_unix and listen.ring"}},
		{"no request listener", "listen: {grpc: \"off\"}\n", 1, []string{"listen.grpc, listen.unix, listen.http and listen.http_unix are all off"}},
		{"http exposed", "listen:\n  http: \"0.0.0.0:9000\"\n", 2, []string{"listen.http", "plain text"}},
		{"http not host:port", "listen:\n  http: \"9000\"\n", 2, []string{"listen.http", "not host:port"}},
		{"negative uid", "listen:\n  unix: /tmp/v.sock\n  allow_uids: [-1]\n", 3, []string{"listen.allow_uids[0]", "-1 is not a whole number, 0 or more", "allow_uids: [1000]"}},
		{"unknown tls key", "listen:\n  tls:\n    cert: c\n", 3, []string{`unknown key "cert"`, "cert_file, client_ca_file, key_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("vig.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *config.Error", err)
			}
			if e.Line != tc.line {
				t.Errorf("line = %d, want %d (%v)", e.Line, tc.line, err)
			}
			if !strings.HasPrefix(err.Error(), "vig.yaml:") {
				t.Errorf("error %q does not start with the file", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestExposureAccepted(t *testing.T) {
	for _, y := range []string{
		"log: {level: info}\n",                 // defaults: loopback only
		"listen: {grpc: \"localhost:9001\"}\n", // loopback by name
		"listen: {grpc: \"[::1]:9001\"}\n",     // IPv6 loopback
		"listen: {grpc: \"0.0.0.0:9001\", insecure: true}\n",
		"listen: {grpc: \"0.0.0.0:9001\", metrics: \"[::]:9090\", tls: {cert_file: c.pem, key_file: k.pem}}\n",
		"listen: {grpc: \"0.0.0.0:9001\", tls: {cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem}, auth: {token_file: t}}\n",
		"listen: {grpc: \"off\", unix: /tmp/v.sock, allow_uids: [0, 1000], allow_gids: [3003]}\n",
		"listen: {ring: \"@vig-ring\", allow_uids: [1000]}\n",
		"listen: {grpc: \"off\", http: \"127.0.0.1:9000\"}\n",                        // HTTP alone serves requests
		"listen: {grpc: \"off\", http_unix: /tmp/v-http.sock, allow_uids: [1000]}\n", // and on a Unix socket
		"listen: {http: \"0.0.0.0:9000\", tls: {cert_file: c.pem, key_file: k.pem}}\n",
	} {
		c, err := Parse("ok.yaml", []byte(y))
		if err != nil {
			t.Errorf("%q: %v", y, err)
			continue
		}
		if !c.Listen.TLS.Enabled() && !c.Listen.Insecure {
			for _, a := range []string{c.Listen.GRPC, c.Listen.Metrics, c.Listen.HTTP} {
				if a != "" && !Loopback(a) {
					t.Errorf("%q: %s is exposed in plain text", y, a)
				}
			}
		}
	}
	c, _ := Parse("d.yaml", []byte("log: {level: info}\n"))
	if !Loopback(c.Listen.GRPC) || !Loopback(c.Listen.Metrics) || c.Listen.Unix != "" || c.Listen.Ring != "" || c.Listen.HTTP != "" || c.Listen.HTTPUnix != "" {
		t.Errorf("defaults expose vig: %+v", c.Listen)
	}
}
