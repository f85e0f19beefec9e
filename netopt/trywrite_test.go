package netopt_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vig-edge/vig/netopt"
)

func tcpPair(t *testing.T) (c, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	c, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, peer
}

// WriteAll writes every byte of many buffers, more than a socket buffer holds
// and more than one writev takes (UIO_MAXIOV), to a peer that reads slowly; a
// write deadline ends it; a connection that is not a socket is refused with
// ErrNotSocket (the caller writes it itself).
func TestTryWriterWriteAll(t *testing.T) {
	c, peer := tcpPair(t)
	w, err := netopt.NewTryWriter(c)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	var bufs [][]byte
	for i := range 3000 { // 3000 buffers of 1–5 KB: ~9 MB
		b := bytes.Repeat([]byte{byte(i)}, 1000+i%4000)
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	got := make(chan []byte, 1)
	go func() {
		var out bytes.Buffer
		buf := make([]byte, 64<<10)
		for out.Len() < len(want) {
			time.Sleep(time.Millisecond) // slower than the writer: the socket fills
			n, err := peer.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- out.Bytes()
	}()
	if err := w.WriteAll(bufs); err != nil {
		t.Fatalf("WriteAll: %v", err)
	}
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("the peer read %d bytes, want the %d written, equal", len(g), len(want))
	}

	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)) // nobody reads from here on
	err = w.WriteAll([][]byte{make([]byte, 64<<20)})
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WriteAll to a peer that stopped reading, past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	pw, err := netopt.NewTryWriter(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := pw.WriteAll([][]byte{[]byte("x")}); !errors.Is(err, netopt.ErrNotSocket) {
		t.Fatalf("WriteAll on a pipe: %v, want ErrNotSocket", err)
	}
}
