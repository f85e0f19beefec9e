package gateway

import (
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/wire"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/vig-edge/vig/proto/inference"
)

// What vig does with each kind of RPC once its transport has delivered it.

// prepare reads a ModelInfer request into call: its header parsed once, its
// shared-memory references checked against the registry, vig's own parameters
// removed. msg is owned by call from here on (freed with it on error). It returns
// errShmUnknown when a region must first be looked up on the backend: then the
// caller runs finishPrepare with synced set once it has (shmSync).
func (g *Gateway) prepare(call *Call, msg mem.BufferSlice, uid uint32, hasUID bool) error {
	call.Msg = msg
	if err := call.Header.ParseInfer(msg); err != nil {
		return status.Errorf(codes.InvalidArgument, "ModelInfer: %v", err)
	}
	return g.finishPrepare(call, uid, hasUID, false)
}

func (g *Gateway) finishPrepare(call *Call, uid uint32, hasUID, synced bool) error {
	h := &call.Header
	if h.Shm {
		if err := g.checkShm(h, uid, hasUID, synced); err != nil {
			return err
		}
	}
	if h.HasVigParams() {
		// The header's views stay valid: they point into buffers the stripped
		// message still references.
		stripped := h.StripVig(call.Msg)
		call.Msg.Free()
		call.Msg = stripped
	}
	return nil
}

// A client stream is a relayed RPC's client (relayClient): the backend leg hands
// it the backend's answer.

// relayHeaders forwards a relayed RPC's response headers to its client.
func (s *sstream) relayHeaders(fields []hpack.HeaderField) {
	meta := appendMeta(nil, fields)
	for _, f := range fields {
		if f.Name == "grpc-encoding" || f.Name == "grpc-accept-encoding" {
			meta = append(meta, f.Name, f.Value) // the relayed messages' compressed flag needs it
		}
	}
	if !s.Head(metaFields(meta)) { // answered (INTERNAL, or before): the backend's stream is not needed
		s.mu.Lock()
		bs := s.relay
		s.relay = nil
		s.mu.Unlock()
		if bs != nil {
			bs.cancel()
		}
	}
	s.Flush()
}

// relayMessage forwards one response message of a relayed RPC (body owned).
func (s *sstream) relayMessage(body mem.BufferSlice, compressed bool) {
	s.send(body, compressed)
	s.Flush()
}

// relayEnd ends a relayed RPC with the backend's status and trailers.
func (s *sstream) relayEnd(trail []hpack.HeaderField, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.relay = nil
	meta := appendMeta(nil, trail)
	if err != nil {
		s.answer(err, meta)
	} else {
		if s.onOK != nil && !s.Done() {
			s.onOK()
		}
		s.Head(nil)
		s.Finish(metaFields(meta))
	}
	s.Flush()
}

// local answers the RPCs vig serves itself: health, and for a ring backend
// (which has no Triton control plane) liveness and readiness from the ring's
// state; the rest does not exist there, and vig says so.
func (c *sconn) local(s *sstream, msg mem.BufferSlice) {
	b := msg.Materialize()
	msg.Free()
	g := c.g
	var resp proto.Message
	up := g.up.Load()
	switch s.method {
	case "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch":
		var r healthpb.HealthCheckRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			s.fail(status.Errorf(codes.InvalidArgument, "health: %v", err))
			return
		}
		st, known := g.health(r.Service)
		if s.method == "/grpc.health.v1.Health/Watch" {
			if !known {
				st = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
			}
			g.watch(s, r.Service, st)
			return
		}
		if !known {
			s.fail(status.Errorf(codes.NotFound, "unknown service %q", r.Service))
			return
		}
		resp = &healthpb.HealthCheckResponse{Status: st}
	case "/" + Service + "/ServerLive":
		resp = &pb.ServerLiveResponse{Live: true}
	case "/" + Service + "/ServerReady":
		resp = &pb.ServerReadyResponse{Ready: up}
	case "/" + Service + "/ModelReady":
		var r pb.ModelReadyRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			s.fail(status.Errorf(codes.InvalidArgument, "ModelReady: %v", err))
			return
		}
		_, known := g.opts.Config.Models[r.Name]
		resp = &pb.ModelReadyResponse{Ready: up && known}
	default:
		s.fail(status.Errorf(codes.Unimplemented, "backend %s is a shared-memory ring runtime: vig forwards inference (ModelInfer, ModelStreamInfer) and answers ServerLive, ServerReady and ModelReady; %s has no equivalent there",
			g.opts.Config.Backend.Address, shortName(s.method)))
		return
	}
	out, err := proto.Marshal(resp)
	if err != nil {
		s.fail(status.Errorf(codes.Internal, "%v", err))
		return
	}
	s.send(mem.BufferSlice{mem.SliceBuffer(out)}, false)
	s.Finish(nil)
	s.Flush()
}

// health is the serving status of a service: SERVING while the backend is
// reachable.
func (g *Gateway) health(service string) (healthpb.HealthCheckResponse_ServingStatus, bool) {
	if service != "" && service != Service {
		return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, false
	}
	if g.up.Load() {
		return healthpb.HealthCheckResponse_SERVING, true
	}
	return healthpb.HealthCheckResponse_NOT_SERVING, true
}

// watch keeps a health Watch stream open and sends it st now and on every change.
func (g *Gateway) watch(s *sstream, service string, st healthpb.HealthCheckResponse_ServingStatus) {
	g.mu.Lock()
	g.watchers[s] = service
	g.mu.Unlock()
	s.c.sendHealth(s, st)
}

func (c *sconn) sendHealth(s *sstream, st healthpb.HealthCheckResponse_ServingStatus) {
	out, _ := proto.Marshal(&healthpb.HealthCheckResponse{Status: st})
	s.send(mem.BufferSlice{mem.SliceBuffer(out)}, false)
	s.Flush()
}

// notifyHealth pushes the current status to every Watch stream.
func (g *Gateway) notifyHealth() {
	g.mu.Lock()
	type w struct {
		s       *sstream
		service string
	}
	list := make([]w, 0, len(g.watchers))
	for s, svc := range g.watchers {
		if s.Done() {
			delete(g.watchers, s)
			continue
		}
		list = append(list, w{s, svc})
	}
	g.mu.Unlock()
	for _, x := range list {
		st, known := g.health(x.service)
		if known {
			x.s.c.sendHealth(x.s, st)
		}
	}
}

// streamError encodes ModelStreamInferResponse{error_message, infer_response{id}}:
// a stream cannot carry a status per request, so Triton reports errors in-band.
func streamError(id []byte, err error) mem.BufferSlice {
	msg := status.Convert(err).Message()
	if c := status.Code(err); c != codes.Unknown {
		msg = c.String() + ": " + msg
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, msg)
	if len(id) > 0 {
		inner := protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), string(id))
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, inner)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

var _ = wire.Service
