package h2

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/mem"

	"github.com/vig-edge/vig/internal/fuzztest"
	"github.com/vig-edge/vig/internal/h2test"
	"github.com/vig-edge/vig/netopt"
)

// pipeClient is a ClientConn on one end of a net.Pipe, with its Run started.
func pipeClient(t testing.TB, cfg ClientConfig) (cc *ClientConn, peer net.Conn, ran chan error) {
	vig, peer := net.Pipe()
	tw, err := netopt.NewTryWriter(vig)
	if err != nil {
		t.Fatal(err)
	}
	cc = NewClientConn(NewWriter(vig, NewConnWriter(tw, vig)), NewReader(vig, 16<<10), cfg)
	ran = make(chan error, 1)
	go func() { ran <- cc.Run() }()
	return cc, peer, ran
}

// FuzzClientConn feeds arbitrary bytes, after the server's SETTINGS, to a
// ClientConn on which two streams are open (one with its request sent whole,
// one still sending): the frame reader, the header decoding and the stream
// table of the client role. Whatever the server sends, ClientConn must not
// panic, each stream must end exactly once, and Run must return once the
// server has gone.
func FuzzClientConn(f *testing.F) {
	s := newFrames() // a well-formed answer to stream 1, stream 3 reset
	s.Fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 10})
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: s.Block(":status", "200", "content-type", "application/grpc")})
	s.Fr.WriteData(1, false, []byte{0, 0, 0, 0, 2, 'o', 'k'})
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: s.Block("grpc-status", "0")})
	s.Fr.WriteRSTStream(3, http2.ErrCodeRefusedStream)
	f.Add(s.Bytes())

	s = newFrames() // trailers-only, a non-200 answer, frames on streams never opened
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: s.Block(":status", "200", "grpc-status", "5", "grpc-message", "nope")})
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, EndHeaders: true, BlockFragment: s.Block(":status", "503")})
	s.Fr.WriteData(5, false, []byte("x"))
	s.Fr.WriteRSTStream(2, http2.ErrCodeCancel)
	f.Add(s.Bytes())

	s = newFrames() // a prefix declaring a large answer, window games, GOAWAY
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: s.Block(":status", "200")})
	s.Fr.WriteData(1, false, []byte{0, 0, 0xff, 0xff, 0xff})
	s.Fr.WriteData(3, false, []byte{0, 0, 0, 1, 0, 'a', 'b'})
	s.Fr.WriteWindowUpdate(3, 1<<31-1)
	s.Fr.WriteWindowUpdate(3, 1<<31-1)
	s.Fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	s.Fr.WriteGoAway(1, http2.ErrCodeNo, []byte("bye"))
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: s.Block("grpc-status", "0", ":path", "/")})
	f.Add(s.Bytes())
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		defer fuzztest.Bound(t)()
		ready := make(chan error, 1)
		cc, peer, ran := pipeClient(t, ClientConfig{Peer: "backend", Window: 1 << 16, MaxMsg: 1 << 20,
			Ready: func(err error) { ready <- err }})
		copied := make(chan struct{})
		go func() { io.Copy(io.Discard, peer); close(copied) }() // what vig sends
		streams := []*recStream{newRec(), newRec()}
		go func() {
			peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
			peer.Write(AppendSettings(nil))
			peer.Write(data) // vig may close first: that is allowed
			peer.Close()
		}()
		if err := <-ready; err == nil {
			for i, r := range streams {
				if cc.Open(&r.ClientStream, r, nil, reqFields) != nil {
					r.End(nil, nil) // not opened: counted as ended here
					continue
				}
				cc.Send(&r.ClientStream, false, mem.BufferSlice{mem.SliceBuffer([]byte("req"))}, i == 0)
			}
		} else {
			for _, r := range streams {
				r.End(nil, nil)
			}
		}
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return 10 s after the server left")
		}
		<-copied
		for _, r := range streams {
			r.mu.Lock()
			n := r.ends
			r.mu.Unlock()
			if n != 1 {
				t.Fatalf("stream %d ended %d times", r.id, n)
			}
		}
	})
}

// newFrames builds a peer's byte stream.
func newFrames() *h2test.Frames { return h2test.NewFrames() }

// benchStream is a stream of the benchmark, its handler as small as a
// gateway's.
type benchStream struct {
	ClientStream
	resp mem.BufferSlice
	done chan error
}

func (s *benchStream) Headers([]hpack.HeaderField) {}
func (s *benchStream) Message(msg mem.BufferSlice, _ bool) error {
	s.resp.Free()
	s.resp = msg
	return nil
}
func (s *benchStream) End(_ []hpack.HeaderField, err error) {
	s.resp.Free()
	s.resp = nil
	s.done <- err
}

// BenchmarkClientConnUnary is one unary call through ClientConn alone: open, a
// 1 KiB request, a 1 KiB answer, the end, against a server over TCP loopback
// that answers from prepared bytes (its own cost is a read and a write per
// call). allocs/op is ClientConn's (and the handler's own stream).
func BenchmarkClientConnUnary(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		benchServer(c)
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	tw, err := netopt.NewTryWriter(nc)
	if err != nil {
		b.Fatal(err)
	}
	ready := make(chan error, 1)
	cc := NewClientConn(NewWriter(nc, NewConnWriter(tw, nc)), NewReader(netopt.NewReader(nc), 64<<10),
		ClientConfig{Peer: "backend", Window: 16 << 20, MaxMsg: 4 << 20, Ready: func(err error) { ready <- err }})
	ran := make(chan error, 1)
	go func() { ran <- cc.Run() }()
	if err := <-ready; err != nil {
		b.Fatal(err)
	}
	req := make([]byte, 1<<10)
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s := &benchStream{done: done}
		if err := cc.Open(&s.ClientStream, s, nil, reqFields); err != nil {
			b.Fatal(err)
		}
		cc.Send(&s.ClientStream, false, mem.BufferSlice{mem.SliceBuffer(req)}, true)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cc.Close(nil)
	<-ran
	nc.Close()
	<-served
}

// benchServer answers every request on c (whole at its END_STREAM) with the
// same prepared frames: headers, a 1 KiB message, trailers, and the
// connection window the request took.
func benchServer(c net.Conn) {
	br := bufio.NewReaderSize(c, 64<<10)
	pre := make([]byte, len(ClientPreface))
	if _, err := io.ReadFull(br, pre); err != nil {
		return
	}
	a := newFrames()
	a.Fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	a.Fr.WriteWindowUpdate(0, 1<<31-1-InitialWindow)
	if _, err := c.Write(a.Bytes()); err != nil {
		return
	}
	// Literal fields with incremental indexing: the same bytes decode the
	// same each time (they only add to the dynamic table again).
	a = newFrames()
	a.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: a.Block(":status", "200", "content-type", "application/grpc")})
	a.Fr.WriteData(1, false, grpcMsg(make([]byte, 1<<10)))
	a.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: a.Block("grpc-status", "0")})
	answer := a.Bytes()
	var ids []int // offsets of the stream ids in answer
	for off := 0; off < len(answer); {
		ids = append(ids, off+5)
		off += 9 + (int(answer[off])<<16 | int(answer[off+1])<<8 | int(answer[off+2]))
	}
	var hdr [9]byte
	out := make([]byte, 0, len(answer)+13)
	got := 0
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		if _, err := br.Discard(n); err != nil {
			return
		}
		if http2.FrameType(hdr[3]) != http2.FrameData {
			continue
		}
		got += n
		if hdr[4]&byte(http2.FlagDataEndStream) == 0 {
			continue
		}
		id := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		out = append(out[:0], answer...)
		for _, off := range ids {
			binary.BigEndian.PutUint32(out[off:], id)
		}
		out = AppendWindowUpdate(out, 0, uint32(got))
		got = 0
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
