package restfront_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
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

// Connections over MaxConns are answered 503 with Triton's error body and
// closed; a place comes back when a connection closes.
func TestConnectionCap(t *testing.T) {
	r := newRig(t, restfront.Options{MaxConns: 4}, nil)
	for range 4 {
		conn, _ := r.rawConn(t)
		io.WriteString(conn, "GET /v2/health/live HTTP/1.1\r\nHost: vig\r\n") // half a head, held open
	}
	for deadline := time.Now().Add(30 * time.Second); r.accepted.Load() < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("accepted %d connections, want 4", r.accepted.Load())
		}
		time.Sleep(time.Millisecond)
	}
	extra, br := r.rawConn(t)
	io.WriteString(extra, "GET /v2/health/live HTTP/1.1\r\nHost: vig\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/json" || !bytes.Contains(body, []byte(`"error":`)) ||
		!bytes.Contains(body, []byte("rest.max_conns")) {
		t.Errorf("connection over the cap: HTTP %d %s %s, want 503 with an error body", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the connection over the cap stayed open")
	}
}

// A place is given back when a connection closes: after the held ones close,
// new clients are served (the close reaches vig asynchronously: polled, with
// a hang guard).
func TestConnectionCapFrees(t *testing.T) {
	r := newRig(t, restfront.Options{MaxConns: 2}, nil)
	live := func() int {
		conn, br := r.rawConn(t)
		defer conn.Close()
		io.WriteString(conn, "GET /v2/health/live HTTP/1.1\r\nHost: vig\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for round := range 5 {
		for deadline := time.Now().Add(30 * time.Second); live() != http.StatusOK; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no place came back after the connections closed", round)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// JSON parses are bounded: with the one turn taken (a parse in progress), a
// JSON request with tensors waits for it, while a binary request (its header
// small) is served meanwhile, and so is a compressed body still arriving
// (reading holds no turn: a slow client does not block parses).
func TestJSONParsesBounded(t *testing.T) {
	r := newRig(t, restfront.Options{MaxJSONParses: 1}, nil)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"id":"cam#1","inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[1],"data":[1]}]}`))
	zw.Close()
	slow, slowBr := r.rawConn(t)
	fmt.Fprintf(slow, "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", gz.Len())
	slow.Write(gz.Bytes()[:10])

	giveBack := r.fe.TakeParseTurn()
	n := 20000 // 40 KB of JSON: over the size parsed without a turn
	heavy, _ := json.Marshal(obj{"id": id(2), "inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{n}, "data": make([]int, n)}}})
	done := make(chan reply, 1)
	go func() { done <- r.do(t, "POST", "/v2/models/det/infer", heavy, nil) }()

	body, h := binaryBody(t, obj{"id": id(3), "inputs": []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{4}, "parameters": obj{"binary_data_size": 4}}}}, []byte{1, 2, 3, 4})
	if rep := r.do(t, "POST", "/v2/models/det/infer", body, h); rep.code != http.StatusOK {
		t.Fatalf("binary request while the turn is taken: HTTP %d %s", rep.code, rep.body)
	}
	select {
	case rep := <-done:
		t.Fatalf("a JSON request with tensors was parsed while the only turn was taken: HTTP %d", rep.code)
	case <-time.After(200 * time.Millisecond):
	}
	giveBack()
	if rep := <-done; rep.code != http.StatusOK {
		t.Errorf("waiting request: HTTP %d %s", rep.code, rep.body)
	}
	// The slow compressed body held no turn meanwhile: it is parsed once whole.
	slow.Write(gz.Bytes()[10:])
	resp, err := http.ReadResponse(slowBr, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("slow compressed request: HTTP %d", resp.StatusCode)
	}
}

// A body that stops arriving is answered when the read timeout passes, with
// the setting to change and without the connection's socket addresses.
func TestSlowBodyError(t *testing.T) {
	r := newRig(t, restfront.Options{ReadTimeout: 300 * time.Millisecond}, nil)
	conn, br := r.rawConn(t)
	io.WriteString(conn, "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nContent-Length: 100\r\n\r\n{\"inputs\"")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte("read_timeout_s")) || bytes.Contains(body, []byte("127.0.0.1")) {
		t.Errorf("slow body: HTTP %d %s, want 400 naming the setting and no address", resp.StatusCode, body)
	}
}
