package gateway

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"

	"github.com/vig-edge/vig/h2"
)

// stuckSocket takes nothing: Writev writes no byte, WriteAll waits until the
// connection is closed (a peer that never reads).
type stuckSocket struct {
	once   sync.Once
	closed chan struct{}
}

func (s *stuckSocket) Writev([][]byte) (int, error) { return 0, nil }
func (s *stuckSocket) WriteAll([][]byte) error      { <-s.closed; return net.ErrClosed }

type closeConn struct {
	net.Conn
	s *stuckSocket
}

func (c closeConn) Close() error { c.s.once.Do(func() { close(c.s.closed) }); return nil }

// A peer that floods PINGs (or SETTINGS) and never reads: the answers wait in
// the writer's queue, and past maxQueuedControl of them vig refuses the
// connection (ENHANCE_YOUR_CALM), as x/net's server does. The queue used to
// grow without bound.
func TestWriterControlQueueBounded(t *testing.T) {
	for _, typ := range []http2.FrameType{http2.FramePing, http2.FrameSettings} {
		t.Run(typ.String(), func(t *testing.T) {
			sock := &stuckSocket{closed: make(chan struct{})}
			w := &h2writer{nc: closeConn{s: sock}, sw: sock, maxFrame: h2.DefaultMaxFrame, initWin: h2.InitialWindow, connWin: h2.InitialWindow}
			var in bytes.Buffer
			fr := http2.NewFramer(&in, nil)
			const n = 2 * maxQueuedControl
			for i := range n {
				if typ == http2.FramePing {
					fr.WritePing(false, [8]byte{byte(i)})
				} else {
					fr.WriteSettings()
				}
			}
			r := h2.NewReader(&in, 4096)
			var err error
			answered := 0
			for ; answered < n; answered++ {
				h, herr := r.ReadHeader()
				if herr != nil {
					t.Fatal(herr)
				}
				if typ == http2.FramePing {
					err = pingFrame(r, w, h)
				} else {
					err = settingsFrame(r, w, h)
				}
				if err != nil {
					break
				}
			}
			var ce h2.ConnError
			if !errors.As(err, &ce) || ce.Code != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("%d %vs to a peer that does not read: %d answered, error %v; want ENHANCE_YOUR_CALM past %d", n, typ, answered, err, maxQueuedControl)
			}
			if answered > maxQueuedControl+1 {
				t.Errorf("%d answers queued before the cut, want at most %d", answered, maxQueuedControl+1)
			}
			w.mu.Lock()
			w.fail(errConnClosed)
			w.mu.Unlock()
		})
	}
}
