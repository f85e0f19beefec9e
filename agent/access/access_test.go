package access

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestNewToken(t *testing.T) {
	for _, bad := range []string{"", " \n\t", "two words", "line1\nline2"} {
		if _, err := NewToken([]byte(bad)); err == nil {
			t.Errorf("NewToken(%q) accepted", bad)
		}
	}
	tok, err := NewToken([]byte("  s3cr3t\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Check("Bearer s3cr3t"); err != nil {
		t.Errorf("white space around the file's token not ignored: %v", err)
	}
}

func TestTokenCheck(t *testing.T) {
	tok, err := NewToken([]byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	for header, want := range map[string]error{
		"Bearer s3cr3t":  nil,
		"bearer s3cr3t":  nil, // the scheme is case-insensitive (RFC 9110 §11.1)
		"":               ErrNoToken,
		"Bearer":         ErrBadScheme,
		"Basic s3cr3t":   ErrBadScheme,
		"s3cr3t":         ErrBadScheme,
		"Bearer s3cr3":   ErrWrongToken, // a prefix
		"Bearer s3cr3tt": ErrWrongToken,
		"Bearer S3CR3T":  ErrWrongToken, // the token is not
		"Bearer ":        ErrWrongToken,
	} {
		if got := tok.Check(header); !errors.Is(got, want) {
			t.Errorf("Check(%q) = %v, want %v", header, got, want)
		}
	}
}

func TestTokenHTTP(t *testing.T) {
	tok, _ := NewToken([]byte("s3cr3t"))
	var refused []error
	h := tok.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "metrics") }),
		func(_ *http.Request, err error) { refused = append(refused, err) })
	for _, tc := range []struct {
		header string
		code   int
	}{{"", 401}, {"Bearer nope", 401}, {"Bearer s3cr3t", 200}} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("%q: status %d, want %d", tc.header, rec.Code, tc.code)
		}
		if tc.code == 401 && (rec.Header().Get("WWW-Authenticate") == "" || strings.Contains(rec.Body.String(), "metrics")) {
			t.Errorf("%q: 401 without a challenge, or with the body: %v %q", tc.header, rec.Header(), rec.Body)
		}
	}
	if len(refused) != 2 {
		t.Errorf("%d refusals reported, want 2", len(refused))
	}
}

func TestPeersCheck(t *testing.T) {
	if err := (Peers{}).Check(1234, 1234, false); err != nil {
		t.Errorf("an empty allowlist refused: %v", err)
	}
	p := Peers{UIDs: []uint32{0, 1000}, GIDs: []uint32{3003}}
	for _, tc := range []struct {
		uid, gid uint32
		known    bool
		ok       bool
	}{
		{0, 0, true, true},
		{1000, 1000, true, true},
		{2000, 3003, true, true}, // by group
		{2000, 2000, true, false},
		{1000, 1000, false, false}, // credentials unknown: never admitted
	} {
		err := p.Check(tc.uid, tc.gid, tc.known)
		if (err == nil) != tc.ok {
			t.Errorf("Check(uid %d gid %d known %v) = %v, want ok=%v", tc.uid, tc.gid, tc.known, err, tc.ok)
		}
		if err != nil && tc.known && !strings.Contains(err.Error(), "listen.allow_uids") {
			t.Errorf("refusal %q does not name the key to change", err)
		}
	}
}

// fakePeer is the address of a connection whose credentials the kernel reported.
type fakePeer struct{ uid, gid uint32 }

func (fakePeer) Network() string                    { return "unix" }
func (p fakePeer) String() string                   { return "fake peer" }
func (p fakePeer) PeerCred() (uint32, uint32, bool) { return p.uid, p.gid, true }

type peerConn struct {
	net.Conn
	addr net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.addr }

// fakeListener hands out one end of a pipe per queued peer.
type fakeListener struct {
	conns chan net.Conn
	far   chan net.Conn
}

func (l *fakeListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return fakePeer{} }

func (l *fakeListener) dial(addr net.Addr) {
	a, b := net.Pipe()
	l.conns <- peerConn{Conn: a, addr: addr}
	l.far <- b
}

// A restricted listener closes the refused peers' connections, reports each, and
// hands the admitted ones on, in order.
func TestPeersListener(t *testing.T) {
	fl := &fakeListener{conns: make(chan net.Conn, 4), far: make(chan net.Conn, 4)}
	var refused []error
	ln := Peers{UIDs: []uint32{1000}}.Listener(fl, slog.New(slog.NewTextHandler(io.Discard, nil)), func(err error) { refused = append(refused, err) })
	fl.dial(fakePeer{uid: 2000, gid: 2000}) // another user
	fl.dial(&net.UnixAddr{Name: "@x"})      // no credentials
	fl.dial(fakePeer{uid: 1000, gid: 1000})
	close(fl.conns)
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := c.RemoteAddr().(PeerCred).PeerCred(); uid != 1000 {
		t.Errorf("admitted uid %d, want 1000", uid)
	}
	if len(refused) != 2 || !errors.Is(refused[1], ErrPeerUnknown) {
		t.Errorf("refusals: %v, want uid 2000 then unknown", refused)
	}
	// The refused peers' ends see their connection closed.
	for i := 0; i < 2; i++ {
		far := <-fl.far
		far.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := far.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("refused peer %d: read %v, want EOF (closed)", i, err)
		}
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after the listener's end: %v", err)
	}
	if got := (Peers{}).Listener(fl, nil, nil); got != net.Listener(fl) {
		t.Error("an unrestricted allowlist wrapped the listener")
	}
}
