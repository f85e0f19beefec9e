// Package gateway is vig's Triton-protocol frontend: a gRPC server, on TCP and on a
// Unix socket, that existing Triton clients point at unchanged, and the client leg to
// the backend.
//
// Every RPC of inference.GRPCInferenceService reaches the backend. vig registers no
// typed service for it: all methods arrive at one unknown-service handler that uses
// a raw codec (wire.Frame), so methods vig has no message types for (ModelConfig,
// Repository*, Cuda*, TraceSetting, LogSettings, or RPCs added to the protocol later)
// pass through byte for byte. ModelInfer is the one vig reads: it scans the header
// fields it needs straight out of gRPC's receive buffers (wire.InferHeader), never the
// tensor data, removes its own vig_* parameters by splicing buffer views, and
// forwards the rest. ModelStreamInfer requests are forwarded one by one as ModelInfer
// calls and their answers spliced into ModelStreamInferResponse messages, so that
// each one can be scheduled on its own.
//
// Metadata and deadlines propagate in both directions; backend status codes come
// back unchanged. The health service answers SERVING only while the backend
// connection is READY.
//
// Cost per request: the handler runs on the goroutine gRPC gave the RPC, forwards on
// the same goroutine, and allocates nothing per byte of payload.
package gateway
