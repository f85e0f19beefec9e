package config

import (
	"net"
	"net/netip"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Exposure rules (section listen:). vig's gRPC port accepts inference requests and
// shared-memory registrations, and its metrics port describes the device's load:
// neither is for the network at large. By default both listen on loopback and the
// Unix socket is off. An address other machines can reach (0.0.0.0, ::, an
// interface's address, a host name other than localhost) is accepted only with TLS
// (listen.tls) or with an explicit listen.insecure: true.

// TLS configures TLS on the TCP listeners (listen.grpc and listen.metrics). The
// files are PEM; reading them is vig serve's job.
type TLS struct {
	CertFile string `yaml:"cert_file"` // the server's certificate chain
	KeyFile  string `yaml:"key_file"`  // its private key
	// ClientCAFile, when set, makes vig require a client certificate signed by
	// one of these CAs on every TCP connection.
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether the TCP listeners serve TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Auth configures bearer-token authentication.
type Auth struct {
	// TokenFile holds the token (surrounding white space is ignored). When set,
	// every gRPC call except health checks must carry "authorization: Bearer
	// <token>", and a metrics scrape the same HTTP header.
	TokenFile string `yaml:"token_file"`
}

// Line returns the line of a key of the listen: section ("grpc", "tls.cert_file"),
// or 0.
func (l Listen) Line(key string) int { return l.lines[key] }

// Loopback reports whether a listen address (host:port) is reachable from this
// machine only: a loopback IP (127.0.0.0/8, ::1, IPv4-mapped forms) or localhost.
// An empty host (":9001") means every interface; any other host name may resolve
// to anything and counts as exposed.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (l *Listen) locate(n *yaml.Node) {
	l.lines = map[string]int{"listen": n.Line}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		l.lines[k.Value] = k.Line
		if k.Value == "tls" || k.Value == "auth" {
			for j := 0; j+1 < len(v.Content); j += 2 {
				l.lines[k.Value+"."+v.Content[j].Value] = v.Content[j].Line
			}
		}
	}
}

// validate applies the exposure rules; bad reports one problem.
func (l *Listen) validate(bad func(line int, key, format string, args ...any)) {
	at := func(key string) (int, string) {
		line := l.Line(key)
		if line == 0 { // a key of a section given in one line: point at the section
			line = l.Line(strings.SplitN(key, ".", 2)[0])
		}
		return line, "listen." + key
	}
	for _, e := range []struct{ key, addr string }{{"grpc", l.GRPC}, {"metrics", l.Metrics}, {"http", l.HTTP}} {
		if e.addr == "" || Loopback(e.addr) || l.TLS.Enabled() || l.Insecure {
			continue
		}
		if _, _, err := net.SplitHostPort(e.addr); err != nil {
			continue // reported as not host:port
		}
		line, key := at(e.key)
		bad(line, key, "%q is reachable from other machines, and vig would serve it in plain text: "+
			"set listen.tls.cert_file and listen.tls.key_file to serve TLS (and listen.auth.token_file or listen.tls.client_ca_file to authenticate clients), "+
			"bind a loopback address such as 127.0.0.1 (or listen.unix for local clients), "+
			"or set listen.insecure: true to accept plain text on the network", e.addr)
	}
	t := l.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		line, key := at("tls.key_file")
		bad(line, key, "missing: tls.cert_file %q needs the matching private key file", t.CertFile)
	case t.CertFile == "" && t.KeyFile != "":
		line, key := at("tls.cert_file")
		bad(line, key, "missing: tls.key_file %q needs the matching certificate file", t.KeyFile)
	}
	if t.ClientCAFile != "" && !t.Enabled() {
		line, key := at("tls.client_ca_file")
		bad(line, key, "client certificates are verified during the TLS handshake: set tls.cert_file and tls.key_file too")
	}
	if t.Enabled() && l.Insecure {
		line, key := at("insecure")
		bad(line, key, "insecure: true asks for plain text but listen.tls is set: drop one of them")
	}
	if t.Enabled() && l.GRPC == "" && l.Metrics == "" && l.HTTP == "" {
		line, key := at("tls")
		bad(line, key, "TLS applies to listen.grpc, listen.metrics and listen.http, and all are off: drop tls or turn one on")
	}
	if (len(l.AllowUIDs) > 0 || len(l.AllowGIDs) > 0) && l.Unix == "" && l.Ring == "" && l.HTTPUnix == "" {
		k := "allow_uids"
		if len(l.AllowUIDs) == 0 {
			k = "allow_gids"
		}
		line, key := at(k)
		bad(line, key, "restricts the peers of listen.unix, listen.http_unix and listen.ring, and all are off: drop it or turn one on")
	}
}
