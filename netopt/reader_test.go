package netopt_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vig-edge/vig/netopt"
)

// The raw Reader behaves as net.Conn.Read: data as it comes, waiting while there
// is none, the read deadline honoured, EOF at the peer's close, net.ErrClosed
// after its own.
func TestReader(t *testing.T) {
	c, peer := tcpPair(t)
	r := netopt.NewReader(c)
	if _, ok := r.(*netopt.Reader); !ok {
		t.Fatalf("NewReader of a TCP connection is a %T, want *netopt.Reader", r)
	}

	go func() {
		time.Sleep(20 * time.Millisecond) // the Read below waits in the netpoller first
		peer.Write([]byte("hello"))
	}()
	b := make([]byte, 64)
	n, err := r.Read(b)
	if err != nil || string(b[:n]) != "hello" {
		t.Fatalf("Read = %q, %v; want hello", b[:n], err)
	}

	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if _, err := r.Read(b); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline: %v, want a net.Error with Timeout()", err)
	}
	c.SetReadDeadline(time.Time{})

	// A large write arrives whole, in as many reads as it takes.
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	go func() { peer.Write(big); peer.Close() }()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("ReadAll: %v (io.EOF at the peer's close is not an error)", err)
	}
	if len(got) != len(big) || string(got) != string(big) {
		t.Fatalf("read %d bytes, want the %d written, equal", len(got), len(big))
	}

	c.Close()
	if _, err := r.Read(b); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
}

// A connection that is not a socket is read as it is.
func TestReaderNotASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if r := netopt.NewReader(a); r != io.Reader(a) {
		t.Fatalf("NewReader(net.Pipe) = %T, want the connection itself", r)
	}
}

// ReadV fills its buffers in order with what the socket holds, waiting while
// it holds nothing.
func TestReaderReadV(t *testing.T) {
	c, peer := tcpPair(t)
	r := netopt.NewReader(c).(*netopt.Reader)
	go func() {
		time.Sleep(10 * time.Millisecond) // ReadV waits for the bytes
		peer.Write([]byte("payload|head|next"))
	}()
	a, b, n := make([]byte, 8), make([]byte, 4), make([]byte, 64)
	got := 0
	for got < 17 {
		k, err := r.ReadV([][]byte{a[min(got, 8):], b[min(max(got-8, 0), 4):], n[max(got-12, 0):]})
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	if string(a) != "payload|" || string(b) != "head" || string(n[:5]) != "|next" {
		t.Errorf("ReadV filled %q %q %q, want \"payload|\" \"head\" \"|next\"", a, b, n[:5])
	}
	peer.Close()
	if _, err := r.ReadV([][]byte{a}); err != io.EOF {
		t.Errorf("ReadV after the peer's close: %v, want EOF", err)
	}
}
