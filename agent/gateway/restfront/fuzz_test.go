package restfront

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/internal/fuzztest"
	"github.com/vig-edge/vig/wire"
)

// FuzzParseInfer feeds the infer request parser (the JSON header, the binary
// split by Inference-Header-Content-Length and binary_data_size, the JSON data
// conversion) arbitrary bodies. It must never panic, and a request it accepts
// must be a ModelInferRequest the gateway's own parser accepts, with one input
// per JSON input, whose raw bytes come from the body or its JSON data only.
func FuzzParseInfer(f *testing.F) {
	hdr := []byte(`{"id":"cam#1","parameters":{"vig_stream":"cam","priority":2},"inputs":[{"name":"A","datatype":"UINT8","shape":[4],"parameters":{"binary_data_size":4}},{"name":"B","datatype":"FP32","shape":[2,1],"data":[[1.5],[-2]]},{"name":"C","datatype":"BYTES","shape":[2],"data":["x","\u00e9"]}],"outputs":[{"name":"O","parameters":{"binary_data":true}}]}`)
	f.Add(append(append([]byte(nil), hdr...), 1, 2, 3, 4), len(hdr))
	f.Add([]byte(`{"inputs":[{"name":"I","datatype":"BOOL","shape":[2],"data":[true,false]}]}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"I","datatype":"INT64","shape":[1],"data":[[[9223372036854775807]]]}]}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"I","datatype":"UINT8","shape":[1],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":1}}]}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"I","datatype":"INT8","shape":[3],"data":[1,"2",{}]}]}`), -1)
	f.Fuzz(func(t *testing.T, body []byte, headerLen int) {
		defer fuzztest.Bound(t)()
		if headerLen < -1 || headerLen > len(body)+1 {
			headerLen = -1
		}
		req, err := parseInfer("m", "", body, headerLen, nil)
		if err != nil {
			return
		}
		var h wire.InferHeader
		if err := h.ParseInfer(req.msg); err != nil {
			// vig's own parameters of the wrong type and the shared-memory
			// parameter rules are the gateway's to refuse (with the gRPC path's
			// words); anything else means a malformed message.
			if msg := err.Error(); !strings.Contains(msg, "vig_") && !strings.Contains(msg, "shared_memory") {
				t.Fatalf("accepted a request whose message the gateway cannot parse: %v", err)
			}
			return
		}
		if string(h.Model) != "m" {
			t.Fatalf("model %q", h.Model)
		}
		notShm := 0 // Triton's rule: one raw entry per input not in shared memory
		for i := range h.Inputs {
			shm := false
			for _, p := range h.Inputs[i].Params {
				shm = shm || string(p.Key) == wire.ParamShmRegion
			}
			if !shm {
				notShm++
			}
		}
		if h.RawInputs != notShm {
			t.Fatalf("%d raw entries for %d inputs not in shared memory", h.RawInputs, notShm)
		}
		if h.Size != req.msg.Len() {
			t.Fatalf("size %d, message %d", h.Size, req.msg.Len())
		}
	})
}

// TestParseInferBinaryViews: binary tensor bytes are views of the body, not
// copies (the claim of the package doc).
func TestParseInferBinaryViews(t *testing.T) {
	hdr := []byte(`{"inputs":[{"name":"A","datatype":"UINT8","shape":[4],"parameters":{"binary_data_size":4}}]}`)
	body := append(append([]byte(nil), hdr...), 1, 2, 3, 4)
	req, err := parseInfer("m", "", body, len(hdr), nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range req.msg {
		d := b.ReadOnlyData()
		if len(d) == 4 && &d[0] == &body[len(hdr)] {
			found = true
		}
	}
	if !found {
		t.Errorf("the binary tensor is not a view of the body: %d buffers", len(req.msg))
	}
}

// FuzzGuard feeds the smuggling guard arbitrary byte streams, cut into reads of
// arbitrary sizes: it must pass every byte through, in order, changing only the
// name of a Content-Length header into smuggledHeader, and the line break of
// an obs-fold into spaces.
func FuzzGuard(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), uint8(3))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2;x\r\nab\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n"), uint8(1))
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"), uint8(5))
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.1\r\n\r\n"), uint8(9))
	f.Add([]byte("\r\nPOST / HTTP/1.1\r\nContent-Length: 30\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: x\r\n\r\n"), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		defer fuzztest.Bound(t)()
		c := &guardConn{maxHead: 256}
		n := int(step%64) + 1
		for i := 0; i < len(in); i += n {
			chunk := append([]byte(nil), in[i:min(i+n, len(in))]...)
			c.feed(chunk)
		}
		out := append(c.out, c.head...)
		// The same bytes through Read (whose body fast path skips feed), in
		// reads of another size.
		rc := &guardConn{Conn: &chunkConn{data: in, n: n}, maxHead: 256}
		var viaRead []byte
		buf := make([]byte, int(step/64)+1)
		for {
			k, err := rc.Read(buf)
			viaRead = append(viaRead, buf[:k]...)
			if err != nil {
				break
			}
		}
		if !bytes.Equal(viaRead, out) {
			t.Fatalf("Read passed %q, feed %q", viaRead, out)
		}
		if len(out) != len(in) {
			t.Fatalf("guard passed %d bytes of %d", len(out), len(in))
		}
		for i := 0; i < len(in); i++ {
			if out[i] == in[i] {
				continue
			}
			if out[i] == ' ' && (in[i] == '\r' || in[i] == '\n') && i+1 < len(in) && (in[i+1] == ' ' || in[i+1] == '\t' || in[i+1] == '\n') {
				continue // an obs-fold unfolded
			}
			j := strings.LastIndex(string(out[:i+1]), smuggledHeader[:1])
			for j >= 0 && !strings.HasPrefix(string(out[j:]), smuggledHeader) {
				j = strings.LastIndex(string(out[:j]), smuggledHeader[:1])
			}
			if j < 0 || i >= j+len(smuggledHeader) || !strings.EqualFold(string(in[j:j+len(smuggledHeader)]), "Content-Length") {
				t.Fatalf("byte %d changed from %q to %q outside a renamed Content-Length", i, in[i], out[i])
			}
		}
	})
}

// chunkConn is a connection that reads data n bytes at a time.
type chunkConn struct {
	net.Conn
	data []byte
	n    int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

// timeoutConn returns data a byte at a time, with a timeout error after every
// byte of the first head (as net/http's background read between requests sees
// its deadline).
type timeoutConn struct {
	net.Conn
	data []byte
	tick bool
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func (c *timeoutConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	if c.tick = !c.tick; c.tick {
		return 0, timeoutErr{}
	}
	k := copy(p[:1], c.data)
	c.data = c.data[k:]
	return k, nil
}

// A read that times out in the middle of a head leaves the head whole: the
// bytes after it are still framed by its Content-Length.
func TestGuardTimeoutMidHead(t *testing.T) {
	fake := "GET /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n" // a body, not a head
	in := "POST / HTTP/1.1\r\nContent-Length: " + strconv.Itoa(len(fake)) + "\r\n\r\n" + fake +
		"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	g := &guardConn{Conn: &timeoutConn{data: []byte(in)}, maxHead: 256}
	var out []byte
	buf := make([]byte, 7)
	for {
		k, err := g.Read(buf)
		out = append(out, buf[:k]...)
		if err == io.EOF {
			break
		}
	}
	want := in[:len(in)-len("Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")] + smuggledHeader + ": 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	if string(out) != want {
		t.Errorf("guard passed\n%q\nwant\n%q", out, want)
	}
}

// A body read in several buffers (readDeclared): the header may span them
// (read from a copy), the tensors are views of the buffers, and the message
// is the one a contiguous body gives.
func TestParseInferAcrossBuffers(t *testing.T) {
	hdr := []byte(`{"inputs":[{"name":"A","datatype":"UINT8","shape":[70000],"parameters":{"binary_data_size":70000}},` +
		`{"name":"B","datatype":"UINT8","shape":[3],"parameters":{"binary_data_size":3}}]}`)
	body := append([]byte(nil), hdr...)
	for i := range 70003 {
		body = append(body, byte(i*7))
	}
	whole, err := parseInfer("m", "", body, len(hdr), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cuts := range [][]int{{40}, {len(hdr) + 10, 40000}, {len(hdr) + 70000, len(hdr) + 70001}} {
		src := &bodySrc{n: len(body)}
		prev := 0
		for _, c := range append(cuts, len(body)) {
			src.bufs = append(src.bufs, mem.SliceBuffer(body[prev:c]))
			prev = c
		}
		req, err := parseInferSrc("m", "", src, len(hdr))
		if err != nil {
			t.Fatalf("cuts %v: %v", cuts, err)
		}
		if !bytes.Equal(req.msg.Materialize(), whole.msg.Materialize()) {
			t.Errorf("cuts %v: the message differs from the contiguous body's", cuts)
		}
		for _, b := range req.msg {
			if d := b.ReadOnlyData(); len(d) > 1000 && &d[0] != &body[len(hdr)] && &d[0] != &body[len(hdr)+10] && &d[0] != &body[40000] {
				t.Errorf("cuts %v: a tensor buffer of %d bytes is not a view of the body", cuts, len(d))
			}
		}
	}
	// readDeclared takes a body in several buffers.
	src, err := readDeclared(bytes.NewReader(body), len(body))
	if err != nil {
		t.Fatal(err)
	}
	defer src.free()
	if len(src.bufs) < 2 || !bytes.Equal(src.bytes(), body) {
		t.Errorf("readDeclared: %d buffers, same bytes %v", len(src.bufs), bytes.Equal(src.bytes(), body))
	}
}
