package restfront

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// The smuggling guard. A request that carries both Content-Length and
// Transfer-Encoding is framed differently by different HTTP parsers: the shape
// of a request-smuggling attempt (RFC 9112 §6.3 says such a message "ought to be
// handled as an error"). Go's server follows Transfer-Encoding and drops
// Content-Length from the header, so the handler cannot see it. The guard reads
// each request head on the raw connection before Go does; when both headers
// are there it renames Content-Length to smuggledHeader (a name of the same
// length, so nothing shifts), and the handler refuses the request and closes
// the connection. To find each head it follows the framing of the bodies
// between them (Content-Length bytes, or chunks); after anything it cannot
// frame, or a refused head, it stops looking (Go refuses those requests itself
// and closes the connection).

// smuggledHeader replaces the name "Content-Length" (14 bytes) in a head that
// also has Transfer-Encoding.
const smuggledHeader = "Vig-Smuggle-CL"

const maxChunkLine = 4096

type guardListener struct {
	net.Listener
	maxHead int
	f       *Frontend
}

// connsFull is the answer to a connection over Options.MaxConns.
var connsFull = func() []byte {
	body := `{"error":"vig has as many HTTP connections open as it takes (rest.max_conns): retry, or reuse a connection"}`
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nVig-Code: UNAVAILABLE\r\n" +
		"Connection: close\r\nRetry-After: 1\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

func (l guardListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.f.conns.Add(1) > int64(l.f.opts.MaxConns) {
			l.f.conns.Add(-1)
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(connsFull)
			c.Close()
			continue
		}
		return &guardConn{Conn: c, maxHead: l.maxHead, f: l.f}, nil
	}
}

type guardState uint8

const (
	stHead      guardState = iota // collecting a request head
	stBody                        // left bytes of a Content-Length body
	stChunkLine                   // a chunk-size line
	stChunkData                   // left bytes of a chunk, then its CRLF line
	stChunkEnd                    // the line ending a chunk's data
	stTrailer                     // trailer lines up to the empty one
	stPass                        // no longer looking
)

// guardConn is a connection whose reads pass through the guard. Reads happen
// on one goroutine at a time: the server's connection goroutine, or between
// requests its background read (one byte, ended by a read deadline).
type guardConn struct {
	net.Conn
	f       *Frontend
	closed  sync.Once
	handled atomic.Bool // a handler took the head the guard last passed
	maxHead int
	state   guardState
	left    int64
	head    []byte // the head (or chunk line) collected so far
	out     []byte // bytes ready for the server
	buf     []byte // what heads are read into
}

func (c *guardConn) Read(p []byte) (int, error) {
	if len(c.out) == 0 && (c.state == stBody || c.state == stChunkData) && len(p) > 0 {
		// Body bytes go straight to the server's buffer: the guard only
		// counts them (a 6 MB tensor is not copied through it).
		n, err := c.Conn.Read(p[:min(int64(len(p)), c.left)])
		if c.left -= int64(n); c.left == 0 {
			if c.state == stBody {
				c.state = stHead
			} else {
				c.state = stChunkEnd
			}
		}
		return n, err
	}
	for len(c.out) == 0 {
		if c.state == stPass {
			return c.Conn.Read(p)
		}
		// Into the guard's own buffer, not p: net/http's background read asks
		// for one byte, and a head read a byte per syscall would be slow.
		if c.buf == nil {
			c.buf = make([]byte, 4096)
		}
		n, err := c.Conn.Read(c.buf)
		c.feed(c.buf[:n])
		if len(c.out) == 0 && err != nil {
			// A partial head at EOF goes to the server as it is (it refuses it).
			// Any other error, such as the deadline net/http sets to end its
			// background read between requests, leaves the head collected so
			// far where it is: handing it over would split it, and the guard
			// would then take the rest of the head, and the body, for a new head.
			if err == io.EOF && len(c.head) > 0 {
				c.handled.Store(false)
				c.out, c.head = c.head, nil
				c.state = stPass
				break
			}
			return 0, err
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// feed runs b through the state machine, appending (copying) what may go to
// the server to c.out.
func (c *guardConn) feed(b []byte) {
	for len(b) > 0 {
		switch c.state {
		case stPass:
			c.out = append(c.out, b...)
			return
		case stHead, stChunkLine, stChunkEnd, stTrailer:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				c.head = append(c.head, b...)
				b = nil
			} else {
				c.head = append(c.head, b[:i+1]...)
				b = b[i+1:]
			}
			limit := maxChunkLine
			if c.state == stHead {
				limit = c.maxHead + 4096
			}
			if len(c.head) > limit {
				if c.state == stHead {
					c.handled.Store(false) // Go answers this head itself (431)
				}
				c.pass()
				continue
			}
			if i >= 0 {
				c.line()
			}
		case stBody, stChunkData:
			n := int64(len(b))
			if n > c.left {
				n = c.left
			}
			c.out = append(c.out, b[:n]...)
			b = b[n:]
			if c.left -= n; c.left == 0 {
				if c.state == stBody {
					c.state = stHead
				} else {
					c.state = stChunkEnd
				}
			}
		}
	}
}

// pass stops looking; what was collected goes to the server as it is.
func (c *guardConn) pass() {
	c.out = append(c.out, c.head...)
	c.head = nil
	c.state = stPass
}

// line handles a complete line at the end of c.head.
func (c *guardConn) line() {
	h := c.head
	switch c.state {
	case stChunkEnd:
		c.flushHead(stChunkLine)
	case stChunkLine:
		size := strings.TrimSpace(string(h))
		if i := strings.IndexByte(size, ';'); i >= 0 {
			size = strings.TrimSpace(size[:i])
		}
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil || n < 0 {
			c.pass()
			return
		}
		if n == 0 {
			c.flushHead(stTrailer)
			return
		}
		c.left = n
		c.flushHead(stChunkData)
	case stTrailer:
		next := stTrailer
		if len(bytes.TrimRight(h, "\r\n")) == 0 {
			next = stHead
		}
		c.flushHead(next)
	case stHead:
		if len(bytes.TrimRight(h, "\r\n")) == 0 && bytes.Count(h, []byte("\n")) == 1 {
			c.flushHead(stHead) // an empty line before a request line
			return
		}
		if !bytes.HasSuffix(h, []byte("\n\r\n")) && !bytes.HasSuffix(h, []byte("\n\n")) {
			return // more header lines to come
		}
		c.checkHead()
	}
}

func (c *guardConn) flushHead(next guardState) {
	c.out = append(c.out, c.head...)
	c.head = c.head[:0:0]
	c.state = next
}

// checkHead reads a complete head: it marks a smuggling attempt and finds how
// the body is framed.
func (c *guardConn) checkHead() {
	h := c.head
	c.handled.Store(false)
	unfold(h)
	clAt, clCount := -1, 0
	var cl string
	te := ""
	lines := bytes.Split(h, []byte("\n"))
	off := 0
	for i, ln := range lines {
		start := off
		off += len(ln) + 1
		if i == 0 {
			continue
		}
		name, value, ok := bytes.Cut(ln, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case strings.EqualFold(string(name), "Content-Length"):
			clAt, cl = start, strings.TrimSpace(string(value))
			clCount++
		case strings.EqualFold(string(name), "Transfer-Encoding"):
			te = strings.ToLower(strings.TrimSpace(string(value)))
		}
	}
	switch {
	case te != "" && clAt >= 0, clCount > 1:
		// Go would drop Content-Length beside Transfer-Encoding, and take
		// identical repeated ones for one: the handler refuses both shapes
		// and closes the connection.
		copy(h[clAt:], smuggledHeader)
		c.pass()
	case te == "chunked":
		c.flushHead(stChunkLine)
	case te != "":
		c.pass() // Go refuses this itself
	case clAt >= 0:
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			c.pass()
			return
		}
		c.left = n
		if n == 0 {
			c.flushHead(stHead)
			return
		}
		c.flushHead(stBody)
	default:
		c.flushHead(stHead)
	}
}

// goErrorHeaders follow the status line of the answers Go's server writes
// itself, to a request it cannot read (net/http's errorHeaders).
const goErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// Write passes the server's bytes through, except an answer Go's server
// writes itself to a request no handler took (a malformed head, a header
// block over the limit, an unsupported Transfer-Encoding): that becomes
// Triton's {"error": …} JSON body with the same status. Go writes such an
// answer whole in one Write, after the guard passed it a head no handler
// took. A handler's answer starts with its own headers (never these), so it
// is left alone; the one exception would be a pipelined head read while a
// handler still writes, and that handler's body flushed in a Write that
// begins exactly as Go's error does: the bytes of a tensor in that form.
func (c *guardConn) Write(p []byte) (int, error) {
	if c.handled.Load() || !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) || len(p) < 13 {
		return c.Conn.Write(p)
	}
	i := bytes.Index(p, []byte(goErrorHeaders))
	if i < 0 || bytes.IndexByte(p[:i], '\n') >= 0 {
		return c.Conn.Write(p)
	}
	code, err := strconv.Atoi(string(p[9:12]))
	if err != nil || code < 400 {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(goError(code, string(p[i+len(goErrorHeaders):]), c.maxHead)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// goError is the JSON answer for one of Go's own errors; text is Go's body
// ("400 Bad Request: malformed Host header").
func goError(code int, text string, maxHead int) []byte {
	msg := strings.TrimSpace(text)
	if _, rest, ok := strings.Cut(msg, ": "); ok {
		msg = rest
	}
	grpcCode := codes.InvalidArgument
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		grpcCode = codes.ResourceExhausted
		msg = fmt.Sprintf("the request's headers are larger than vig's limit of %d bytes: send fewer or shorter headers", maxHead)
	case http.StatusNotImplemented:
		grpcCode = codes.Unimplemented
		msg = "vig does not read this request (" + msg + "): send Transfer-Encoding chunked, or a Content-Length"
	default:
		msg = "malformed HTTP request: " + msg
	}
	body := append([]byte(`{"error":`), appendString(nil, []byte(msg))...)
	body = append(body, '}')
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nVig-Code: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n",
		code, http.StatusText(code), codeName(grpcCode), len(body))
	return append([]byte(head), body...)
}

// Close gives the connection's place back (once).
func (c *guardConn) Close() error {
	c.closed.Do(func() { c.f.conns.Add(-1) })
	return c.Conn.Close()
}

// unfold replaces each obsolete line folding (a header line that begins with
// a space or a tab, RFC 9112 section 5.2) in the head h by spaces, in place,
// so that the guard and Go's server, which unfolds such lines, read the same
// headers. A fold right after the request line is left alone (Go refuses it).
func unfold(h []byte) {
	first := bytes.IndexByte(h, '\n')
	for i := first + 1; i >= 1 && i < len(h)-1; i++ {
		if h[i] != '\n' || (h[i+1] != ' ' && h[i+1] != '\t') {
			continue
		}
		h[i] = ' '
		if h[i-1] == '\r' {
			h[i-1] = ' '
		}
	}
}

// CloseWrite passes the server's half-close through (net/http shuts the write
// side before closing a connection it refuses, so that the client reads the
// answer rather than a reset).
func (c *guardConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
