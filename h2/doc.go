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
// agent/gateway. The server role's stream table is here (ServerConn: what a
// HEADERS, DATA or RST_STREAM frame means for a client stream, skipped ids,
// the concurrency limit, the drain, each stream's assembly, receive window and
// content-length, and the answer's frames through ServerStream); agent/gateway
// is its Handler, and keeps governance. The backend leg in agent/gateway still
// keeps its stream table (what a HEADERS or DATA frame means for a stream, and
// whom it concerns).
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
// A connection has one lock, its Writer's: it guards what the Writer sends and
// the ServerConn's table (the streams, their send state, whether each is
// answered). Nothing outside h2 takes it (a role's table in agent/gateway still
// does, through Writer.Lock, until it moves here). The lock order is: the
// handler's own locks (agent/gateway's sstream.mu), then h2's; never the other
// way. So a ServerStream's methods may be called with the handler's locks held,
// and ServerConn calls its handlers without its lock: Open, Message,
// HalfClosed, Failed and Cancelled run on the connection's reader goroutine
// with no h2 lock held, and may call back into h2. Two run with the lock held
// and must not call into h2, take a lock a caller of h2 may hold, or block:
// Handler.NewStream (it only allocates; the stream enters the table under the
// lock) and StreamHandler.Answered (called at the moment the stream is
// answered, so that its accounting happens exactly once).
package h2
