package h2

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
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
// the writer's queue, and past MaxQueuedControl of them vig refuses the
// connection (ENHANCE_YOUR_CALM), as x/net's server does. The queue used to
// grow without bound.
func TestWriterControlQueueBounded(t *testing.T) {
	for _, typ := range []http2.FrameType{http2.FramePing, http2.FrameSettings} {
		t.Run(typ.String(), func(t *testing.T) {
			sock := &stuckSocket{closed: make(chan struct{})}
			w := NewWriter(closeConn{s: sock}, sock)
			var in bytes.Buffer
			fr := http2.NewFramer(&in, nil)
			const n = 2 * MaxQueuedControl
			for i := range n {
				if typ == http2.FramePing {
					fr.WritePing(false, [8]byte{byte(i)})
				} else {
					fr.WriteSettings()
				}
			}
			r := NewReader(&in, 4096)
			var err error
			answered := 0
			for ; answered < n; answered++ {
				h, herr := r.ReadHeader()
				if herr != nil {
					t.Fatal(herr)
				}
				if typ == http2.FramePing {
					err = PingFrame(r, w, h)
				} else {
					err = SettingsFrame(r, w, h)
				}
				if err != nil {
					break
				}
			}
			var ce ConnError
			if !errors.As(err, &ce) || ce.Code != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("%d %vs to a peer that does not read: %d answered, error %v; want ENHANCE_YOUR_CALM past %d", n, typ, answered, err, MaxQueuedControl)
			}
			if answered > MaxQueuedControl+1 {
				t.Errorf("%d answers queued before the cut, want at most %d", answered, MaxQueuedControl+1)
			}
			w.Lock()
			w.Fail(ErrConnClosed)
			w.Unlock()
		})
	}
}
