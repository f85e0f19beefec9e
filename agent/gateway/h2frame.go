package gateway

import (
	"io"
	"net"

	"github.com/vig-edge/vig/h2"
	"github.com/vig-edge/vig/netopt"
)

// vig speaks HTTP/2 itself, on both legs, instead of through grpc-go's transport.
//
// grpc-go gives every connection a reader goroutine, every RPC a handler goroutine
// and every connection a writer goroutine (loopy), so one proxied request crosses
// four hand-offs between goroutines, each a futex wake-up of another thread on a
// multi-core machine. vig needs none of that machinery: it reads a request's
// frames on the connection's reader goroutine, decides there (the scheduler is a
// state machine taken under a lock), and writes the request to the backend from
// that same goroutine; the backend connection's reader writes the answer to the
// client. A request therefore costs a read and a write on each side and the
// netpoller's wake-ups, as in an event-driven proxy.
//
// Package h2 holds what both legs share below their stream tables (framing, the
// reader, the writer with flow control, message assembly); this file joins it to
// vig's sockets.

// connReader is what a connection's reader reads: the socket read with raw
// syscalls (netopt.Reader).
func connReader(nc net.Conn) io.Reader { return netopt.NewReader(nc) }

// newH2Writer is the sending half of nc, with raw non-blocking writes
// (netopt.TryWriter).
func newH2Writer(nc net.Conn) (*h2.Writer, error) {
	tw, err := netopt.NewTryWriter(nc)
	if err != nil {
		return nil, err
	}
	return h2.NewWriter(nc, h2.NewConnWriter(tw, nc)), nil
}
