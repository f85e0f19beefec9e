package gateway

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/metrics"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// answerLocally serves the RPCs a ring backend cannot: a runtime behind a
// shared-memory ring has no Triton control plane, so vig answers liveness and
// readiness from the ring's state and says plainly that the rest does not exist.
func (g *Gateway) answerLocally(ss grpc.ServerStream, method string, m *metrics.Method) error {
	var req wire.Frame
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	m.Received(req.Len())
	b := req.Bytes()
	req.Free()
	var resp proto.Message
	up := g.backendUp.Load()
	switch method {
	case "/" + Service + "/ServerLive":
		resp = &pb.ServerLiveResponse{Live: true}
	case "/" + Service + "/ServerReady":
		resp = &pb.ServerReadyResponse{Ready: up}
	case "/" + Service + "/ModelReady":
		var r pb.ModelReadyRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			return status.Errorf(codes.InvalidArgument, "ModelReady: %v", err)
		}
		_, known := g.opts.Config.Models[r.Name]
		resp = &pb.ModelReadyResponse{Ready: up && known}
	default:
		return status.Errorf(codes.Unimplemented, "backend %s is a shared-memory ring runtime: vig forwards inference (ModelInfer, ModelStreamInfer) and answers ServerLive, ServerReady and ModelReady; %s has no equivalent there",
			g.opts.Config.Backend.Address, shortName(method))
	}
	if err := ss.SendMsg(resp); err != nil {
		return err
	}
	m.Sent(proto.Size(resp))
	return nil
}
