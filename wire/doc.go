// Package wire holds the Triton-protocol types that every vig data path shares: a
// gRPC message as the bytes that crossed the wire (Frame, and the raw codec that
// moves it), and what vig reads of a ModelInferRequest without decoding its tensor
// data (InferHeader: names, parameters, raw tensor spans), read straight out of the
// transport's buffers; and the server's model configuration as vig reads it
// (ModelConfig: batching, instance groups, tensors), the one place that holds
// the format of Triton's model_config.proto.
//
// It is a leaf: the gateway, the ring adapters, the mock backend and the benchmarks
// import it, and it imports nothing of vig but the generated protocol. A request's
// header is parsed once, at the frontend that received it, and travels with the
// request from there.
package wire

// Service is the fully qualified name of the Triton inference service.
const Service = "inference.GRPCInferenceService"

// Method paths of the RPCs vig reads.
const (
	MethodInfer         = "/" + Service + "/ModelInfer"
	MethodStreamInfer   = "/" + Service + "/ModelStreamInfer"
	MethodStatistics    = "/" + Service + "/ModelStatistics"
	MethodShmRegister   = "/" + Service + "/SystemSharedMemoryRegister"
	MethodShmUnregister = "/" + Service + "/SystemSharedMemoryUnregister"
	MethodShmStatus     = "/" + Service + "/SystemSharedMemoryStatus"
)
