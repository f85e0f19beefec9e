// Package access decides who may talk to vig: bearer tokens for gRPC calls and
// metrics scrapes, and a uid/gid allowlist for the peers of vig's Unix sockets
// (the gRPC socket and the shared-memory ring socket).
//
// It holds policy only. The peer's credentials come from the kernel (SO_PEERCRED,
// read by netopt and shmring when a connection is accepted); the token comes from
// a file vig serve reads at start. Every refusal is logged by the caller and
// counted through an OnRefuse hook, so a misconfigured client shows up in the
// metrics instead of only as a failing client.
package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
)

// Token is a bearer token. The zero value is not useful; use NewToken.
type Token struct {
	// sum is the token's SHA-256: comparing digests of equal length in
	// constant time reveals neither the token's bytes nor its length.
	sum [sha256.Size]byte
}

// NewToken returns the token held in secret (a token file's contents; white space
// around it is ignored). An empty or multi-line token is an error.
func NewToken(secret []byte) (*Token, error) {
	s := strings.TrimSpace(string(secret))
	switch {
	case s == "":
		return nil, errors.New("the token file is empty: write a random token into it (e.g. head -c 32 /dev/urandom | base64 > FILE)")
	case strings.ContainsAny(s, " \t\r\n"):
		return nil, errors.New("the token contains white space: HTTP headers carry one word; write a single line with no spaces")
	}
	return &Token{sum: sha256.Sum256([]byte(s))}, nil
}

// Errors of Check, for callers that map them to their protocol's status.
var (
	ErrNoToken    = errors.New(`no "authorization: Bearer <token>" header: this vig requires a bearer token (listen.auth.token_file)`)
	ErrBadScheme  = errors.New(`the authorization header is not "Bearer <token>"`)
	ErrWrongToken = errors.New("the bearer token is wrong")
)

// Check verifies an authorization header's value ("" when the header is absent).
func (t *Token) Check(header string) error {
	if header == "" {
		return ErrNoToken
	}
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ErrBadScheme
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(sum[:], t.sum[:]) != 1 {
		return ErrWrongToken
	}
	return nil
}

// HTTP wraps h so that every request must carry the token; others get 401 with a
// WWW-Authenticate challenge. onRefuse, when not nil, is called for each refusal.
func (t *Token) HTTP(h http.Handler, onRefuse func(r *http.Request, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := t.Check(r.Header.Get("Authorization")); err != nil {
			if onRefuse != nil {
				onRefuse(r, err)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="vig"`)
			http.Error(w, "401 unauthorized: "+err.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Peers is an allowlist of local processes by credentials. A peer is admitted
// when its uid is in UIDs or its gid is in GIDs. An empty Peers admits everyone
// (the socket's file mode is then the only gate).
type Peers struct {
	UIDs, GIDs []uint32
}

// Restricted reports whether the allowlist refuses anyone.
func (p Peers) Restricted() bool { return len(p.UIDs) > 0 || len(p.GIDs) > 0 }

// ErrPeerUnknown is returned for a peer whose credentials could not be read.
var ErrPeerUnknown = errors.New("peer credentials unknown (SO_PEERCRED failed)")

// Check admits or refuses a peer. known is false when its credentials could not
// be read: such a peer is refused by a restricted list.
func (p Peers) Check(uid, gid uint32, known bool) error {
	if !p.Restricted() {
		return nil
	}
	if !known {
		return ErrPeerUnknown
	}
	if slices.Contains(p.UIDs, uid) || slices.Contains(p.GIDs, gid) {
		return nil
	}
	return fmt.Errorf("uid %d gid %d is not in listen.allow_uids %v or listen.allow_gids %v: add it there to admit this process", uid, gid, p.UIDs, p.GIDs)
}

// PeerCred is implemented by the net.Addr of connections whose peer credentials
// the kernel reported (netopt's Unix-socket connections).
type PeerCred interface {
	PeerCred() (uid, gid uint32, ok bool)
}

// Listener returns ln with every accepted connection checked against p: a refused
// peer is logged, reported to onRefuse (when not nil), closed, and Accept moves on
// to the next one. A connection whose address carries no credentials counts as
// unknown. With an unrestricted p, ln is returned as is.
func (p Peers) Listener(ln net.Listener, log *slog.Logger, onRefuse func(error)) net.Listener {
	if !p.Restricted() {
		return ln
	}
	if log == nil {
		log = slog.Default()
	}
	return &peerListener{Listener: ln, p: p, log: log, onRefuse: onRefuse}
}

type peerListener struct {
	net.Listener
	p        Peers
	log      *slog.Logger
	onRefuse func(error)
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var uid, gid uint32
		var known bool
		if pc, ok := c.RemoteAddr().(PeerCred); ok {
			uid, gid, known = pc.PeerCred()
		}
		if err := l.p.Check(uid, gid, known); err != nil {
			l.log.Warn("refusing connection", "listener", l.Addr().String(), "peer", c.RemoteAddr().String(), "err", err)
			if l.onRefuse != nil {
				l.onRefuse(err)
			}
			c.Close()
			continue
		}
		return c, nil
	}
}
