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
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/access"
	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/metrics"
	pb "github.com/vig-edge/vig/proto/inference"
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
	// Admit, when set, decides for every inference request whether and when it
	// runs. The freshness scheduler (*Governor) decides inline, on the goroutine
	// the request arrived on; any other Admitter (the benchmark's emulation of
	// Triton's queue policy) is called on a goroutine of its own per request.
	// Without it requests are forwarded at once.
	Admit Admitter
	// Backend runs inference calls: a ring runtime. Nil: the gRPC backend at
	// Config.Backend.Address, which also carries every other RPC.
	Backend Backend
	// Token, when set, is required as "authorization: Bearer <token>" on every
	// RPC but health checks (auth.go); others are answered UNAUTHENTICATED.
	Token *access.Token
}

// Admitter gates inference requests. Admit blocks until the request may run, or
// returns the status to answer it with; on success the caller must call done exactly
// once with the backend's outcome.
type Admitter interface {
	Admit(ctx context.Context, h *wire.InferHeader) (done func(err error), err error)
}

// Gateway forwards the Triton protocol to one backend.
type Gateway struct {
	opts    Options
	log     *slog.Logger
	m       *metrics.Registry
	backend Backend      // chosen once: inference calls go here
	relay   *h2Backend   // the gRPC backend, for everything else; nil for a ring backend
	server  serverModels // the backend's model configuration (servermodels.go)
	gov     *Governor    // inline scheduling, when Admit is the freshness scheduler
	exp     *expiry      // vig's deadline for calls on the backend (expiry.go)
	stalls  stallWatch   // started calls whose request bytes still arrive (cutthrough.go)
	shm     shmRegistry

	window, connWindow uint32
	maxMsg, readBuf    int
	logical            bool // the config has a logical model (logical.go)
	earlyMin           int  // requests forwarded as they arrive (cutthrough.go); 0: none
	handshakeTimeout   time.Duration

	accepted, answered atomic.Uint64 // RPCs; equal once drained
	conns              sync.WaitGroup
	up                 atomic.Bool

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	live     map[*sconn]struct{}
	draining bool
	watchers map[*sstream]string // health Watch streams → service

	stopOnce sync.Once
}

// New builds a gateway and starts connecting to the backend. It does not listen;
// call Serve with each listener.
func New(opts Options) (*Gateway, error) {
	if opts.Config == nil || (opts.Dial == nil && opts.Backend == nil) {
		return nil, errors.New("gateway: Options.Config and Options.Dial are required")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	c := opts.Config.GRPC
	g := &Gateway{opts: opts, log: opts.Log, m: opts.Metrics,
		window: uint32(min(c.WindowMiB<<20, 1<<31-1)), maxMsg: c.MaxMessageMiB << 20, readBuf: max(c.ReadBufferKiB<<10, 16<<10),
		handshakeTimeout: 10 * time.Second,
		lns:              map[net.Listener]struct{}{}, live: map[*sconn]struct{}{}, watchers: map[*sstream]string{}}
	g.connWindow = g.window
	for _, m := range opts.Config.Models {
		g.logical = g.logical || m.Logical()
	}
	g.exp = newExpiry(nowNs, opts.Config.Backend.CallTimeout(), func(c *Call) { g.backend.Abort(c) })
	if gov, ok := opts.Admit.(*Governor); ok {
		g.gov = gov
		gov.gw = g
	}

	_, ring := opts.Config.Backend.RingBackend()
	if ring && opts.Backend == nil {
		return nil, fmt.Errorf("gateway: backend %s is a ring runtime: Options.Backend is required", opts.Config.Backend.Address)
	}
	if !ring {
		g.relay = newH2Backend(opts.Config.Backend.Address, opts.Dial, g.window, g.maxMsg, g.readBuf, nowNs, g.log)
		g.relay.gzip = opts.Config.Backend.Compression == "gzip"
		g.relay.onConnect = func() {
			g.reregisterShm()
			g.readServerModels()
		}
	}
	g.backend = opts.Backend
	g.m.BackendState("CONNECTING")
	switch {
	case g.backend == nil:
		g.backend = g.relay
	case g.relay != nil:
		// Inference goes to Options.Backend, which reports the state; the
		// rest of the protocol to the gRPC backend.
		g.relay.Open(func(bool) {})
	}
	if g.backend == Backend(g.relay) && !g.relay.gzip {
		g.earlyMin = cutThroughMin
	}
	g.backend.Open(g.setBackendUp)
	return g, nil
}

// epoch anchors nowNs: Go's monotonic clock, in nanoseconds since the process
// started. Deadlines and the backend's timeouts are measured on it.
var epoch = time.Now()

func nowNs() int64 { return int64(time.Since(epoch)) }

// clock is the gateway's monotonic clock (nanoseconds).
func (g *Gateway) clock() int64 { return nowNs() }

// setBackendUp is the one place backend reachability is recorded: health, the
// scheduler and the state metric follow it.
func (g *Gateway) setBackendUp(up bool) {
	g.up.Store(up)
	state := "TRANSIENT_FAILURE"
	if up {
		state = "READY"
	}
	g.m.BackendState(state)
	// The scheduler first, health after: a client that starts sending when
	// Watch says SERVING must not find the scheduler still refusing
	// (UNAVAILABLE "backend unavailable") because it has not been told yet.
	if g.gov != nil {
		g.gov.SetBackendAvailable(up)
	}
	g.notifyHealth()
}

// BackendUp reports whether the backend is reachable now.
func (g *Gateway) BackendUp() bool { return g.up.Load() }

// Serve accepts connections on ln until Stop or GracefulStop.
func (g *Gateway) Serve(ln net.Listener) error {
	g.mu.Lock()
	if g.draining {
		g.mu.Unlock()
		ln.Close()
		return nil
	}
	g.lns[ln] = struct{}{}
	g.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			g.mu.Lock()
			draining := g.draining
			delete(g.lns, ln)
			g.mu.Unlock()
			if draining || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		g.conns.Add(1)
		go g.serveConn(nc)
	}
}

// track registers a live client connection; false once the gateway stops.
func (g *Gateway) track(c *sconn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.draining {
		return false
	}
	g.live[c] = struct{}{}
	return true
}

func (g *Gateway) untrack(c *sconn) {
	g.mu.Lock()
	delete(g.live, c)
	g.mu.Unlock()
}

// Accepted and Answered count RPCs, and the REST frontend's requests
// (RequestAccepted); after GracefulStop, and the REST frontend's Shutdown,
// they are equal: nothing accepted was lost.
func (g *Gateway) Accepted() uint64 { return g.accepted.Load() }
func (g *Gateway) Answered() uint64 { return g.answered.Load() }

// Invoke makes one unary call of vig's own on the gRPC backend (statistics,
// shared-memory registration) and returns the answer's bytes.
func (g *Gateway) Invoke(ctx context.Context, method string, req []byte) ([]byte, error) {
	if g.relay == nil {
		return nil, status.Errorf(codes.Unimplemented, "backend %s is a ring runtime: %s has no equivalent there", g.opts.Config.Backend.Address, shortName(method))
	}
	return g.relay.Invoke(ctx, method, req)
}

// GracefulStop stops accepting, waits for every accepted RPC to be answered, then
// closes the connections and the backend.
func (g *Gateway) GracefulStop() {
	g.mu.Lock()
	g.draining = true
	for ln := range g.lns {
		ln.Close()
	}
	live := make([]*sconn, 0, len(g.live))
	for c := range g.live {
		live = append(live, c)
	}
	g.mu.Unlock()
	for _, c := range live {
		c.drain()
	}
	g.mu.Lock()
	watchers := make([]*sstream, 0, len(g.watchers))
	for s := range g.watchers {
		watchers = append(watchers, s)
	}
	g.watchers = map[*sstream]string{}
	g.mu.Unlock()
	for _, s := range watchers { // health watches never end by themselves
		s.fail(status.Error(codes.Unavailable, "vig is draining"))
	}
	g.conns.Wait() // each connection closes once its streams are answered
	g.closeAll()
}

// Stop closes everything at once; RPCs in flight are cancelled.
func (g *Gateway) Stop() {
	g.mu.Lock()
	g.draining = true
	for ln := range g.lns {
		ln.Close()
	}
	g.mu.Unlock()
	g.closeAll()
}

func (g *Gateway) closeAll() {
	g.stopOnce.Do(func() {
		g.mu.Lock()
		for c := range g.live {
			c.nc.Close()
		}
		g.mu.Unlock()
		g.conns.Wait()
		g.backend.Close()
		g.exp.stop()
		g.stalls.stop()
		if g.relay != nil && Backend(g.relay) != g.backend {
			g.relay.Close()
		}
	})
}

func shortName(full string) string {
	if name, ok := strings.CutPrefix(full, "/"+Service+"/"); ok && tritonMethods[name] {
		return name
	}
	if strings.HasPrefix(full, "/grpc.health.v1.Health/") {
		return "Health"
	}
	return "other"
}

// tritonMethods are the RPCs of Triton's service, the only method names that become
// metric labels: a name from the client's :path would let any client add series at
// will, and one that is not UTF-8 made the Prometheus client panic (found by
// FuzzServerConn).
var tritonMethods = func() map[string]bool {
	m := map[string]bool{}
	for _, d := range pb.GRPCInferenceService_ServiceDesc.Methods {
		m[d.MethodName] = true
	}
	for _, d := range pb.GRPCInferenceService_ServiceDesc.Streams {
		m[d.StreamName] = true
	}
	return m
}()

// SystemSharedMemory reports whether the backend takes tensors in Triton system
// shared memory (a gRPC backend does; a ring runtime does not).
func (g *Gateway) SystemSharedMemory() bool { return g.relay != nil }
