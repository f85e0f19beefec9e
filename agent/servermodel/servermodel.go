// Package servermodel reads how the backend configured the models vig governs
// (Triton's ModelConfig: instance groups, max_batch_size, the batchers) and
// classifies each answer, for every part of vig that needs it: the gateway's
// batching and layout check after each connection, vig serve's layout before
// the gateway exists, doctor, and vig bench.
//
// A backend without ModelConfig (a ring runtime, a minimal server) leaves
// vig's config as the only source; a model the server does not describe is
// left out; a backend that is not up is worth asking again; a configuration
// that does not decode is not.
package servermodel

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// Client is what answers ModelConfig: Triton's gRPC client
// (pb.GRPCInferenceServiceClient), or Func around anything else.
type Client interface {
	ModelConfig(ctx context.Context, in *pb.ModelConfigRequest, opts ...grpc.CallOption) (*pb.ModelConfigResponse, error)
}

// Func adapts a function, such as an in-process server's ModelConfig method,
// to a Client.
type Func func(ctx context.Context, in *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error)

// ModelConfig calls f; a Func takes no call options.
func (f Func) ModelConfig(ctx context.Context, in *pb.ModelConfigRequest, _ ...grpc.CallOption) (*pb.ModelConfigResponse, error) {
	return f(ctx, in)
}

// ErrBadModelConfig marks a model configuration the backend sent that vig
// cannot decode: asking again does not help. A Client whose answer does not
// decode as a ModelConfigResponse wraps it too.
var ErrBadModelConfig = errors.New("the backend's model configuration does not decode as Triton's ModelConfig")

// Outcome classifies the backend's answer to one model's ModelConfig.
type Outcome uint8

const (
	// Described: the server gave the model's configuration.
	Described Outcome = iota
	// NoModelConfig: the server has no ModelConfig (UNIMPLEMENTED), so it
	// describes no model; vig's config is the only source.
	NoModelConfig
	// NotDescribed: the server refuses this model's configuration
	// (NOT_FOUND: not loaded; or any other refusal).
	NotDescribed
	// NotUp: the backend is not up (UNAVAILABLE, a deadline, cancelled):
	// ask again later.
	NotUp
	// Undecodable: the answer does not decode (ErrBadModelConfig).
	Undecodable
)

var outcomeNames = [...]string{
	Described:     "described",
	NoModelConfig: "no ModelConfig",
	NotDescribed:  "not described",
	NotUp:         "not up",
	Undecodable:   "undecodable",
}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// Result is the backend's answer for one model.
type Result struct {
	Outcome Outcome
	Config  *wire.ModelConfig // set when Described
	// Err is why the model is not Described: the client's error as it came,
	// or for Undecodable one that wraps ErrBadModelConfig and names the model.
	Err error
}

// Read asks c for model's configuration and classifies the answer.
func Read(ctx context.Context, c Client, model string) Result {
	resp, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: model})
	if err != nil {
		return Result{Outcome: classify(err), Err: namedBad(model, err)}
	}
	mc, err := wire.ParseModelConfig(resp.GetConfig())
	if err != nil {
		return Result{Outcome: Undecodable, Err: fmt.Errorf("model %s: %w: %w", model, ErrBadModelConfig, err)}
	}
	return Result{Outcome: Described, Config: mc}
}

// classify maps a failed call to its outcome.
func classify(err error) Outcome {
	if errors.Is(err, ErrBadModelConfig) {
		return Undecodable
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return NotUp // a client that returns the context's error, not a status
	}
	switch status.Code(err) {
	case codes.Unimplemented:
		return NoModelConfig
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return NotUp
	}
	return NotDescribed
}

// namedBad names the model in a client's ErrBadModelConfig; other errors stay
// as they came.
func namedBad(model string, err error) error {
	if errors.Is(err, ErrBadModelConfig) {
		return fmt.Errorf("model %s: %w", model, err)
	}
	return err
}

// ReadAll reads the configuration of each of models, in order, within ctx.
// A model the server does not describe is left out of the map; a server
// without ModelConfig gives what was read before it said so (nothing, from a
// consistent server) and is not asked further. A backend that is not up is
// the error, for the caller to retry; a configuration that does not decode is
// an error wrapping ErrBadModelConfig.
func ReadAll(ctx context.Context, c Client, models []string) (map[string]*wire.ModelConfig, error) {
	out := map[string]*wire.ModelConfig{}
	for _, name := range models {
		r := Read(ctx, c, name)
		switch r.Outcome {
		case Described:
			out[name] = r.Config
		case NoModelConfig:
			return out, nil
		case NotDescribed:
		case NotUp, Undecodable:
			return nil, r.Err
		}
	}
	return out, nil
}
