// Package restfront is the HTTP/REST frontend of vig serve: Triton's HTTP
// protocol (KServe v2, with Triton's binary tensor data extension and its
// system and CUDA shared memory extensions) in front of the same governor. An
// infer request becomes a gateway Call, scheduled by the same rules as a gRPC
// client's and sent over the same backend leg; the other endpoints are the
// Triton gRPC RPCs of the same name, made on the backend with Gateway.Invoke, so
// that their answers are the backend's. Liveness is vig's own (200 while vig
// answers); readiness is the backend's.
//
// # What is copied
//
// The body is read once, into pooled buffers taken as its bytes arrive (and
// decompressed into one buffer when it came with Content-Encoding gzip or
// deflate). Binary tensor data is not copied again: the raw_input_contents
// entries of the message to the backend are views of those buffers, written
// to the backend connection as they are; the JSON header is copied only when
// it spans two of them. JSON "data" arrays are
// converted once, element by element, into the same little-endian bytes. The
// backend's answer is decoded once (its output bytes copied out of the
// transport's buffers) and written to the client as binary parts or converted
// once into JSON arrays.
//
// # The JSON decoder, chosen by measurement
//
// encoding/json reads the header, with each "data" array kept as raw JSON;
// vig's own one-pass converter (tensor.go) turns the array into bytes, with the
// datatype decided once per tensor. Measured on this project's 2-vCPU VM under
// load (go test -bench ParseJSON, pinned, 3 runs; a 150 KB FP32 tensor, 37,500
// floats in ~420 KB of JSON, and a 1.2 MB one): encoding/json into []float32
// 4.9–5.4 ms and 41–55 ms, 830 KB and 7.8 MB allocated; vig's path 4.6–7.2 ms
// and 36–39 ms, 525 KB and 4.1 MB (measured with the array viewed in place;
// it is now copied once into a string for strconv, as agent/ does not import
// unsafe: one more copy of the JSON, no allocation per element). Libraries from the module proxy, same
// inputs, in a scratch module: goccy/go-json v0.12.0 into []float32 0.68–0.73
// ms and 5.8–6.2 ms, segmentio/encoding v0.5.4 1.7 ms and 16–17 ms; with vig's
// converter behind them 2.1–2.3 ms and 17–21 ms. Most of the cost is the
// decoder's scan of the array, not the numbers. vig stays on the standard
// library all the same: tritonclient.http and perf_analyzer send tensors with
// the binary data extension by default, which costs the header alone (2.7–3.3
// µs for 0 B to 6.2 MB, go test -bench ParseBinary), so JSON tensors are the
// small ones of curl scripts and hand-written clients; and a 6× faster JSON
// path is not worth a dependency built on unsafe reflection of its own.
//
// # Status codes
//
// Errors answer {"error": "<message>"} with the HTTP status Triton's own HTTP
// server gives for the gRPC code of the same error: NOT_FOUND 404, UNAVAILABLE
// 503, UNIMPLEMENTED 501, INTERNAL 500, everything else 400 (INVALID_ARGUMENT,
// ALREADY_EXISTS, and CANCELLED, Triton's code for an aborted request). vig's
// own answers follow the same map: a superseded frame (ABORTED) is 400, a frame
// too late to be useful (DEADLINE_EXCEEDED) and a full queue (RESOURCE_EXHAUSTED)
// are 503, as Triton answers a request its queue policy timed out or refused.
// The gRPC code itself rides in the Vig-Code header, so a client can tell a
// superseded frame from a bad request.
package restfront

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/gateway"
)

// Limits of the HTTP server (Options' defaults).
const (
	DefaultHeaderTimeout = 10 * time.Second  // the request line and headers
	DefaultReadTimeout   = 60 * time.Second  // the whole request, body included
	DefaultWriteTimeout  = 120 * time.Second // from the end of the headers to the end of the answer
	DefaultIdleTimeout   = 120 * time.Second // between requests on a kept-alive connection
	DefaultMaxHeaderKiB  = 64
	DefaultMaxConns      = 1024
)

// Options configures a Frontend.
type Options struct {
	Log *slog.Logger
	// MaxBody is the largest request body, after decompression (grpc.max_message_mib).
	MaxBody int64
	// Timeouts and header limit; zero takes the defaults above.
	HeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                        int
	// MaxConns bounds the open connections (default DefaultMaxConns): one
	// more is answered 503 and closed at once.
	MaxConns int
	// MaxJSONParses bounds the JSON request headers with tensors in them
	// (and compressed bodies) read and parsed at once, each before
	// governance; more wait for a turn (default GOMAXPROCS).
	MaxJSONParses int
	// ForwardHeaders: the request headers whose names match it are
	// forwarded to the backend as string parameters (Triton's
	// --http-header-forward-pattern); nil: none.
	ForwardHeaders *regexp.Regexp
	// Wrap, when set, wraps the handler (the bearer token check).
	Wrap func(http.Handler) http.Handler
}

// Frontend serves Triton's HTTP protocol through a gateway.
type Frontend struct {
	gw     *gateway.Gateway
	log    *slog.Logger
	opts   Options
	srv    *http.Server
	conns  atomic.Int64  // open connections
	parses chan struct{} // a token per JSON parse at once
}

// New builds the frontend; Serve it on each listener.
func New(gw *gateway.Gateway, opts Options) *Frontend {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 64 << 20
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.HeaderTimeout, DefaultHeaderTimeout)
	def(&opts.ReadTimeout, DefaultReadTimeout)
	def(&opts.WriteTimeout, DefaultWriteTimeout)
	def(&opts.IdleTimeout, DefaultIdleTimeout)
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderKiB << 10
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxJSONParses <= 0 {
		opts.MaxJSONParses = runtime.GOMAXPROCS(0)
	}
	f := &Frontend{gw: gw, log: opts.Log, opts: opts, parses: make(chan struct{}, opts.MaxJSONParses)}
	reg := gw.Metrics()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		metered(reg.HTTPMethod(rpcName(r.URL.Path)), w, r, f.serveHTTP)
	})
	if opts.Wrap != nil {
		h = opts.Wrap(h)
	}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*guardConn); ok {
			c.handled.Store(true) // its answer is a handler's, never rewritten
		}
		// Counted with the gRPC RPCs: vig's drain reports them all.
		gw.RequestAccepted()
		defer gw.RequestAnswered()
		inner.ServeHTTP(w, r)
	})
	f.srv = &http.Server{Handler: h, ReadHeaderTimeout: opts.HeaderTimeout, ReadTimeout: opts.ReadTimeout,
		WriteTimeout: opts.WriteTimeout, IdleTimeout: opts.IdleTimeout, MaxHeaderBytes: opts.MaxHeaderBytes,
		ErrorLog:    slog.NewLogLogger(opts.Log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}
	return f
}

// Serve answers HTTP requests on ln until Shutdown.
func (f *Frontend) Serve(ln net.Listener) error {
	err := f.srv.Serve(guardListener{ln, f.opts.MaxHeaderBytes, f})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting and waits, until ctx is done, for the requests in
// flight to be answered; then it closes the connections.
func (f *Frontend) Shutdown(ctx context.Context) error {
	err := f.srv.Shutdown(ctx)
	if err != nil {
		f.srv.Close()
	}
	return err
}

// Close closes every connection at once; calls in flight are cancelled.
func (f *Frontend) Close() error { return f.srv.Close() }

// httpStatus is the HTTP status Triton's HTTP server gives for an error of code.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Internal:
		return http.StatusInternalServerError
	case codes.NotFound:
		return http.StatusNotFound
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return http.StatusServiceUnavailable
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// fail answers err: a gRPC status keeps its code; an error of the request is 400.
func fail(w http.ResponseWriter, err error) {
	code := codes.InvalidArgument
	msg := err.Error()
	var e *errRequest
	if !errors.As(err, &e) {
		st := status.Convert(err)
		code, msg = st.Code(), st.Message()
	}
	failCode(w, httpStatus(code), code, msg)
}

func failCode(w http.ResponseWriter, httpCode int, code codes.Code, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Vig-Code", codeName(code))
	h.Del("Content-Encoding")
	b := append([]byte(`{"error":`), appendString(nil, []byte(msg))...)
	b = append(b, '}')
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(httpCode)
	w.Write(b)
}

// codeName is the canonical name of a gRPC code (as in grpc-status documentation).
func codeName(c codes.Code) string {
	names := [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
		"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
		"UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}
	if int(c) < len(names) {
		return names[c]
	}
	return strconv.Itoa(int(c))
}

func (f *Frontend) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(smuggledHeader) != "" {
		w.Header().Set("Connection", "close")
		msg := "the request has both Content-Length and Transfer-Encoding (a request-smuggling pattern, RFC 9112 section 6.3): send one of them"
		if len(r.TransferEncoding) == 0 {
			msg = "the request has Content-Length more than once (a request-smuggling pattern, RFC 9112 section 6.3): send it once"
		}
		failCode(w, http.StatusBadRequest, codes.InvalidArgument, msg)
		return
	}
	path := r.URL.Path
	if path != "/v2" && !strings.HasPrefix(path, "/v2/") {
		failCode(w, http.StatusNotFound, codes.NotFound, fmt.Sprintf("%s: not an endpoint of Triton's HTTP protocol (they start with /v2)", path))
		return
	}
	seg := strings.Split(strings.TrimPrefix(path, "/v2"), "/")[1:] // "/v2/a/b" → [a b]
	// /v2/models/stats is every model's statistics; a model named stats is
	// reached by its longer paths (/v2/models/stats/infer, …).
	if len(seg) > 0 && seg[0] == "models" && len(seg) >= 2 && !(len(seg) == 2 && seg[1] == "stats") {
		f.model(w, r, seg[1:])
		return
	}
	f.control(w, r, seg)
}

// model serves /v2/models/{model}[/versions/{v}][/ready|/config|/stats|/infer].
func (f *Frontend) model(w http.ResponseWriter, r *http.Request, seg []string) {
	model, version := seg[0], ""
	seg = seg[1:]
	if len(seg) >= 2 && seg[0] == "versions" {
		version, seg = seg[1], seg[2:]
	}
	what := ""
	if len(seg) == 1 {
		what = seg[0]
	} else if len(seg) > 1 {
		what = "?"
	}
	if model == "" {
		failCode(w, http.StatusBadRequest, codes.InvalidArgument, "the model name in the path is empty")
		return
	}
	switch what {
	case "infer":
		if !method(w, r, http.MethodPost) {
			return
		}
		f.infer(w, r, model, version)
	case "", "ready", "config", "stats":
		if !method(w, r, http.MethodGet) {
			return
		}
		f.modelInfo(w, r, what, model, version)
	default:
		failCode(w, http.StatusNotFound, codes.NotFound, fmt.Sprintf("%s: no such endpoint for a model (metadata, ready, config, stats, infer)", r.URL.Path))
	}
}

func method(w http.ResponseWriter, r *http.Request, want string) bool {
	if r.Method == want {
		return true
	}
	w.Header().Set("Allow", want)
	failCode(w, http.StatusMethodNotAllowed, codes.InvalidArgument, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, want))
	return false
}

// readBody reads the request body and decompresses it (readWire, decode).
func (f *Frontend) readBody(w http.ResponseWriter, r *http.Request) (*bodySrc, bool) {
	wire, ok := f.readWire(w, r)
	if !ok {
		return nil, false
	}
	return f.decode(w, r, wire)
}

// contentEncoding is the request's Content-Encoding, lower case; "" for
// identity.
func contentEncoding(r *http.Request) string {
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	if enc == "identity" {
		return ""
	}
	return enc
}

// readWire reads the body's bytes as they come on the wire (compressed or
// not), at most MaxBody of them: a larger declared Content-Length is refused
// before it is read, a larger body without one as soon as it passes the
// limit. Memory follows the bytes that arrived, not the length declared: a
// body of declared length is read into buffers of gRPC's pool taken as bytes
// arrive, of firstBodyBuf bytes up to smallBody, then each as large as all
// before it (up to what is left). Nothing is copied, and what is held is at
// most twice what arrived above 1 MiB (gRPC's pool rounds a buffer below that
// up to its 1 MiB tier). The buffers are not zeroed first, and return to the
// pool once the message to the backend (whose tensors view them) is freed;
// the caller frees the body (bodySrc.free) when done with it.
func (f *Frontend) readWire(w http.ResponseWriter, r *http.Request) (*bodySrc, bool) {
	limit := f.opts.MaxBody
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		failCode(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
			fmt.Sprintf("request body of %d bytes is larger than vig's limit of %d bytes (grpc.max_message_mib)", r.ContentLength, limit))
		return nil, false
	}
	switch enc := contentEncoding(r); enc {
	case "", "gzip", "deflate":
	default:
		// Triton answers an encoding it does not read with 501 and the ones it
		// does in Accept-Encoding.
		w.Header().Set("Accept-Encoding", "gzip, deflate")
		failCode(w, http.StatusNotImplemented, codes.Unimplemented, fmt.Sprintf("unsupported Content-Encoding %q: vig reads gzip, deflate or identity", enc))
		return nil, false
	}
	if r.ContentLength > 0 {
		b, err := readDeclared(r.Body, int(r.ContentLength))
		if err != nil {
			f.bodyError(w, err)
			return nil, false
		}
		return b, true
	}
	buf := bytes.NewBuffer(make([]byte, 0, bytes.MinRead))
	if _, err := buf.ReadFrom(&capReader{r: r.Body, left: limit}); err != nil {
		f.bodyError(w, err)
		return nil, false
	}
	return &bodySrc{b: buf.Bytes(), n: buf.Len()}, true
}

// decode decompresses the body read off the wire when it came with
// Content-Encoding gzip or deflate, at most MaxBody bytes of it; wire is then
// freed. An uncompressed body is wire itself.
func (f *Frontend) decode(w http.ResponseWriter, r *http.Request, wire *bodySrc) (*bodySrc, bool) {
	enc := contentEncoding(r)
	if enc == "" {
		return wire, true
	}
	defer wire.free()
	var src io.Reader = wire.reader()
	var err error
	switch enc {
	case "gzip":
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(src); err == nil {
			defer zr.Close()
			src = zr
		}
	case "deflate":
		var zr io.ReadCloser
		if zr, err = zlib.NewReader(src); err == nil {
			defer zr.Close()
			src = zr
		}
	}
	if err != nil {
		f.bodyError(w, fmt.Errorf("Content-Encoding %s: %w", enc, err))
		return nil, false
	}
	limit := f.opts.MaxBody
	body, err := readChunks(src, -1, int(limit))
	if err != nil {
		f.bodyError(w, fmt.Errorf("Content-Encoding %s: %w", enc, err))
		return nil, false
	}
	if int64(body.n) > limit {
		body.free()
		w.Header().Set("Connection", "close")
		failCode(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
			fmt.Sprintf("request body is larger than vig's limit of %d bytes (grpc.max_message_mib), after decompression", limit))
		return nil, false
	}
	return body, true
}

// firstBodyBuf is the first buffer of a body of declared length, and each
// next one while less than smallBody has arrived.
const (
	firstBodyBuf = 32 << 10
	smallBody    = 256 << 10
)

// readDeclared reads a body of n declared bytes into pooled buffers taken as
// the bytes arrive.
func readDeclared(r io.Reader, n int) (*bodySrc, error) { return readChunks(r, n, n) }

// readChunks reads r into pooled buffers taken as the bytes arrive: exactly n
// bytes when n ≥ 0 (fewer is io.ErrUnexpectedEOF), else up to EOF but never
// more than limit+1 bytes (the caller refuses a body above limit). Memory so
// follows the bytes read, in buffers of gRPC's pool, without the doubling and
// final copy of a growing buffer.
func readChunks(r io.Reader, n, limit int) (*bodySrc, error) {
	pool := mem.DefaultBufferPool()
	s := &bodySrc{}
	want := n
	if n < 0 {
		want = limit + 1
	}
	got := 0
	for got < want {
		// Below smallBody, buffers of firstBodyBuf (a tier of gRPC's pool):
		// a larger request there is rounded up to the 1 MiB tier.
		next := max(got, firstBodyBuf)
		if got < smallBody {
			next = firstBodyBuf
		}
		ptr := pool.Get(min(want-got, next))
		k, err := io.ReadFull(r, *ptr)
		if k > 0 {
			*ptr = (*ptr)[:k]
			s.bufs = append(s.bufs, mem.NewBuffer(ptr, pool))
			got += k
		} else {
			pool.Put(ptr)
		}
		if err == nil {
			continue
		}
		if n < 0 && (err == io.EOF || err == io.ErrUnexpectedEOF) {
			break // the end of a body of unknown length
		}
		s.free()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	s.n = got
	if len(s.bufs) == 1 {
		s.b = s.bufs[0].ReadOnlyData()
	}
	return s, nil
}

// capReader passes at most left bytes of the request's own (compressed) body.
type capReader struct {
	r    io.Reader
	left int64
}

var errWireTooLarge = errors.New("the request body on the wire is larger than vig's limit")

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errWireTooLarge
	}
	n, err := c.r.Read(p[:min(int64(len(p)), c.left)])
	c.left -= int64(n)
	return n, err
}

// bodyError answers an error reading the body: without socket addresses (a
// net.OpError names both ends), and with what to change.
func (f *Frontend) bodyError(w http.ResponseWriter, err error) {
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, errWireTooLarge):
		w.Header().Set("Connection", "close")
		failCode(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
			fmt.Sprintf("request body is larger than vig's limit of %d bytes (grpc.max_message_mib) on the wire", f.opts.MaxBody))
		return
	case errors.As(err, &ne) && ne.Timeout():
		err = fmt.Errorf("the body did not arrive within vig's read timeout of %v (rest.read_timeout_s): send it whole and promptly", f.opts.ReadTimeout)
	case errors.As(err, &op):
		err = fmt.Errorf("the connection failed: %v", op.Err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = errors.New("the body ended before its Content-Length")
	}
	failCode(w, http.StatusBadRequest, codes.InvalidArgument, "reading the request body: "+err.Error())
}

// headerLength reads Inference-Header-Content-Length: -1 when absent.
func headerLength(r *http.Request) (int, error) {
	vs := r.Header.Values("Inference-Header-Content-Length")
	if len(vs) == 0 {
		return -1, nil
	}
	if len(vs) > 1 {
		return 0, badRequest("Inference-Header-Content-Length given %d times", len(vs))
	}
	n, err := strconv.ParseUint(strings.TrimSpace(vs[0]), 10, 31)
	if err != nil {
		return 0, badRequest("Inference-Header-Content-Length %q is not a byte count", vs[0])
	}
	return int(n), nil
}

// lightJSON: a JSON header up to this size is parsed without waiting for a
// turn (the header of a binary request, a small tensor).
const lightJSON = 16 << 10

// infer runs one infer request through the gateway and answers it.
func (f *Frontend) infer(w http.ResponseWriter, r *http.Request, model, version string) {
	hlen, err := headerLength(r)
	if err != nil {
		fail(w, err)
		return
	}
	wire, ok := f.readWire(w, r)
	if !ok {
		return
	}
	// Decompressing a body, or parsing a JSON header with tensors in it,
	// costs CPU and memory before governance: a bounded number at once, each
	// once its bytes are all here (a slow client holds no turn).
	heavy := false
	switch {
	case contentEncoding(r) != "":
		heavy = true
	case hlen >= 0:
		heavy = hlen > lightJSON
	default:
		heavy = wire.n > lightJSON
	}
	if heavy {
		select {
		case f.parses <- struct{}{}:
		case <-r.Context().Done():
			wire.free()
			return // the client left while waiting: nobody to answer
		}
	}
	body, ok := f.decode(w, r, wire)
	var req *inferRequest
	switch {
	case ok && hlen == 0:
		req, err = f.parseRaw(r, model, version, body)
	case ok:
		req, err = parseInferSrc(model, version, body, hlen)
	}
	if heavy {
		<-f.parses
	}
	if ok {
		defer body.free() // the message's views keep their own references
	}
	if !ok {
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	if err := f.forwardHeaders(r, req); err != nil {
		fail(w, err)
		return
	}
	uid, hasUID := peerUID(r)
	c := f.gw.NewCall()
	if err := f.gw.PrepareInfer(c, req.msg, uid, hasUID); err != nil {
		fail(w, err)
		return
	}
	// The W3C trace context goes on as gRPC metadata, where Triton's gRPC
	// server reads it (as a gRPC client's does through vig).
	for _, name := range []string{"traceparent", "tracestate"} {
		if v := r.Header.Values(name); len(v) > 0 {
			c.Meta = append(c.Meta, name, strings.Join(v, ","))
		}
	}
	p := &pending{done: make(chan struct{})}
	c.Replier = p
	f.gw.Submit(c)
	select {
	case <-p.done:
	case <-r.Context().Done():
		// The client left: the call frees its slot at once, and is still
		// answered (into nobody) exactly once.
		p.mu.Lock()
		held := !p.answered
		if held {
			c.Hold()
		}
		p.mu.Unlock()
		if held {
			f.gw.Cancel(c)
			c.Release()
		}
		<-p.done
		p.resp.Free()
		return
	}
	defer p.resp.Free()
	if p.err != nil {
		fail(w, p.err)
		return
	}
	a, err := encodeAnswer(p.resp.Materialize(), req)
	if err != nil {
		var e *errRequest
		if errors.As(err, &e) {
			fail(w, err)
		} else {
			fail(w, status.Error(codes.Internal, err.Error()))
		}
		return
	}
	writeAnswer(w, r, a)
}

// pending is an infer call waiting for its answer.
type pending struct {
	mu       sync.Mutex
	answered bool
	resp     mem.BufferSlice
	err      error
	done     chan struct{}
}

// Reply implements gateway.Replier (on whatever goroutine finished the call).
func (p *pending) Reply(_ *gateway.Call, resp mem.BufferSlice, err error) {
	p.mu.Lock()
	p.answered = true
	p.mu.Unlock()
	p.resp, p.err = resp, err
	close(p.done)
}

// writeAnswer writes an infer answer, compressed when the client accepts it.
func writeAnswer(w http.ResponseWriter, r *http.Request, a *answer) {
	h := w.Header()
	if len(a.binary) > 0 {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Inference-Header-Content-Length", strconv.Itoa(len(a.json)))
	} else {
		h.Set("Content-Type", "application/json")
	}
	n := len(a.json)
	for _, b := range a.binary {
		n += len(b)
	}
	var out io.Writer = w
	var closer io.Closer
	switch acceptEncoding(r.Header.Get("Accept-Encoding")) {
	case "gzip":
		h.Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		out, closer = zw, zw
	case "deflate":
		h.Set("Content-Encoding", "deflate")
		zw, _ := zlib.NewWriterLevel(w, flate.DefaultCompression)
		out, closer = zw, zw
	default:
		h.Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(http.StatusOK)
	out.Write(a.json)
	for _, b := range a.binary {
		out.Write(b)
	}
	if closer != nil {
		closer.Close()
	}
}

// acceptEncoding picks the answer's encoding from Accept-Encoding: gzip, then
// deflate, else none.
func acceptEncoding(v string) string {
	if v == "" {
		return ""
	}
	var gz, df bool
	for _, part := range strings.Split(v, ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if q = strings.TrimSpace(q); strings.HasPrefix(q, "q=") {
			if f, err := strconv.ParseFloat(q[2:], 64); err == nil && f == 0 {
				continue
			}
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "gzip":
			gz = true
		case "deflate":
			df = true
		}
	}
	switch {
	case gz:
		return "gzip"
	case df:
		return "deflate"
	}
	return ""
}

// peerUID is the uid of a Unix-socket client (netopt's connections know it).
func peerUID(r *http.Request) (uint32, bool) {
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		if p, ok := c.RemoteAddr().(gateway.PeerUID); ok {
			return p.PeerUID()
		}
	}
	return 0, false
}

type connKey struct{}
