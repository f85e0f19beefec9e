package restfront_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/gateway/restfront"
)

// Request smuggling: Content-Length beside Transfer-Encoding is refused and the
// connection closed, in whichever order and case they come; the guard that finds
// them follows the framing of the bodies before them, so that a body that looks
// like a request head is not taken for one.
func TestSmuggling(t *testing.T) {
	r := newRig(t, restfront.Options{}, nil)
	live := "GET /v2/health/live HTTP/1.1\r\nHost: vig\r\n\r\n"
	fake := "GET /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, c := range []struct {
		name  string
		reqs  string
		codes []int
	}{
		{"CL then TE", "POST /v2/models/det/infer HTTP/1.1\r\nHost: vig\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + live, []int{400}},
		{"TE then CL, odd case", "POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n" + live, []int{400}},
		{"after a chunked body", "POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=1\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n" +
			"POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []int{200, 400}},
		{"a head inside a Content-Length body", fmt.Sprintf("POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nContent-Type: x\r\nContent-Length: %d\r\n\r\n%s", len(fake), fake) + live, []int{400, 200}},
		// Go takes identical repeated Content-Lengths for one: the guard
		// refuses them, so that it never stops looking on a connection (a
		// pipelined CL+TE request after them was served).
		{"two identical Content-Lengths, then CL and TE", "POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}" +
			"POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []int{400}},
		{"two different Content-Lengths", "POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{} " + live, []int{400}},
		// Go unfolds an obs-fold line: a folded Transfer-Encoding is chunked.
		{"folded TE beside CL", "POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nContent-Length: 5\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + live, []int{400}},
		{"folded TE alone, framed as chunked", "POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nTransfer-Encoding:\r\n\tchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" +
			"POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []int{200, 400}},
		{"a head inside a chunk", fmt.Sprintf("POST /v2/repository/index HTTP/1.1\r\nHost: vig\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(fake), fake) + live, []int{400, 200}},
	} {
		conn, br := r.rawConn(t)
		io.WriteString(conn, c.reqs)
		for i, want := range c.codes {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: answer %d: %v", c.name, i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			smuggle := strings.Contains(string(body), "request-smuggling")
			if resp.StatusCode != want || (want == 400 && c.name != "a head inside a Content-Length body" && c.name != "a head inside a chunk" && !smuggle) ||
				(want != 400 && smuggle) {
				t.Errorf("%s: answer %d: HTTP %d %s, want %d", c.name, i, resp.StatusCode, body, want)
			}
			if smuggle && !resp.Close {
				t.Errorf("%s: smuggling attempt answered without closing the connection", c.name)
			}
		}
		if c.codes[len(c.codes)-1] == 400 {
			if _, err := br.ReadByte(); err == nil {
				t.Errorf("%s: the connection stayed open after the refusal", c.name)
			}
		}
	}
}
