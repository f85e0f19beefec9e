package gateway_test

// A raw HTTP/2 backend written for the tests: what vig's backend leg does when
// the backend misbehaves (GOAWAY loops, GOAWAY before a call was processed).

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

// rawBackend accepts connections and runs handle on each (its n-th, from 1).
type rawBackend struct {
	ln      net.Listener
	accepts atomic.Int32
	wg      sync.WaitGroup
}

// backendConn is the server side of one connection, its preface read.
type backendConn struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

func startRawBackend(t *testing.T, handle func(n int, bc *backendConn)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rawBackend{ln: ln}
	var conns sync.Map
	rb.wg.Add(1)
	go func() {
		defer rb.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(rb.accepts.Add(1))
			conns.Store(c, true)
			rb.wg.Add(1)
			go func() {
				defer rb.wg.Done()
				defer c.Close()
				bc := &backendConn{t: t, c: c}
				bc.fr = http2.NewFramer(c, c)
				bc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				bc.enc = hpack.NewEncoder(&bc.hbuf)
				pre := make([]byte, len(http2.ClientPreface))
				if _, err := io.ReadFull(c, pre); err != nil {
					return
				}
				if err := bc.fr.WriteSettings(); err != nil {
					return
				}
				handle(n, bc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		rb.wg.Wait()
	})
	return rb
}

// request reads frames until a request is complete (HEADERS and DATA with
// END_STREAM) and returns its stream and message; it acknowledges SETTINGS
// and PINGs. ok is false once vig closed the connection.
func (bc *backendConn) request() (stream uint32, msg []byte, ok bool) {
	var body []byte
	for {
		f, err := bc.fr.ReadFrame()
		if err != nil {
			return 0, nil, false
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				bc.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				bc.fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			stream = f.StreamID
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				if len(body) < 5 {
					return f.StreamID, nil, true
				}
				return f.StreamID, body[5:], true
			}
		}
	}
}

// answerInfer answers a ModelInfer request with its id.
func (bc *backendConn) answerInfer(stream uint32, req []byte) {
	var in pb.ModelInferRequest
	proto.Unmarshal(req, &in)
	out, _ := proto.Marshal(&pb.ModelInferResponse{ModelName: in.ModelName, Id: in.Id})
	bc.hbuf.Reset()
	bc.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	bc.enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: bc.hbuf.Bytes(), EndHeaders: true})
	msg := make([]byte, 5, 5+len(out))
	binary.BigEndian.PutUint32(msg[1:], uint32(len(out)))
	bc.fr.WriteData(stream, false, append(msg, out...))
	bc.hbuf.Reset()
	bc.enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
	bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: bc.hbuf.Bytes(), EndHeaders: true, EndStream: true})
}

// untilClosed reads until vig closes the connection, acknowledging what it must.
func (bc *backendConn) untilClosed() {
	for {
		if _, _, ok := bc.request(); !ok {
			return
		}
	}
}

// A backend that sends GOAWAY as soon as it is connected: vig redials with
// backoff, not in a loop (a connection that ends at once keeps the backoff
// growing). The bound is on dials within a sleep: timers never fire early, so
// a faster machine cannot dial more. vig used to redial at once or every 50 ms
// (11 dials in 600 ms here).
func TestBackendGoAwayLoopBacksOff(t *testing.T) {
	rb := startRawBackend(t, func(_ int, bc *backendConn) {
		bc.fr.WriteGoAway(0, http2.ErrCodeNo, []byte("restarting"))
		bc.untilClosed()
	})
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	e := startEnv(t, cfg, false)
	start := rb.accepts.Load()
	time.Sleep(600 * time.Millisecond)
	n := rb.accepts.Load() - start
	// 50 ms, then ×1.6 each: 50+80+128+205 = 463 ms, so at most 5 dials in 600 ms.
	t.Logf("backend sending GOAWAY at once: %d dials in 600 ms", n)
	if n > 6 {
		t.Errorf("%d dials in 600 ms to a backend that sends GOAWAY at once: no backoff", n)
	}
	_ = e
}

// GOAWAY naming a last stream below a call's: the backend did not process the
// call (RFC 9113 §6.8), so vig starts it again on a new connection instead of
// failing it, and closes the old connection once its own streams are done.
func TestBackendGoAwayRetriesUnprocessed(t *testing.T) {
	oldClosed := make(chan struct{})
	rb := startRawBackend(t, func(n int, bc *backendConn) {
		if n == 1 {
			if _, _, ok := bc.request(); !ok {
				return
			}
			bc.fr.WriteGoAway(0, http2.ErrCodeNo, nil) // stream 1 not processed
			bc.untilClosed()
			close(oldClosed)
			return
		}
		for {
			stream, msg, ok := bc.request()
			if !ok {
				return
			}
			bc.answerInfer(stream, msg)
		}
	})
	cfg := testConfig(t, "")
	cfg.Backend.Address = rb.ln.Addr().String()
	e := startEnv(t, cfg, false)
	waitBackendReady(t, e)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // liveness, not speed
	defer cancel()
	r, err := c.ModelInfer(ctx, inferRequest("detector", "retry#1", 10))
	if err != nil || r.Id != "retry#1" {
		t.Fatalf("a call the backend refused with GOAWAY before processing it: %v %v, want it served on the next connection", r, err)
	}
	select {
	case <-oldClosed:
	case <-ctx.Done():
		t.Errorf("vig kept the connection the backend sent GOAWAY on")
	}
	if n := rb.accepts.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}
