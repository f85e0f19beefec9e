// Package inference is the generated Go code (protoc-gen-go, protoc-gen-go-grpc)
// of proto/inference.proto: the subset of Triton's gRPC inference protocol that
// vig decodes, with every RPC of inference.GRPCInferenceService so that all of
// them can be routed. The wire format is Triton's (same field numbers and
// types). Regenerate with `make proto`; this file is written by hand.
package inference
