package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/vig-edge/vig/internal/fuzztest"
	"golang.org/x/net/http2"
)

// FuzzBackendConn feeds arbitrary bytes, after the backend's SETTINGS, to vig's
// connection to its backend while one of vig's own calls (stream 1) and one
// inference-sized answer buffer are in play: the frame reader, the header
// decoding and the stream state of the client role. Whatever the backend sends,
// vig must not panic, the call must return exactly once, and the connection
// must end once the backend has gone.
func FuzzBackendConn(f *testing.F) {
	s := newFrames() // a well-formed answer to stream 1
	s.Fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 10})
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: s.Block(":status", "200", "content-type", "application/grpc")})
	s.Fr.WriteData(1, false, []byte{0, 0, 0, 0, 2, 'o', 'k'})
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: s.Block("grpc-status", "0")})
	f.Add(s.Bytes())

	s = newFrames() // a trailers-only error, then frames on streams vig never opened
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: s.Block(":status", "200", "grpc-status", "5", "grpc-message", "nope")})
	s.Fr.WriteData(3, false, []byte("x"))
	s.Fr.WriteRSTStream(2, http2.ErrCodeCancel)
	f.Add(s.Bytes())

	s = newFrames() // a prefix declaring a large answer, window games, GOAWAY
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: s.Block(":status", "200")})
	s.Fr.WriteData(1, false, []byte{0, 0, 0xff, 0xff, 0xff})
	s.Fr.WriteWindowUpdate(1, 1<<31-1)
	s.Fr.WriteWindowUpdate(0, 0)
	s.Fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	f.Add(s.Bytes())
	f.Add([]byte{})

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		defer fuzztest.Bound(t)()
		vig, peer := net.Pipe()
		var once sync.Once
		dial := func(context.Context, string) (net.Conn, error) {
			var c net.Conn
			once.Do(func() { c = vig })
			if c == nil {
				return nil, io.EOF // one connection per input
			}
			return c, nil
		}
		b := newH2Backend("fuzz", dial, 1<<16, 1<<20, 16<<10, func() int64 { return time.Now().UnixNano() }, log)
		go io.Copy(io.Discard, peer) // what vig sends
		settings := newFrames()
		settings.Fr.WriteSettings()
		go func() {
			peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
			peer.Write(settings.Bytes())
		}()
		b.Open(func(bool) {})
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := b.Invoke(ctx, "/inference.GRPCInferenceService/ModelStatistics", []byte{0x0a, 1, 'm'})
			done <- err
		}()
		peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
		peer.Write(data) // vig may close first: that is allowed
		peer.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("vig's call did not return 10 s after its backend left")
		}
		b.Close()
	})
}
