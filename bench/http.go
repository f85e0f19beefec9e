package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/wire"
)

// httpSensor is a Triton HTTP/REST client of vig's listen.http (the http-*
// datapath rows): one kept-alive connection, each request encoded before the
// clock starts, the answer read whole (not decoded) before it stops.
type httpSensor struct {
	url    string
	client *http.Client
	tr     *http.Transport
	buf    []byte
}

func newHTTPSensor(addr string) *httpSensor {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true,
		DialContext: (&net.Dialer{}).DialContext}
	return &httpSensor{url: "http://" + addr + "/v2/models/" + benchModel + "/infer", client: &http.Client{Transport: tr}, tr: tr}
}

func (h *httpSensor) Close() { h.tr.CloseIdleConnections() }

// call times one infer round trip of frame (the id the gRPC rows send, so that
// the mock does the same work), data as binary data or as a JSON UINT8 array.
func (h *httpSensor) call(ctx context.Context, frame uint64, data []byte, asJSON bool) (time.Duration, error) {
	id := strconv.Quote(mockbackend.FrameID(ringStream, frame))
	n := strconv.Itoa(len(data))
	var body []byte
	hdrLen := -1
	if asJSON {
		body = append(h.buf[:0], `{"id":`+id+`,"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[`+n+`],"data":[`...)
		for i, b := range data {
			if i > 0 {
				body = append(body, ',')
			}
			body = strconv.AppendUint(body, uint64(b), 10)
		}
		body = append(body, "]}]}"...)
	} else {
		body = append(h.buf[:0], `{"id":`+id+`,"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[`+n+`],"parameters":{"binary_data_size":`+n+`}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`...)
		hdrLen = len(body)
		body = append(body, data...)
	}
	h.buf = body
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if hdrLen >= 0 {
		req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(hdrLen))
	}
	t0 := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	return d, err
}

// httpFrameClient is a wire sensor's Triton HTTP/REST client, sending as
// tritonclient.http does: the input in the binary tensor data extension, the
// output asked for as binary data, over a pool of kept-alive connections as
// large as the sensor's buffer depth (its concurrency); each answer read whole.
type httpFrameClient struct {
	base   string
	conns  int
	client *http.Client
	tr     *http.Transport
}

func newHTTPFrameClient(addr string, conns int) *httpFrameClient {
	conns = max(conns, 1)
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
		IdleConnTimeout: time.Minute, DialContext: (&net.Dialer{}).DialContext}
	return &httpFrameClient{base: "http://" + addr, conns: conns, client: &http.Client{Transport: tr}, tr: tr}
}

func (h *httpFrameClient) Close() error { h.tr.CloseIdleConnections(); return nil }

// connect opens the pool's connections (up to conns: concurrent readiness
// probes), retrying until ctx ends while the server does not answer yet.
func (h *httpFrameClient) connect(ctx context.Context) error {
	errs := make(chan error, h.conns)
	for range h.conns {
		go func() {
			for {
				err := h.get(ctx, "/v2/health/ready")
				if err == nil || ctx.Err() != nil {
					errs <- err
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	var first error
	for range h.conns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (h *httpFrameClient) get(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %.200s", path, resp.StatusCode, b)
	}
	return nil
}

// infer sends one frame: the request frameRequest builds for gRPC (the same
// id, vig_stream and vig_capture_ns), on HTTP.
func (h *httpFrameClient) infer(ctx context.Context, model, stream string, frame uint64, capture int64, payload []byte) error {
	n := strconv.Itoa(len(payload))
	body := make([]byte, 0, 384+len(payload))
	body = append(body, `{"id":`...)
	body = strconv.AppendQuote(body, mockbackend.FrameID(stream, frame))
	body = append(body, `,"parameters":{"`+wire.ParamStream+`":`...)
	body = strconv.AppendQuote(body, stream)
	body = append(body, `,"`+wire.ParamCapture+`":`...)
	body = strconv.AppendInt(body, capture, 10)
	body = append(body, `},"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[`+n+`],"parameters":{"binary_data_size":`+n+`}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`...)
	hdrLen := len(body)
	body = append(body, payload...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/v2/models/"+model+"/infer", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(hdrLen))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d (%s): %.200s", resp.StatusCode, resp.Header.Get("Vig-Code"), b)
	}
	return err
}
