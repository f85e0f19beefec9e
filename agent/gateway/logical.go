package gateway

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/wire"

	pb "github.com/vig-edge/vig/proto/inference"
)

// The control RPCs that name a model, for a logical one: the backend serves
// only its variants and answers NOT_FOUND for the logical name, so vig
// answers from the variants' answers. A client checking readiness or reading
// the metadata before it sends then works with the name it sends frames to.
//
//   - ModelReady: ready when one variant is (asked in config order, until one is).
//   - ModelMetadata, ModelConfig: the first listed variant's answer, its name
//     the logical one: the variants are builds of one network, with its tensors.
//   - ModelStatistics: one entry per variant, each the backend's for it
//     (the protocol has no entry that sums models).

const (
	methodModelReady      = "/" + wire.Service + "/ModelReady"
	methodModelMetadata   = "/" + wire.Service + "/ModelMetadata"
	methodModelStatistics = "/" + wire.Service + "/ModelStatistics"
)

// logicalMethod reports whether method is a control RPC vig answers for a
// logical model.
func logicalMethod(method string) bool {
	switch method {
	case methodModelReady, methodModelMetadata, methodModelConfig, methodModelStatistics:
		return true
	}
	return false
}

// logicalVariants returns the variants of the logical model a control
// request of method names, with the request's name; nil when method is not
// one vig answers for a logical model or the name is not a logical model.
func (g *Gateway) logicalVariants(method string, req []byte) (variants []string, name string) {
	if !logicalMethod(method) {
		return nil, ""
	}
	// ModelReady-, ModelMetadata-, ModelConfig- and ModelStatisticsRequest
	// all carry name = 1, version = 2.
	f, err := stringField(req, 1)
	if err != nil || f == "" {
		return nil, ""
	}
	m, ok := g.opts.Config.Models[f]
	if !ok || !m.Logical() {
		return nil, ""
	}
	return m.Variants, f
}

// InvokeModel is Invoke for a frontend's control RPC: one naming a logical
// model (ModelReady, ModelMetadata, ModelConfig, ModelStatistics) is
// answered from its variants'; any other goes to the backend as it is.
func (g *Gateway) InvokeModel(ctx context.Context, method string, req []byte) ([]byte, error) {
	if variants, name := g.logicalVariants(method, req); variants != nil {
		return g.answerLogical(ctx, method, nil, req, name, variants)
	}
	return g.Invoke(ctx, method, req)
}

// answerLogical answers the control request req of method, which names the
// logical model name, from the backend's answers for its variants; meta
// goes with each call (a gRPC client's metadata).
func (g *Gateway) answerLogical(ctx context.Context, method string, meta []string, req []byte, name string, variants []string) ([]byte, error) {
	if g.relay == nil {
		return nil, status.Errorf(codes.Unimplemented, "backend %s is a ring runtime: %s has no equivalent there", g.opts.Config.Backend.Address, shortName(method))
	}
	ask := func(variant string) ([]byte, error) {
		r, err := setName(req, variant)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s: %v", shortName(method), err)
		}
		return g.relay.invoke(ctx, method, meta, r)
	}
	switch method {
	case methodModelReady:
		var firstErr error
		answered := false
		for _, v := range variants {
			b, err := ask(v)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			var r pb.ModelReadyResponse
			if err := proto.Unmarshal(b, &r); err != nil {
				return nil, status.Errorf(codes.Internal, "backend ModelReady for %q: %v", v, err)
			}
			if r.Ready {
				return b, nil
			}
			answered = true
		}
		if !answered { // no variant's readiness is known: why is the backend's
			return nil, firstErr
		}
		return proto.Marshal(&pb.ModelReadyResponse{Ready: false})
	case methodModelMetadata:
		b, err := ask(variants[0])
		if err != nil {
			return nil, err
		}
		out, err := setName(b, name)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "backend ModelMetadata for %q: %v", variants[0], err)
		}
		return out, nil
	case methodModelConfig:
		b, err := ask(variants[0])
		if err != nil {
			return nil, err
		}
		// ModelConfigResponse{config = 1}, ModelConfig{name = 1}.
		cfg, err := bytesField(b, 1)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "backend ModelConfig for %q: %v", variants[0], err)
		}
		if cfg, err = setName(cfg, name); err != nil {
			return nil, status.Errorf(codes.Internal, "backend ModelConfig for %q: %v", variants[0], err)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), cfg), nil
	default: // ModelStatistics
		// ModelStatisticsResponse{repeated model_stats = 1}: the variants'
		// answers, concatenated, are one answer listing each entry.
		var out []byte
		for _, v := range variants {
			b, err := ask(v)
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
		}
		return out, nil
	}
}

// logicalRelay is the backend end of a gRPC control RPC vig answers for a
// logical model: its request is the one message the stream carried, and the
// client leaving cancels the calls to the backend.
type logicalRelay struct{ stop context.CancelFunc }

func (r logicalRelay) forward(body mem.BufferSlice, _ bool) { body.Free() }
func (r logicalRelay) closeSend()                           {}
func (r logicalRelay) cancel()                              { r.stop() }

// relayLogical answers s, a control RPC naming the logical model name (req,
// its message), on a goroutine of its own: it makes one backend call per
// variant it needs.
func (c *sconn) relayLogical(s *sstream, req []byte, name string, variants []string) {
	g := c.g
	var ctx context.Context
	var stop context.CancelFunc
	if s.deadline != 0 {
		ctx, stop = context.WithTimeout(context.Background(), time.Duration(s.deadline-int64(g.clock())))
	} else {
		ctx, stop = context.WithCancel(context.Background())
	}
	s.mu.Lock()
	s.relay = logicalRelay{stop}
	s.mu.Unlock()
	go func() {
		defer stop()
		resp, err := g.answerLogical(ctx, s.method, s.meta, req, name, variants)
		s.mu.Lock()
		s.relay = nil
		if err != nil {
			s.answer(err, nil)
		} else {
			s.Head(nil)
			s.send(mem.BufferSlice{mem.SliceBuffer(resp)}, false)
			s.Finish(nil)
		}
		s.mu.Unlock()
		s.Flush()
	}()
}

// maxLogicalRequest bounds the control requests vig reads for a logical
// model, compressed and not: they carry a name and a version. A larger one is
// relayed as it is, so a padded or compressed request cannot make vig hold
// or inflate more than this per stream.
const maxLogicalRequest = 64 << 10

// logicalRequest returns the bytes of a control request message (msg, still
// the caller's), decompressed if it came gzip-compressed; false for an
// encoding vig does not read, which is relayed as it is.
func (c *sconn) logicalRequest(s *sstream, msg mem.BufferSlice, compressed bool) ([]byte, bool) {
	if !compressed {
		return msg.Materialize(), true
	}
	if s.enc[0] != "gzip" {
		return nil, false
	}
	msg.Ref() // gunzipMessage frees one reference; the caller keeps its own
	plain, err := gunzipMessage(msg, maxLogicalRequest)
	if err != nil {
		return nil, false // relayed: the backend says what is wrong with it
	}
	defer plain.Free()
	return plain.Materialize(), true
}

// stringField returns the last value of the string field num of msg.
func stringField(msg []byte, num protowire.Number) (string, error) {
	b, err := bytesField(msg, num)
	return string(b), err
}

// bytesField returns the last value of the length-delimited field num of msg.
func bytesField(msg []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	for len(msg) > 0 {
		n, typ, k := protowire.ConsumeTag(msg)
		if k < 0 {
			return nil, protowire.ParseError(k)
		}
		msg = msg[k:]
		if n == num && typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(msg)
			if k < 0 {
				return nil, protowire.ParseError(k)
			}
			out, msg = v, msg[k:]
			continue
		}
		k = protowire.ConsumeFieldValue(n, typ, msg)
		if k < 0 {
			return nil, protowire.ParseError(k)
		}
		msg = msg[k:]
	}
	return out, nil
}

// setName returns msg with its string field 1 (name, in every message it is
// used on here) set to name; the other fields are kept as they are.
func setName(msg []byte, name string) ([]byte, error) {
	out := protowire.AppendString(protowire.AppendTag(make([]byte, 0, len(msg)+len(name)+8), 1, protowire.BytesType), name)
	for len(msg) > 0 {
		n, typ, k := protowire.ConsumeTag(msg)
		if k < 0 {
			return nil, protowire.ParseError(k)
		}
		v := protowire.ConsumeFieldValue(n, typ, msg[k:])
		if v < 0 {
			return nil, protowire.ParseError(v)
		}
		if n != 1 {
			out = append(out, msg[:k+v]...)
		}
		msg = msg[k+v:]
	}
	return out, nil
}
