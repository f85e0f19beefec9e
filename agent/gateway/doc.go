// Package gateway is vig's Triton-protocol frontend — gRPC over HTTP/2, on TCP and
// on a Unix socket, that existing Triton clients point at unchanged — and its leg to
// the backend, with the freshness scheduler between them.
//
// # One pipeline
//
// Every inference request, whatever its frontend (a gRPC ModelInfer, one message of
// ModelStreamInfer, a ring descriptor from ringfront) becomes one Call: its header
// parsed once (wire.InferHeader), the message to forward, and the frontend's answer
// path (Replier). Every backend (Triton over gRPC here, a ring runtime in ringback)
// implements Backend, chosen once when the gateway is built. Submit → scheduler →
// Backend.Start → Call.Finish → scheduler → Replier.Reply, each step on the
// goroutine that has the event (pipeline.go); the scheduler's decision is taken
// inline under its lock (govern.go).
//
// # The transport
//
// vig speaks HTTP/2 itself (package h2 below the stream tables; h2server.go, h2backend.go here) instead of
// through grpc-go's server and client: grpc-go gives every RPC a handler goroutine
// and every connection a writer goroutine, so a proxied request crossed four
// hand-offs between threads. Here each connection has one reader; a request is
// handled on the client connection's reader and written to the backend from there;
// the answer is written to the client by the backend connection's reader. Writes
// never park the writer (netopt.TryWriter): what a full socket does not take waits
// for a flusher goroutine that exists only while it has something to write.
// Socket reads and sends are raw syscalls (netopt.Reader, netopt.TryWriter): they
// never block, and the ordinary syscall entry would wake the Go runtime's monitor
// thread, asleep whenever vig is idle between two frames, for every request.
// Flow control, SETTINGS, PING, RST_STREAM, GOAWAY (graceful, with the two-step
// drain), trailers, metadata and deadlines (grpc-timeout) follow RFC 9113 and gRPC's
// HTTP/2 mapping; the conformance and abuse suites in this package hold it to them.
//
// # Conformance and bounds
//
// h2spec 2.2.1 (RFC 9113 and RFC 7541, 145 cases; build/h2spec.sh, make h2spec,
// TestH2Spec) passes all 145 against vig serve; in the same run grpc-go's server
// (vig mock-backend) passes 114 (26 failed) and nginx 1.22 grpc_pass 114 (27
// failed). The MUSTs h2spec found broken are each a case of TestH2MUSTs. What
// vig decides where the RFC leaves a choice:
//
//   - A setting repeated in one SETTINGS frame is applied in order: "The values in
//     the SETTINGS frame MUST be processed in the order they appear" (§6.5.3).
//     x/net refuses duplicates (and fails h2spec 6.5.3 for it); vig bounds the
//     work instead, at maxSettings (100) entries per frame, ENHANCE_YOUR_CALM above.
//   - A request that is not gRPC (not POST, or not application/grpc) is answered
//     as HTTP, 405 or 415 with a text body, so that a person or a generic client
//     sees what vig is. A malformed request (§8.1.1: field names, pseudo-headers,
//     connection-specific fields, te, content-length against the DATA) is a
//     stream error PROTOCOL_ERROR (h2.CheckRequest), answered before anything of it
//     reaches the backend: a relayed RPC's backend stream opens with its first
//     message, which is delivered only after the checks.
//   - A stream vig has answered stays in the table (counted against
//     SETTINGS_MAX_CONCURRENT_STREAMS, §5.1.2) until the client ends its side, so
//     that a frame on a closed stream can be told from one on a half-closed one.
//     Frames on streams vig reset are ignored for the last 256 resets (closedIDs);
//     the ids a client skipped are kept for its last 8 skips (§5.1.1). Past those,
//     a late frame gets STREAM_CLOSED rather than PROTOCOL_ERROR: an error either way.
//
// A ModelInfer request of 128 KiB or more is governed from its head and
// forwarded to a gRPC backend while its tensor bytes still arrive, checked
// before each piece goes on (cutthrough.go): the client's transfer and the
// backend's overlap, as through a streaming proxy.
//
// Memory follows bytes that arrived, never lengths that were promised: a message
// body grows in pooled chunks as its DATA arrives (h2.Assembler), and what one
// connection's incomplete messages hold is bounded by h2.ConnMsgBudget (128 MiB, or
// max_message_mib + 1 MiB when that is larger); a message that would overdraw it
// fails RESOURCE_EXHAUSTED, not the connection. Control frames answering a peer
// that does not read are bounded by maxQueuedControl (10000, x/net's bound),
// header blocks by maxHeaderBlock and maxHeaderList (1 MiB each), streams by
// maxConcurrentStreams (1000).
//
// The backend leg is a careful client: a stream fault of the backend (a second
// header block, a stream window overflow or a WINDOW_UPDATE of 0, a header list
// above 1 MiB, RST_STREAM) fails only that call; a connection fault (a frame on a
// stream vig never opened, DATA on stream 0, an undecodable header block) is
// answered with GOAWAY, fails the calls on that connection UNAVAILABLE, and the
// connection is redialled with backoff, kept for connections that end at once.
// After the backend's GOAWAY, calls above its last stream id (not processed,
// §6.8) start again on the next connection. The backend's
// SETTINGS_MAX_CONCURRENT_STREAMS and SETTINGS_MAX_HEADER_LIST_SIZE are honoured.
// A non-200 :status, early trailers or a failed answer reset the backend stream
// (CANCEL) rather than leave it open there. The leg's stream table and all of
// this is h2.ClientConn (the streams vig opened, what the backend's frames mean
// for them, each call's end as a gRPC status); h2backend.go keeps the connection
// manager (dial, backoff, redial after GOAWAY, calls parked meanwhile), Call ↔
// stream wiring (a bstream embeds its h2.ClientStream and is its handler),
// metadata and gzip, and never takes the connection's lock.
// So is a client's SETTINGS_MAX_HEADER_LIST_SIZE: response headers or trailers
// above it (the backend's metadata) are not sent, the call is answered INTERNAL
// naming the setting (§6.5.2; grpc-go's server resets the stream instead).
//
// Flow-control windows are credited as data arrives on both legs; what bounds a
// client that sends faster than the backend consumes is its connection's
// budget, which counts a request's message until its buffers are freed: while
// it waits in vig's queues, and after it was handed to the backend leg, until
// written (h2.Budget.HoldDelivered). A message that would take a connection
// past it fails RESOURCE_EXHAUSTED, saying how much waits for the backend. The
// relayed RPCs of Triton's protocol are unary and assembled whole before they
// are forwarded (the backend stream opens at the first complete message, so a
// rapid reset never reaches the backend). Answers are not counted so: the
// backend connection is shared, and one client that does not read must not
// fail the others' calls, so vig reads the backend on and holds the answers.
// What it holds for one client connection is bounded by answerBudget (as
// large as the requests' budget): an answer that would take the connection's
// unread answers above it fails its stream RESOURCE_EXHAUSTED, saying why.
// The client leg's stream table is package h2's (h2.ServerConn:
// what each frame means for a client stream, the concurrency limit, the drain,
// message assembly under the connection's budget, the answer's frames, under h2's
// own lock); h2server.go is its handler (sconn, sstream: an sstream embeds its
// h2.ServerStream and keeps the RPC's state, pending calls and relay, under a
// mutex of its own, taken before h2's). The backend leg's is h2.ClientConn
// (above). Package h2 also holds framing, the reader (h2.Input reads a large
// message's DATA payloads into the message's buffer) and the writer with send
// flow control, message assembly, the request rules, and the one frame loop both
// roles run (h2.FrameLoop: the connection's part of every frame, SETTINGS, PING,
// GOAWAY and WINDOW_UPDATE, the connection's receive window, and the checks each
// frame must pass whatever its stream; it hands the role's table what concerns a
// stream). Both tables name a stream's state
// with h2.StreamState (§5.1), keep its receive window in an h2.RecvWindow, and
// list what their messages hold in h2.Partials. The legs see each other only
// through relayTarget and relayClient, and a Call holds no stream of theirs
// (Call.run is the backend's opaque reference).
//
// # vig's own deadline
//
// Every call handed to a backend is given up on at the client's deadline, or
// backend.call_timeout_ms after dispatch when the client set none, plus a small
// grace (expiry.go): the client is answered DEADLINE_EXCEEDED, the backend is told
// to Abort the call, and its slot is freed, so a backend that honours neither
// grpc-timeout nor RST_STREAM cannot hold a slot forever. One timer serves all
// calls.
//
// # Sequences and deadlines handed on
//
// The governor reads a request's sequence_id, sequence_start and sequence_end
// (wire.InferHeader.Sequence) into the scheduler's request, which keeps a
// sequence whole for Triton's sequence batcher (agent/sched, Sequences). On
// the gRPC backend path vig appends Triton's timeout (the frame's freshness
// budget left) and priority (from its class) to the message it forwards,
// after its last field, where the server's model configuration says they act
// (models.X.hand_deadline); a frame the backend drops at that timeout is
// answered DEADLINE_EXCEEDED and counted late_dropped (handoff.go). A ring
// backend gets neither: it has no queue of its own beyond vig's.
//
// # Batching
//
// For a model with max_batch above 1, the governor gives each frame a batch
// key (wire.BatchKey) as it arrives; the scheduler decides which waiting
// frames run as one job, and its Dispatches of a batch come together under
// its lock. collect groups them into one batch Call (batch.go): the members'
// messages merged into the request Triton's dynamic batcher would form (rows
// concatenated along the first dimension, tensor bytes as views of the
// members' buffers, the first member's id and parameters), the first
// member's metadata, the earliest client deadline. It runs through the
// Backend and vig's expiry like any call. Its answer is split into one answer
// per member, byte-equal to what the frame alone would have got; the
// scheduler's Complete runs once, for the batch's lead, which finishes every
// member; then every member is answered exactly once: its own answer, the
// batch's error (the backend's status, or INTERNAL naming an output that
// cannot be cut), or CANCELLED when its client left meanwhile (its row stays
// in the batch; the batch is aborted at the backend only when every member
// left). A frame that cannot join runs alone; docs/batching.md lists why, and
// vig_batch_alone_total counts it. A cut-through request (its bytes still
// arriving) and a ring frame offered by reference run alone. A ring frame
// sent by copy joins: its message is built when it arrives rather than at
// dispatch (for a sealed region its bytes stay views of the client's
// mapping). Measured alone (ringfront BenchmarkRingBatchKey, a frame [1, n]
// through vig to the mock, max_batch 8 against 1, a shared 2-core machine):
// no difference beyond noise in time, allocations per frame 87/87, 92/92,
// 106/104 at 1 KB, 150 KB, 1.2 MB; so ring frames join.
//
// # What vig reads, what it forwards
//
// ModelInfer is the one RPC vig reads: it scans the header fields it needs straight
// out of the received message, never the tensor data, removes its own vig_*
// parameters by splicing buffer views, and forwards the rest, with the
// deadline and class it hands on appended. ModelStreamInfer
// requests are forwarded one by one as ModelInfer calls and their answers spliced
// into ModelStreamInferResponse messages, so that each can be scheduled on its own.
// System shared-memory registration is mirrored (shm.go) so that tensor references
// are checked before a request waits in vig's queues. Health (grpc.health.v1) is
// answered by vig from the backend's state. ModelReady, ModelMetadata,
// ModelConfig and ModelStatistics naming a logical model are answered from
// its variants' answers (logical.go). Everything else — ModelConfig of a served model,
// Repository*, Cuda*, TraceSetting, LogSettings, methods added to the protocol
// later — is relayed message by message, byte for byte.
package gateway
