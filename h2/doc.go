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
// the client leg (a server role) in agent/gateway, which still keeps its stream
// table (what a HEADERS or DATA frame means for a stream, and whom it concerns)
// and governance, and the backend leg (a client role), whose stream table is
// here (ClientConn, client.go: the streams vig opened, the answer's checks,
// GOAWAY, each stream's end as a gRPC status); agent/gateway keeps only its
// connection manager and what a call means.
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
// (ConnMsgBudget, 128 MiB, or the largest message + 1 MiB). A header block is
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
// guards each stream's SendState and a ClientConn's stream table (streams,
// next id, GOAWAY, why it failed). ClientConn's methods take it themselves: a
// caller never does. The order is a caller's own locks first, then the
// connection's; h2 calls out with it held only where that is documented
// (Writer.EachStream and OnClosed, Streams.SendState, ClientConn.Open's opened,
// which must only record the id). A ClientHandler's methods and a
// ClientConfig's Ready and GoAway run on the reader goroutine with no lock of
// h2 held, so they may call the ClientConn and take their own locks. The
// reader goroutine alone owns the Reader, each stream's Assembler and
// RecvWindow, and the connection's Budget and Partials.
package h2
