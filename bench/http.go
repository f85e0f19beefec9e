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
