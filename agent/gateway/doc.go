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
// vig speaks HTTP/2 itself (h2frame.go, h2server.go, h2backend.go) instead of
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
// With cpu.hot_path: dedicated the connections are read by one event loop of vig's
// own instead (loop.go, netopt.Poller): one wait and one read per readable event on
// one thread.
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
// # What vig reads, what it forwards
//
// ModelInfer is the one RPC vig reads: it scans the header fields it needs straight
// out of the received message, never the tensor data, removes its own vig_*
// parameters by splicing buffer views, and forwards the rest. ModelStreamInfer
// requests are forwarded one by one as ModelInfer calls and their answers spliced
// into ModelStreamInferResponse messages, so that each can be scheduled on its own.
// System shared-memory registration is mirrored (shm.go) so that tensor references
// are checked before a request waits in vig's queues. Health (grpc.health.v1) is
// answered by vig from the backend's state. Everything else — ModelConfig,
// Repository*, Cuda*, TraceSetting, LogSettings, methods added to the protocol
// later — is relayed message by message, byte for byte.
package gateway
