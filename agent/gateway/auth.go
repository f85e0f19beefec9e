package gateway

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// authorize applies Options.Token to a new RPC (on the connection's reader
// goroutine, once per stream, before anything reaches the backend). meta is the
// stream's forwarded metadata as name/value pairs: the authorization header is
// vig's credential, not the backend's, so it is removed whether or not it is
// right. Health checks stay open, so that an orchestrator can probe vig without
// the token; they reveal only whether vig serves.
func (g *Gateway) authorize(path string, meta *[]string) error {
	t := g.opts.Token
	if t == nil {
		return nil
	}
	var header string
	m := *meta
	for i := 0; i+1 < len(m); {
		if m[i] == "authorization" {
			header = m[i+1]
			m = append(m[:i], m[i+2:]...)
			continue
		}
		i += 2
	}
	*meta = m
	if path == "/grpc.health.v1.Health/Check" || path == "/grpc.health.v1.Health/Watch" {
		return nil
	}
	if err := t.Check(header); err != nil {
		g.m.Refused("grpc", "token")
		return status.Errorf(codes.Unauthenticated, "%s: %v", shortName(path), err)
	}
	return nil
}
