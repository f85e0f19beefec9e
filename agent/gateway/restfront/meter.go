package restfront

import (
	"io"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/vig-edge/vig/agent/metrics"
)

// The per-request metrics (vig_http_requests_total, vig_http_in_flight,
// vig_http_{received,sent}_bytes_total in agent/metrics): each request counted
// under the Triton RPC it is and the gRPC code of its answer, as the gRPC
// frontend counts its RPCs.

// rpcName names the Triton gRPC RPC an HTTP request path is, as the router
// (serveHTTP, model, control, systemShm) reads it; "other" for a path that is
// no endpoint. The names are a fixed set: a client cannot grow the label.
func rpcName(path string) string {
	if path == "/v2" {
		return "ServerMetadata"
	}
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return "other"
	}
	seg := strings.Split(rest, "/")
	switch {
	case seg[0] == "models" && len(seg) == 2 && seg[1] == "stats":
		return "ModelStatistics"
	case seg[0] == "models" && len(seg) >= 2 && seg[1] != "":
		s := seg[2:]
		if len(s) >= 2 && s[0] == "versions" {
			s = s[2:]
		}
		switch {
		case len(s) == 0:
			return "ModelMetadata"
		case len(s) > 1:
			return "other"
		}
		switch s[0] {
		case "ready":
			return "ModelReady"
		case "config":
			return "ModelConfig"
		case "stats":
			return "ModelStatistics"
		case "infer":
			return "ModelInfer"
		}
	case seg[0] == "health" && len(seg) == 2 && seg[1] == "live":
		return "ServerLive"
	case seg[0] == "health" && len(seg) == 2 && seg[1] == "ready":
		return "ServerReady"
	case seg[0] == "repository" && len(seg) == 2 && seg[1] == "index":
		return "RepositoryIndex"
	case seg[0] == "repository" && len(seg) == 4 && seg[1] == "models" && seg[3] == "load":
		return "RepositoryModelLoad"
	case seg[0] == "repository" && len(seg) == 4 && seg[1] == "models" && seg[3] == "unload":
		return "RepositoryModelUnload"
	case (seg[0] == "systemsharedmemory" || seg[0] == "cudasharedmemory") && (len(seg) == 2 || (len(seg) == 4 && seg[1] == "region")):
		kind := "SystemSharedMemory"
		if seg[0] == "cudasharedmemory" {
			kind = "CudaSharedMemory"
		}
		switch seg[len(seg)-1] {
		case "status":
			return kind + "Status"
		case "register":
			return kind + "Register"
		case "unregister":
			return kind + "Unregister"
		}
	}
	return "other"
}

// meter wraps one request's ResponseWriter and body to count the bytes each
// way; one allocation for both.
type meter struct {
	w    meterWriter
	body meterBody
}

type meterWriter struct {
	http.ResponseWriter
	status int
	sent   int
}

func (m *meterWriter) WriteHeader(code int) {
	if m.status == 0 {
		m.status = code
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *meterWriter) Write(b []byte) (int, error) {
	if m.status == 0 {
		m.status = http.StatusOK
	}
	n, err := m.ResponseWriter.Write(b)
	m.sent += n
	return n, err
}

type meterBody struct {
	io.ReadCloser
	read int
}

func (b *meterBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += n
	return n, err
}

// metered serves r through next and counts it on m.
func metered(m *metrics.Method, w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request)) {
	m.Start()
	mt := &meter{w: meterWriter{ResponseWriter: w}}
	if r.Body != nil && r.Body != http.NoBody {
		mt.body.ReadCloser = r.Body
		r.Body = &mt.body
	}
	next(&mt.w, r)
	m.Received(mt.body.read)
	m.Sent(mt.w.sent)
	m.Done(answerCode(mt.w.Header().Get("Vig-Code"), mt.w.status))
}

// answerCode is the gRPC code of an answer: the Vig-Code header failCode sets,
// else OK for a 2xx/3xx status (and for none: the handler wrote nothing, net/http
// answers 200).
func answerCode(name string, status int) codes.Code {
	if name == "" {
		if status >= 400 {
			return codes.Unknown
		}
		return codes.OK
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if codeName(c) == name {
			return c
		}
	}
	return codes.Unknown
}
