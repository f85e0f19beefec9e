// Package h2 is vig's HTTP/2 (RFC 9113) below the stream tables: framing (frame
// headers and the frames vig writes), the receiving half of a connection
// (Reader: frame headers, control payloads, header blocks through HPACK with
// bounds), the sending half (Writer: frames batched under its lock and written
// with one writev that never parks the caller, send flow control per stream and
// connection, SETTINGS and PING handling with the control-frame bound), gRPC
// message assembly from DATA frames (Assembler, with a per-connection memory
// Budget), and the rules that make a request malformed (CheckRequest,
// CheckTrailers, §8.1.1) or a closed stream's frame ignorable (ClosedIDs). The
// one frame loop of both roles is here too (FrameLoop: it decides each frame's
// connection-level part, RFC 9113 §6, and hands a role's stream table, behind the
// Streams interface, what concerns a stream, checked), with the names of a
// stream's states (StreamState, §5.1), the receive windows (RecvWindow; the
// credit thresholds StreamCreditDivisor and ConnCreditDivisor) and the list
// of assemblers a Budget reclaims from (Partials). Both of vig's legs use it:
// the client leg (a server role) and the backend leg (a client role) in
// agent/gateway, and both stream tables are here. ServerConn (server.go) is
// the server role's: what a HEADERS, DATA or RST_STREAM frame means for a
// client stream, skipped ids, the concurrency limit, the drain, each stream's
// assembly, receive window and content-length, and the answer's frames
// through ServerStream. ClientConn (client.go) is the client role's: the
// streams vig opened, the answer's checks, GOAWAY, each stream's end as a
// gRPC status. agent/gateway is their handler: it keeps governance (what a
// request and a call mean) and the backend connection manager. A
// connection's bytes come in through Input (input.go), which reads a large
// message's DATA payloads into the message's own buffer. A server role may
// take a large message while it still arrives (Early, Sink: cut-through): its
// bytes are then handed on in pieces as views of the same pooled chunks,
// counted against the Budget like a delivered message until freed.
//
// It imports nothing of vig's agent/ (archtest enforces it), so that what reads
// untrusted bytes can be tested and fuzzed alone (FuzzReader, FuzzAssembler).
//
// # Bounds
//
// Memory follows the bytes that arrived, never the lengths that were promised:
// an Assembler takes a buffer chunk only when body bytes arrive for it, chunks
// grow with what has arrived (16 KiB, 32 KiB, then 1 MiB), and what a
// connection's incomplete messages hold is charged to its Budget
// (ConnMsgBudget, 128 MiB, or the largest message + 1 MiB); a server role's
// delivered messages stay charged until their buffers are freed, so a client
// that sends faster than the other leg consumes is refused, not buffered
// without end (Budget.HoldDelivered). The answers a server role holds for a
// client that does not read (Writer.Held: queued for its window or its
// socket) are bounded by ServerConfig.AnswerBudget: an answer that would take
// them above it fails its stream RESOURCE_EXHAUSTED. A header block is
// bounded by MaxHeaderBlock compressed and MaxHeaderList decoded (1 MiB each); a
// list above the latter is decoded all the same (HPACK stays in step) and
// refused for its stream only (ErrHeaderListTooBig). Control frames that answer
// a peer which does not read wait at most MaxQueuedControl (10000, x/net's
// bound), then the connection is refused ENHANCE_YOUR_CALM; a SETTINGS frame
// carries at most MaxSettings (100) entries.
//
// # Locking
//
// A connection has one lock, its Writer's: it orders the frames written, and
// guards each stream's SendState and the role's table (a ServerConn's streams
// and whether each is answered; a ClientConn's streams, next id, GOAWAY, why it
// failed). The roles' methods take it themselves: nothing outside h2 does. The
// lock order is: a caller's own locks (agent/gateway's sstream.mu, bstream's),
// then the connection's; never the other way. So a stream's methods may be
// called with the caller's locks held, and the roles call their handlers
// without the lock: a StreamHandler's Open, Message, HalfClosed, Failed and
// Cancelled, a ClientHandler's methods and a ClientConfig's Ready and GoAway
// run on the connection's reader goroutine with no h2 lock held, and may call
// back into h2. These run with the lock held and must not call into h2, take a
// lock a caller of h2 may hold, or block: Handler.NewStream (it only
// allocates; the stream enters the table under the lock),
// StreamHandler.Answered (called at the moment the stream is answered, so that
// its accounting happens exactly once), Writer.EachStream and OnClosed,
// Streams.SendState, and ClientConn.Open's opened (it must only record the
// id). The reader goroutine alone owns the Reader and its Input, each stream's
// Assembler and RecvWindow, and the connection's Budget and Partials.
package h2
