package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/wire"
)

// Service is the fully qualified name of the Triton inference service.
const Service = wire.Service

const (
	methodInfer         = wire.MethodInfer
	methodStreamInfer   = wire.MethodStreamInfer
	methodShmRegister   = wire.MethodShmRegister
	methodShmUnregister = wire.MethodShmUnregister
)

// Options configures a Gateway.
type Options struct {
	Config *config.Config
	// Dial opens connections to the backend; normally (*netopt.Stats).DialAddr.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Metrics receives the gateway's counters; nil creates a private registry.
	Metrics *metrics.Registry
	Log     *slog.Logger
	// Admit, when set, decides for every inference request whether and when it runs
	// (the freshness scheduler). Without it requests are forwarded at once.
	Admit Admitter
	// Backend, when set, runs inference calls (ModelInfer, each request of
	// ModelStreamInfer, ring frontend calls): a ring runtime. The gateway opens it,
	// follows its state through the Open callback, and closes it on Stop. nil:
	// the gRPC backend connection.
	Backend Backend
}

// Admitter gates inference requests. Admit blocks until the request may run, or
// returns the status to answer it with; on success the caller must call done exactly
// once with the backend's outcome.
type Admitter interface {
	Admit(ctx context.Context, h *wire.InferHeader) (done func(err error), err error)
}

// backendAware is implemented by an Admitter that wants to know whether the backend
// is reachable (the Governor answers waiting requests UNAVAILABLE when it is not).
type backendAware interface{ SetBackendAvailable(up bool) }

// Gateway forwards the Triton protocol to one backend.
type Gateway struct {
	opts    Options
	log     *slog.Logger
	m       *metrics.Registry
	backend *grpc.ClientConn
	server  *grpc.Server
	health  *health.Server
	codec   encoding.CodecV2

	headers sync.Pool // *wire.InferHeader
	shm     shmRegistry

	accepted, answered atomic.Uint64 // RPCs; equal once drained
	backendUp          atomic.Bool   // ring backends only (SetBackendUp)

	stop     context.CancelFunc
	watchers sync.WaitGroup
}

// New builds a gateway and starts connecting to the backend. It does not listen;
// call Serve with each listener.
func New(opts Options) (*Gateway, error) {
	if opts.Config == nil || opts.Dial == nil {
		return nil, errors.New("gateway: Options.Config and Options.Dial are required")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	g := &Gateway{opts: opts, log: opts.Log, m: opts.Metrics, codec: wire.RawCodec()}
	g.headers.New = func() any { return new(wire.InferHeader) }

	_, ring := opts.Config.Backend.RingBackend()
	if ring && opts.Backend == nil {
		return nil, fmt.Errorf("gateway: backend %s is a ring runtime: Options.Backend is required", opts.Config.Backend.Address)
	}
	if !ring {
		dopts := append(DialOptions(opts.Config.GRPC),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(opts.Dial),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(g.codec)),
		)
		cc, err := grpc.NewClient(backendTarget(opts.Config.Backend.Address), dopts...)
		if err != nil {
			return nil, fmt.Errorf("gateway: backend %s: %w", opts.Config.Backend.Address, err)
		}
		g.backend = cc
	}

	g.health = health.NewServer()
	g.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	g.health.SetServingStatus(Service, healthpb.HealthCheckResponse_NOT_SERVING)
	sopts := append(ServerOptions(opts.Config.GRPC),
		grpc.ForceServerCodecV2(g.codec),
		grpc.UnknownServiceHandler(g.handle),
	)
	g.server = grpc.NewServer(sopts...)
	healthpb.RegisterHealthServer(g.server, g.health)

	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	if g.backend != nil {
		g.watchers.Add(1)
		go g.watchBackend(ctx)
		g.backend.Connect()
	} else {
		g.m.BackendState("CONNECTING")
	}
	if opts.Backend != nil {
		opts.Backend.Open(g.SetBackendUp)
	}
	return g, nil
}

// SetBackendUp reports the state of a backend the gateway does not connect to itself
// (a ring runtime): it drives the health status, the scheduler and the state metric.
func (g *Gateway) SetBackendUp(up bool) {
	g.backendUp.Store(up)
	serving, state := healthpb.HealthCheckResponse_NOT_SERVING, "TRANSIENT_FAILURE"
	if up {
		serving, state = healthpb.HealthCheckResponse_SERVING, "READY"
	}
	g.m.BackendState(state)
	g.health.SetServingStatus("", serving)
	g.health.SetServingStatus(Service, serving)
	if b, ok := g.opts.Admit.(backendAware); ok {
		b.SetBackendAvailable(up)
	}
}

// backendTarget turns vig's address notation into a gRPC target that reaches the
// context dialer unchanged ("passthrough" skips name resolution: the dialer resolves).
func backendTarget(addr string) string { return "passthrough:///" + addr }

// Serve accepts connections on ln until Stop or GracefulStop.
func (g *Gateway) Serve(ln net.Listener) error { return g.server.Serve(ln) }

// Accepted and Answered count RPCs; after GracefulStop they are equal: nothing
// accepted was lost.
func (g *Gateway) Accepted() uint64 { return g.accepted.Load() }
func (g *Gateway) Answered() uint64 { return g.answered.Load() }

// Backend is the client connection to the backend (shared with the statistics
// poller and the ring frontend); nil for a ring backend.
func (g *Gateway) Backend() *grpc.ClientConn { return g.backend }

// GracefulStop stops accepting, waits for every accepted RPC to be answered, then
// closes the backend connection.
func (g *Gateway) GracefulStop() {
	g.server.GracefulStop()
	g.close()
}

// Stop closes everything at once; RPCs in flight fail.
func (g *Gateway) Stop() {
	g.server.Stop()
	g.close()
}

func (g *Gateway) close() {
	g.stop()
	if g.backend != nil {
		g.backend.Close()
	}
	if g.opts.Backend != nil {
		g.opts.Backend.Close()
	}
	g.watchers.Wait()
}

// watchBackend follows the backend connection's state: it drives the health status
// and the state metric, and logs transitions. It blocks on state changes; it never
// polls.
func (g *Gateway) watchBackend(ctx context.Context) {
	defer g.watchers.Done()
	state := g.backend.GetState()
	for {
		g.m.BackendState(state.String())
		serving := healthpb.HealthCheckResponse_NOT_SERVING
		if state == connectivity.Ready {
			serving = healthpb.HealthCheckResponse_SERVING
		}
		g.health.SetServingStatus("", serving)
		g.health.SetServingStatus(Service, serving)
		if b, ok := g.opts.Admit.(backendAware); ok {
			switch state {
			case connectivity.Ready:
				b.SetBackendAvailable(true)
			case connectivity.TransientFailure:
				b.SetBackendAvailable(false)
			}
		}
		if state == connectivity.Idle {
			g.backend.Connect()
		}
		if !g.backend.WaitForStateChange(ctx, state) {
			return
		}
		next := g.backend.GetState()
		switch {
		case next == connectivity.Ready:
			g.log.Info("backend connected", "address", g.opts.Config.Backend.Address)
		case state == connectivity.Ready:
			g.log.Warn("backend connection lost", "address", g.opts.Config.Backend.Address, "state", next.String())
		}
		state = next
	}
}

// handle receives every RPC.
func (g *Gateway) handle(_ any, ss grpc.ServerStream) error {
	full, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "gateway: no method on stream")
	}
	g.accepted.Add(1)
	defer g.answered.Add(1)
	m := g.m.Method(shortName(full))
	m.Start()
	var err error
	switch {
	case full == methodInfer:
		err = g.infer(ss, m)
	case full == methodStreamInfer:
		err = g.streamInfer(ss, m)
	case g.backend == nil:
		err = g.answerLocally(ss, full, m)
	case full == methodShmRegister:
		err = g.shmRegister(ss, m)
	case full == methodShmUnregister:
		err = g.shmUnregister(ss, m)
	case unary[full]:
		err = g.forwardUnary(ss, full, m)
	default:
		err = g.forwardStream(ss, full, m)
	}
	m.Done(status.Code(err))
	return err
}

func shortName(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 && strings.HasPrefix(full[1:], Service+"/") {
		return full[i+1:]
	}
	return "other"
}

// unary lists the service's unary methods; anything else is forwarded as a stream.
var unary = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range []string{"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
		"ModelInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex", "RepositoryModelLoad",
		"RepositoryModelUnload", "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
		"SystemSharedMemoryUnregister", "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
		"CudaSharedMemoryUnregister", "TraceSetting", "LogSettings"} {
		m["/"+Service+"/"+n] = true
	}
	return m
}()

// outgoing copies the client's metadata to the backend call, minus the headers the
// transport owns. The deadline travels with ctx.
func outgoing(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	if len(in) == 0 {
		return ctx
	}
	out := make(metadata.MD, len(in))
	for k, v := range in {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "user-agent" || k == "te" {
			continue
		}
		out[k] = v
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// forwardUnary passes a unary RPC through as bytes.
func (g *Gateway) forwardUnary(ss grpc.ServerStream, method string, m *metrics.Method) error {
	var req, resp wire.Frame
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	m.Received(req.Len())
	return g.invoke(ss, method, &req, &resp, m)
}

// invoke calls the backend with req (consumed) and sends its answer on ss.
func (g *Gateway) invoke(ss grpc.ServerStream, method string, req, resp *wire.Frame, m *metrics.Method) error {
	var header, trailer metadata.MD
	err := g.backend.Invoke(outgoing(ss.Context()), method, req, resp, grpc.Header(&header), grpc.Trailer(&trailer))
	req.Free() // no-op when gRPC consumed it
	if len(trailer) > 0 {
		ss.SetTrailer(trailer)
	}
	if len(header) > 0 {
		if err := ss.SetHeader(header); err != nil {
			resp.Free()
			return err
		}
	}
	if err != nil {
		resp.Free()
		return backendError(err)
	}
	n := resp.Len()
	if err := ss.SendMsg(resp); err != nil {
		resp.Free()
		return err
	}
	m.Sent(n)
	return nil
}

// backendError keeps the backend's status; transport failures that carry no status
// are reported as UNAVAILABLE.
func backendError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Errorf(codes.Unavailable, "backend: %v", err)
}

// forwardStream passes a streaming RPC (or a method vig does not know) through,
// message by message in both directions.
func (g *Gateway) forwardStream(ss grpc.ServerStream, method string, m *metrics.Method) error {
	ctx, cancel := context.WithCancel(outgoing(ss.Context()))
	defer cancel()
	cs, err := g.backend.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		return backendError(err)
	}
	// Client → backend on a second goroutine; backend → client here.
	upErr := make(chan error, 1)
	go func() {
		for {
			var f wire.Frame
			if err := ss.RecvMsg(&f); err != nil {
				if errors.Is(err, errEOF) {
					err = cs.CloseSend()
				} else {
					cancel()
				}
				upErr <- err
				return
			}
			m.Received(f.Len())
			if err := cs.SendMsg(&f); err != nil {
				f.Free()
				upErr <- nil // the backend's status arrives on RecvMsg
				return
			}
		}
	}()
	if md, err := cs.Header(); err == nil && len(md) > 0 {
		ss.SendHeader(md)
	}
	for {
		var f wire.Frame
		err := cs.RecvMsg(&f)
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, errEOF) {
				if uerr := <-upErr; uerr != nil {
					return uerr
				}
				return nil
			}
			cancel()
			<-upErr
			return backendError(err)
		}
		n := f.Len()
		if err := ss.SendMsg(&f); err != nil {
			f.Free()
			cancel()
			<-upErr
			return err
		}
		m.Sent(n)
	}
}
