package restfront_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/gateway/restfront"
)

// inFlight scrapes vig_http_in_flight for method.
func (r *rig) inFlight(t *testing.T, method string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	r.gw.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	prefix := fmt.Sprintf("vig_http_in_flight{method=%q} ", method)
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, prefix); ok {
			return v
		}
	}
	return ""
}

// Memory follows the bytes that arrived: 24 connections each declaring a
// 64 MiB body and sending one byte of it hold a buffer's worth each, not
// 64 MiB (which took the heap to 1.5 GiB).
func TestDeclaredBodiesHoldNoMemory(t *testing.T) {
	r := newRig(t, restfront.Options{MaxBody: 64 << 20}, nil)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const conns = 24
	for range conns {
		conn, _ := r.rawConn(t)
		fmt.Fprintf(conn, "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nContent-Length: %d\r\n\r\n{", 64<<20)
	}
	for deadline := time.Now().Add(30 * time.Second); r.inFlight(t, "ModelInfer") != fmt.Sprint(conns); {
		if time.Now().After(deadline) {
			t.Fatalf("in flight: %s, want %d", r.inFlight(t, "ModelInfer"), conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // each handler into its body read
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	const budget = 32 << 20
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew %d KiB for %d connections declaring 64 MiB each", grew>>10, conns)
	if grew > budget {
		t.Errorf("heap grew %d MiB for %d connections that sent 1 byte each; budget %d MiB", grew>>20, conns, budget>>20)
	}
}

// The bytes read off the wire are bounded as the decompressed ones are: a
// stream of empty gzip members (nothing once inflated) is cut at the limit.
func TestCompressedBytesBounded(t *testing.T) {
	r := newRig(t, restfront.Options{MaxBody: 1 << 20}, nil)
	var member bytes.Buffer
	zw := gzip.NewWriter(&member)
	zw.Close()
	body := bytes.Repeat(member.Bytes(), (2<<20)/member.Len())
	// Chunked (no declared length), as a streaming client sends it.
	req, _ := http.NewRequest("POST", r.base+"/v2/models/det/infer", struct{ io.Reader }{bytes.NewReader(body)})
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(got, []byte("on the wire")) {
		t.Errorf("%d bytes of empty gzip members: HTTP %d %s, want 413", len(body), resp.StatusCode, got)
	}
}
