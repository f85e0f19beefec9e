package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/vig-edge/vig/agent/access"
	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/shmring"
)

// exposure is what vig serve needs to apply the listen: section's access rules:
// the TLS configuration of the TCP listeners, the bearer token and the peer
// allowlist of the Unix sockets. The config validated the combination; this reads
// the files.
type exposure struct {
	tls   *tls.Config // nil: plain text (loopback, or listen.insecure)
	token *access.Token
	peers access.Peers
}

// configError is a problem with a file the config names: vig serve exits 2, as
// for any other config error.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

func keyError(file, key, path string, err error, fix string) error {
	return configError{fmt.Errorf("%s: %s %q: %v (%s)", file, key, path, err, fix)}
}

// loadExposure reads the certificate, key, client CA and token files of l. file
// names the config in errors.
func loadExposure(file string, l config.Listen, log *slog.Logger) (*exposure, error) {
	e := &exposure{peers: access.Peers{UIDs: l.AllowUIDs, GIDs: l.AllowGIDs}}
	for key, addr := range map[string]string{"listen.grpc": l.GRPC, "listen.metrics": l.Metrics} {
		if addr != "" && !config.Loopback(addr) && l.Insecure {
			log.Warn("listen.insecure: serving a network address in plain text; anyone who reaches it can run inference and register shared memory",
				"key", key, "address", addr, "token", l.Auth.TokenFile != "")
		}
	}
	if l.TLS.Enabled() {
		cert, err := tls.LoadX509KeyPair(l.TLS.CertFile, l.TLS.KeyFile)
		if err != nil {
			return nil, keyError(file, "listen.tls.cert_file", l.TLS.CertFile, err,
				"give a PEM certificate chain and, in listen.tls.key_file, its PEM private key")
		}
		e.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if l.TLS.ClientCAFile != "" {
			pem, err := os.ReadFile(l.TLS.ClientCAFile)
			if err != nil {
				return nil, keyError(file, "listen.tls.client_ca_file", l.TLS.ClientCAFile, err, "give the PEM certificates of the CAs that sign client certificates")
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, keyError(file, "listen.tls.client_ca_file", l.TLS.ClientCAFile, errors.New("no PEM certificate in it"),
					"give the PEM certificates of the CAs that sign client certificates")
			}
			e.tls.ClientCAs = pool
			e.tls.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	if f := l.Auth.TokenFile; f != "" {
		st, err := os.Stat(f)
		if err == nil && st.Mode().Perm()&0o077 != 0 {
			log.Warn("the token file is readable by other users: chmod 600 it", "file", f, "mode", st.Mode().Perm().String())
		}
		data, err := os.ReadFile(f)
		if err == nil {
			e.token, err = access.NewToken(data)
		}
		if err != nil {
			return nil, keyError(file, "listen.auth.token_file", f, err, "give a file holding one bearer token")
		}
	}
	return e, nil
}

// listener wraps a listener vig serve opened: TLS on the TCP listeners (with
// ALPN h2 for gRPC, http/1.1 for metrics), the peer allowlist on listen.unix.
func (e *exposure) listener(name string, ln net.Listener, log *slog.Logger, reg *metrics.Registry) net.Listener {
	switch name {
	case "grpc", "metrics", "http":
		if e.tls == nil {
			return ln
		}
		c := e.tls.Clone()
		c.NextProtos = []string{"h2"}
		if name != "grpc" {
			c.NextProtos = []string{"http/1.1"}
		}
		return tls.NewListener(ln, c)
	case "unix", "http_unix":
		return e.peers.Listener(ln, log, func(error) { reg.Refused(name, "peer") })
	}
	return ln
}

// metricsHandler puts the bearer token, when configured, in front of h.
func (e *exposure) metricsHandler(h http.Handler, log *slog.Logger, reg *metrics.Registry) http.Handler {
	if e.token == nil {
		return h
	}
	return e.token.HTTP(h, func(r *http.Request, err error) {
		reg.Refused("metrics", "token")
		log.Debug("metrics: refusing scrape", "remote", r.RemoteAddr, "err", err)
	})
}

// httpHandler puts the bearer token, when configured, in front of the HTTP/REST
// frontend, refusing as Triton's HTTP server words errors ({"error": …}, 401);
// health checks stay open, as for gRPC.
func (e *exposure) httpHandler(h http.Handler, log *slog.Logger, reg *metrics.Registry) http.Handler {
	if e.token == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/health/live" && r.URL.Path != "/v2/health/ready" {
			if err := e.token.Check(r.Header.Get("Authorization")); err != nil {
				reg.Refused("http", "token")
				log.Debug("http: refusing request", "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
				b, _ := json.Marshal(map[string]string{"error": "unauthorized: " + err.Error()})
				w.Header().Set("WWW-Authenticate", `Bearer realm="vig"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				w.Write(b)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// authorizeRing checks a ring client against the peer allowlist (the ring
// listener logs the refusal and tells the client why).
func (e *exposure) authorizeRing(reg *metrics.Registry) func(shmring.PeerCred) error {
	if !e.peers.Restricted() {
		return nil
	}
	return func(p shmring.PeerCred) error {
		if err := e.peers.Check(p.UID, p.GID, true); err != nil {
			reg.Refused("ring", "peer")
			return err
		}
		return nil
	}
}
