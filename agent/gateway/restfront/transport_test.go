package restfront_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/gateway/restfront"
	"github.com/vig-edge/vig/mockbackend"
)

func inferBody(t testing.TB, frame uint64, data []byte) ([]byte, map[string]string) {
	return binaryBody(t, obj{"id": id(frame), "parameters": obj{"vig_stream": "cam"},
		"inputs":  []obj{{"name": "INPUT0", "datatype": "UINT8", "shape": []int{len(data)}, "parameters": obj{"binary_data_size": len(data)}}},
		"outputs": []obj{{"name": "OUTPUT0", "parameters": obj{"binary_data": true}}}}, data)
}

// gzip and deflate request bodies are read; Accept-Encoding gzip and deflate
// compress the answer.
func TestCompression(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	data := frameBytes(150_000, 1)
	want := output0(mockbackend.Digest([][]byte{data}), 3)
	body, h := inferBody(t, 3, data)
	for _, enc := range []string{"gzip", "deflate"} {
		var buf bytes.Buffer
		var zw io.WriteCloser
		if enc == "gzip" {
			zw = gzip.NewWriter(&buf)
		} else {
			zw = zlib.NewWriter(&buf)
		}
		zw.Write(body)
		zw.Close()
		hh := map[string]string{"Content-Encoding": enc, "Accept-Encoding": enc}
		for k, v := range h {
			hh[k] = v
		}
		rep := r.do(t, "POST", "/v2/models/det/infer", buf.Bytes(), hh)
		if rep.header.Get("Content-Encoding") != enc {
			t.Fatalf("%s: answer Content-Encoding %q (HTTP %d %s)", enc, rep.header.Get("Content-Encoding"), rep.code, rep.body)
		}
		var zr io.Reader
		var err error
		if enc == "gzip" {
			zr, err = gzip.NewReader(bytes.NewReader(rep.body))
		} else {
			zr, err = zlib.NewReader(bytes.NewReader(rep.body))
		}
		if err != nil {
			t.Fatal(err)
		}
		rep.body, err = io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if _, bin := splitAnswer(t, rep); !bytes.Equal(bin, want) {
			t.Errorf("%s: output %x, want %x", enc, bin, want)
		}
	}
	if rep := r.do(t, "GET", "/v2/models/det", nil, map[string]string{"Accept-Encoding": "gzip;q=0, identity"}); rep.header.Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0 answered with Content-Encoding %q", rep.header.Get("Content-Encoding"))
	}
}

// Many requests on one kept-alive connection, and requests pipelined on one
// connection (all written before any answer is read), are each answered once,
// in order.
func TestKeepAliveAndPipelining(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	for i := range 200 {
		data := frameBytes(1000+i, byte(i))
		body, h := inferBody(t, uint64(i), data)
		_, bin := splitAnswer(t, r.do(t, "POST", "/v2/models/det/infer", body, h))
		if want := output0(mockbackend.Digest([][]byte{data}), uint64(i)); !bytes.Equal(bin, want) {
			t.Fatalf("request %d: %x, want %x", i, bin, want)
		}
	}
	if n := r.accepted.Load(); n != 1 {
		t.Errorf("200 requests took %d connections, want 1 (keep-alive)", n)
	}

	conn, br := r.rawConn(t)
	const n = 20
	var all bytes.Buffer
	for i := range n {
		body, h := inferBody(t, uint64(1000+i), frameBytes(100, byte(i)))
		fmt.Fprintf(&all, "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nContent-Length: %d\r\nInference-Header-Content-Length: %s\r\n\r\n", len(body), h["Inference-Header-Content-Length"])
		all.Write(body)
	}
	if _, err := conn.Write(all.Bytes()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined answer %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m, bin := splitAnswer(t, reply{resp.StatusCode, resp.Header, b})
		if m["id"] != id(uint64(1000+i)) || !bytes.Equal(bin, output0(mockbackend.Digest([][]byte{frameBytes(100, byte(i))}), uint64(1000+i))) {
			t.Errorf("pipelined answer %d: id %v", i, m["id"])
		}
	}
}

// curl, the HTTP client of shell scripts, against every kind of endpoint.
func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skipf("curl is not installed (apt-get install curl): %v", err)
	}
	r := newRig(t, restfront.Options{}, nil)
	run := func(args ...string) (code string, body []byte) {
		t.Helper()
		out, err := exec.Command(curl, append([]string{"-sS", "-w", "\n%{http_code}", "--max-time", "60"}, args...)...).Output()
		if err != nil {
			t.Fatalf("curl %v: %v", args, err)
		}
		i := bytes.LastIndexByte(out, '\n')
		return string(out[i+1:]), out[:i]
	}
	if code, _ := run(r.base + "/v2/health/ready"); code != "200" {
		t.Errorf("curl ready: %s", code)
	}
	if code, body := run(r.base + "/v2/models/det"); code != "200" || !bytes.Contains(body, []byte(`"name":"det"`)) {
		t.Errorf("curl metadata: %s %s", code, body)
	}
	code, body := run("-X", "POST", "-H", "Content-Type: application/json", "-d",
		`{"id":"cam#9","parameters":{"vig_stream":"cam"},"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[2],"data":[1,2]}]}`, r.base+"/v2/models/det/infer")
	var m struct {
		Outputs []struct{ Data []int64 }
	}
	if err := json.Unmarshal(body, &m); code != "200" || err != nil || len(m.Outputs) != 1 || m.Outputs[0].Data[1] != 9 {
		t.Errorf("curl JSON infer: %s %s", code, body)
	}
	// Binary data from a file, the answer gzip-compressed (--compressed).
	data := frameBytes(6_200_000, 4)
	req, h := inferBody(t, 11, data)
	file := filepath.Join(t.TempDir(), "req.bin")
	if err := os.WriteFile(file, req, 0o600); err != nil {
		t.Fatal(err)
	}
	hdrFile, bodyFile := filepath.Join(t.TempDir(), "h"), filepath.Join(t.TempDir(), "b")
	if err := exec.Command(curl, "-sS", "--compressed", "-D", hdrFile, "-o", bodyFile, "--max-time", "60", "--data-binary", "@"+file,
		"-H", "Inference-Header-Content-Length: "+h["Inference-Header-Content-Length"], r.base+"/v2/models/det/infer").Run(); err != nil {
		t.Fatal(err)
	}
	hdrs, _ := os.ReadFile(hdrFile)
	b, _ := os.ReadFile(bodyFile)
	hl := ""
	for _, line := range strings.Split(string(hdrs), "\r\n") { // the last answer's header wins (after 100 Continue)
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Inference-Header-Content-Length") {
			hl = strings.TrimSpace(v)
		}
	}
	if _, bin := splitAnswer(t, reply{200, http.Header{"Inference-Header-Content-Length": {hl}}, b}); !bytes.Equal(bin, output0(mockbackend.Digest([][]byte{data}), 11)) {
		t.Errorf("curl 6.2 MB binary infer: output %x", bin)
	}
	if !bytes.Contains(hdrs, []byte("Content-Encoding: gzip")) {
		t.Errorf("curl --compressed: the answer was not compressed:\n%s", hdrs)
	}
	if code, body := run(r.base + "/v2/models/nope/config"); code != "404" || !strings.Contains(string(body), `"error"`) {
		t.Errorf("curl unknown model: %s %s", code, body)
	}
}
