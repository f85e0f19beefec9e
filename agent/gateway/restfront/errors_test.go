package restfront_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/gateway/restfront"
)

// Bad requests are answered 4xx with Triton's error body and the reason, and
// nothing reaches the backend.
func TestBadRequests(t *testing.T) {
	r := newRig(t, restfront.Options{MaxBody: 1 << 20}, nil)
	in := func(params obj) []obj {
		return []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{4}, "parameters": params}}
	}
	j := func(v any) []byte { b, _ := json.Marshal(v); return b }
	ihcl := func(n string) map[string]string { return map[string]string{"Inference-Header-Content-Length": n} }
	good := j(obj{"inputs": in(obj{"binary_data_size": 4})})
	bin := append(append([]byte(nil), good...), 1, 2, 3, 4)
	for _, c := range []struct {
		name   string
		body   []byte
		header map[string]string
		code   int
		reason string
	}{
		{"element count", j(obj{"inputs": []obj{{"name": "I", "datatype": "FP32", "shape": []int{2, 3}, "data": []float64{1, 2, 3, 4, 5}}}}), nil, 400, "5 elements"},
		{"nested element count", j(obj{"inputs": []obj{{"name": "I", "datatype": "INT32", "shape": []int{2, 2}, "data": [][]int{{1, 2}, {3}}}}}), nil, 400, "3 elements"},
		{"string in numbers", j(obj{"inputs": []obj{{"name": "I", "datatype": "INT32", "shape": []int{1}, "data": []string{"1"}}}}), nil, 400, "not a number"},
		{"int out of range", j(obj{"inputs": []obj{{"name": "I", "datatype": "UINT8", "shape": []int{1}, "data": []int{256}}}}), nil, 400, "out of range"},
		{"object in data", []byte(`{"inputs":[{"name":"I","datatype":"INT32","shape":[1],"data":[{"a":1}]}]}`), nil, 400, "object"},
		{"unknown datatype", j(obj{"inputs": []obj{{"name": "I", "datatype": "FP8", "shape": []int{1}, "data": []int{1}}}}), nil, 400, "datatype"},
		{"no data", j(obj{"inputs": []obj{{"name": "I", "datatype": "INT32", "shape": []int{1}}}}), nil, 400, "no 'data'"},
		{"null data", []byte(`{"inputs":[{"name":"I","datatype":"UINT8","shape":[0],"data":null}]}`), nil, 400, "'data' is null"},
		{"null data beside binary", []byte(`{"inputs":[{"name":"I","datatype":"UINT8","shape":[4],"data":null,"parameters":{"binary_data_size":4}}]}`), nil, 400, "'data' is null"},
		{"negative dim", j(obj{"inputs": []obj{{"name": "I", "datatype": "INT32", "shape": []int{-1}, "data": []int{1}}}}), nil, 400, "negative"},
		{"no inputs", []byte(`{}`), nil, 400, "no inputs"},
		{"bad json", []byte(`{"inputs": [`), nil, 400, "JSON"},
		{"trailing bytes", []byte(`{"inputs":[]} {}`), nil, 400, "after top-level value"},
		{"header length not a number", bin, ihcl("abc"), 400, "Inference-Header-Content-Length"},
		{"header length negative", bin, ihcl("-1"), 400, "Inference-Header-Content-Length"},
		{"header length past the body", bin, ihcl("100000"), 400, "larger than"},
		{"header length too short", bin, ihcl("10"), 400, "JSON"},
		{"binary bytes unclaimed", append(append([]byte(nil), bin...), 5, 6), ihcl(itoa(len(good))), 400, "after the last input"},
		{"binary past the end", bin[:len(bin)-1], ihcl(itoa(len(good))), 400, "past the end"},
		{"data and binary", j(obj{"inputs": []obj{{"name": "I", "datatype": "UINT8", "shape": []int{1}, "data": []int{1}, "parameters": obj{"binary_data_size": 1}}}}), nil, 400, "both"},
		{"bad binary_data_size", j(obj{"inputs": in(obj{"binary_data_size": "4"})}), nil, 400, "binary_data_size"},
		{"bad binary_data", j(obj{"inputs": in(obj{"binary_data_size": 0}), "outputs": []obj{{"name": "OUTPUT0", "parameters": obj{"binary_data": 1}}}}), nil, 400, "binary_data"},
		{"bad vig_stream", j(obj{"inputs": []obj{{"name": "I", "datatype": "UINT8", "shape": []int{1}, "data": []int{1}}}, "parameters": obj{"vig_stream": 3}}), nil, 400, "vig_stream"},
		// A client sending a body vig refuses unread should ask first, as curl does
		// above 1 MiB: without Expect, vig's close can reset the connection while the
		// client is still writing, before it reads the 413 (seen once in a fresh clone).
		{"over-long body", make([]byte, 2<<20), map[string]string{"Expect": "100-continue"}, 413, "limit"},
		{"unknown encoding", good, map[string]string{"Content-Encoding": "br"}, 501, "Content-Encoding"},
		{"bad gzip", good, map[string]string{"Content-Encoding": "gzip"}, 400, "gzip"},
	} {
		before := r.toBack.Load()
		rep := r.do(t, "POST", "/v2/models/det/infer", c.body, c.header)
		var e struct{ Error string }
		if err := json.Unmarshal(rep.body, &e); err != nil || e.Error == "" {
			t.Errorf("%s: body %q is not {\"error\": …}", c.name, rep.body)
		}
		if rep.code != c.code || !strings.Contains(e.Error, c.reason) {
			t.Errorf("%s: HTTP %d %q, want %d naming %q", c.name, rep.code, e.Error, c.code, c.reason)
		}
		if c.code == 501 && rep.header.Get("Accept-Encoding") != "gzip, deflate" {
			t.Errorf("%s: Accept-Encoding %q, want the encodings vig reads", c.name, rep.header.Get("Accept-Encoding"))
		}
		if d := r.toBack.Load() - before; d >= maxControlBytes {
			t.Errorf("%s: %d bytes forwarded to the backend", c.name, d)
		}
	}

	// A model the backend does not serve: the backend's NOT_FOUND, 404.
	rep := r.do(t, "POST", "/v2/models/nope/infer", bin, ihcl(itoa(len(good))))
	if rep.code != http.StatusNotFound || !bytes.Contains(rep.body, []byte("nope")) || rep.header.Get("Vig-Code") != "NOT_FOUND" {
		t.Errorf("unknown model: HTTP %d %s (Vig-Code %q), want 404 naming it", rep.code, rep.body, rep.header.Get("Vig-Code"))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A gzip bomb (100 MB of zeros in ~100 KB) is cut at the body limit, not
// inflated into memory.
func TestGzipBomb(t *testing.T) {
	r := newRig(t, restfront.Options{MaxBody: 1 << 20}, nil)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zero := make([]byte, 1<<20)
	for range 100 {
		zw.Write(zero)
	}
	zw.Close()
	rep := r.do(t, "POST", "/v2/models/det/infer", buf.Bytes(), map[string]string{"Content-Encoding": "gzip"})
	if rep.code != http.StatusRequestEntityTooLarge || !bytes.Contains(rep.body, []byte("after decompression")) {
		t.Errorf("gzip bomb of %d bytes: HTTP %d %s, want 413", buf.Len(), rep.code, rep.body)
	}
}

// rawConn is a TCP connection to the REST frontend for hand-written requests.
func (r *rig) rawConn(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second)) // a hang guard, not a timing claim
	return c, bufio.NewReader(c)
}

// Hostile HTTP: a 10 GB Content-Length is refused before the body is read, a
// header block over the limit is refused, a request with both Content-Length and
// Transfer-Encoding is refused (smuggle_test.go), malformed request lines are refused.
func TestHostileHTTP(t *testing.T) {
	r := newRig(t, restfront.Options{MaxBody: 1 << 20, MaxHeaderBytes: 8 << 10}, nil)
	for _, c := range []struct {
		name, req string
		code      int
	}{
		{"10 GB Content-Length", "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nContent-Length: 10737418240\r\n\r\n", 413},
		{"huge header", "GET /v2 HTTP/1.1\r\nHost: vig\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", 431},
		{"two Content-Lengths", "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", 400},
		{"bad request line", "GET\r\n\r\n", 400},
		{"header without colon", "GET /v2 HTTP/1.1\r\nHost: vig\r\nbroken\r\n\r\n", 400},
		{"chunked over the limit", "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks(2<<20), 413},
		{"unsupported Transfer-Encoding", "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"no Host", "GET /v2 HTTP/1.1\r\n\r\n", 400},
	} {
		conn, br := r.rawConn(t)
		io.WriteString(conn, c.req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s: HTTP %d %s, want %d", c.name, resp.StatusCode, body, c.code)
		}
		// Go's own answers too: Triton's JSON error body.
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %s body %q, want {\"error\": …} as application/json", c.name, resp.Header.Get("Content-Type"), body)
		}
	}
}

func chunks(n int) string {
	var b strings.Builder
	chunk := strings.Repeat("x", 64<<10)
	for n > 0 {
		b.WriteString("10000\r\n" + chunk + "\r\n")
		n -= len(chunk)
	}
	return b.String() + "0\r\n\r\n"
}

// A client that sends its headers slowly (slowloris), and a kept-alive
// connection left idle, are closed by vig; neither holds a request open.
func TestSlowAndIdleClients(t *testing.T) {
	r := newRig(t, restfront.Options{HeaderTimeout: 200 * time.Millisecond, ReadTimeout: 2 * time.Second, IdleTimeout: 200 * time.Millisecond}, nil)
	conn, br := r.rawConn(t)
	io.WriteString(conn, "GET /v2 HTTP/1.1\r\nHost: vig\r\n") // and never the blank line
	for {
		if _, err := io.WriteString(conn, "X-Drip: 1\r\n"); err != nil {
			break
		}
		if _, err := br.Peek(1); err != nil || br.Buffered() > 0 {
			break // closed (or answered 408 then closed)
		}
	}
	if _, err := io.ReadAll(br); err != nil && !isClosed(err) {
		t.Errorf("slowloris connection: %v, want it closed by vig", err)
	}

	conn2, br2 := r.rawConn(t)
	io.WriteString(conn2, "GET /v2/health/live HTTP/1.1\r\nHost: vig\r\n\r\n")
	resp, err := http.ReadResponse(br2, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("live: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := br2.ReadByte(); err == nil {
		t.Errorf("idle connection got a byte; want it closed")
	}
}

func isClosed(err error) bool {
	var ne net.Error
	return err == io.EOF || strings.Contains(err.Error(), "reset") || (errorsAs(err, &ne) && !ne.Timeout())
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// Member names are matched exactly, as Triton's parser does: "Inputs" is not
// "inputs" (encoding/json alone takes it for it), so the request has none.
func TestCaseSensitiveKeys(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	for _, c := range []struct {
		name, body string
		code       int
	}{
		{"Inputs", `{"Inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[1],"data":[1]}]}`, 400},
		{"escaped Inputs", `{"\u0049nputs":[{"name":"INPUT0","datatype":"UINT8","shape":[1],"data":[1]}]}`, 400},
		{"NAME", `{"inputs":[{"NAME":"INPUT0","datatype":"UINT8","shape":[1],"data":[1]}]}`, 400},
		{"Data", `{"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[1],"Data":[1]}]}`, 400},
		{"exact names, a value that folds to one", `{"id":"cam#1","parameters":{"vig_stream":"cam","x":"DATA"},"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[1],"data":[1]}]}`, 200},
		{"escaped exact name", `{"id":"cam#2","parameters":{"vig_stream":"cam"},"\u0069nputs":[{"name":"INPUT0","datatype":"UINT8","shape":[1],"data":[1]}]}`, 200},
	} {
		rep := r.do(t, "POST", "/v2/models/det/infer", []byte(c.body), nil)
		if rep.code != c.code {
			t.Errorf("%s: HTTP %d %s, want %d", c.name, rep.code, rep.body, c.code)
		}
	}
}
