package gateway

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/h2"
)

// Backend-link compression (backend.compression: gzip): gRPC's "gzip" message
// encoding on inference requests and answers, for a backend off the device, across
// USB or Wi-Fi, where a compressible frame (a mask, a depth map) is worth the CPU.
// On loopback it only costs; vig never turns it on by itself. Relayed RPCs keep
// whatever encoding their client chose.

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// gzipMessage compresses msg into a new buffer.
func gzipMessage(msg mem.BufferSlice) (mem.BufferSlice, error) {
	var out bytes.Buffer
	out.Grow(msg.Len()/2 + 64)
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&out)
	for _, b := range msg {
		if _, err := zw.Write(b.ReadOnlyData()); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(out.Bytes())}, nil
}

// gunzipMessage decompresses msg (freed) into a pooled buffer, refusing more than
// limit bytes.
func gunzipMessage(msg mem.BufferSlice, limit int) (mem.BufferSlice, error) {
	defer msg.Free()
	r := msg.Reader()
	defer r.Close() // the reader's own references, also when it stops early
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	var out bytes.Buffer
	n, err := io.Copy(&out, io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if n > int64(limit) {
		return nil, h2.ErrMsgTooLarge{Size: int(n), Limit: limit}
	}
	return mem.BufferSlice{mem.SliceBuffer(out.Bytes())}, nil
}
