package mockbackend

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/vig-edge/vig/netopt"
)

// Running is a mock backend serving on a socket.
type Running struct {
	*Server
	grpc *grpc.Server
	addr string
	done chan struct{} // closed when Serve returns
	err  error         // Serve's error, readable after done

	stopOnce sync.Once
}

// gracePeriod is how long Stop lets calls in flight finish before it closes their
// connections (a client's open ModelStreamInfer would otherwise hold it forever).
const gracePeriod = 2 * time.Second

// Start serves a new mock backend on addr ("host:port", "unix:PATH"; port 0 picks a
// free one) with the given gRPC server options (normally gateway.ServerOptions, sized
// for camera frames). Sockets are opened through netopt, so every accepted TCP
// connection has TCP_NODELAY verified and is counted in st (which may be nil). The
// server stops when ctx ends or Stop is called.
func Start(ctx context.Context, addr string, cfg Config, opts []grpc.ServerOption, st *netopt.Stats) (*Running, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := netopt.ListenAddr(addr, st)
	if err != nil {
		s.Close()
		return nil, err
	}
	g := grpc.NewServer(opts...)
	s.Register(g)
	r := &Running{Server: s, grpc: g, addr: listenAddr(ln), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = g.Serve(ln)
	}()
	go func() {
		select {
		case <-ctx.Done():
			r.Stop()
		case <-r.done:
		}
	}()
	return r, nil
}

func listenAddr(ln net.Listener) string {
	if a, ok := ln.Addr().(*net.UnixAddr); ok {
		return "unix:" + a.Name
	}
	return ln.Addr().String()
}

// Addr is the address the backend serves on, in vig's notation ("host:port" with the
// actual port, or "unix:PATH").
func (r *Running) Addr() string { return r.addr }

// Done is closed when the server has stopped serving.
func (r *Running) Done() <-chan struct{} { return r.done }

// Stop stops accepting, lets calls in flight finish for up to two seconds, closes
// the remaining connections and unmaps every shared-memory region. It returns the
// error that ended serving, if it was not Stop itself.
func (r *Running) Stop() error {
	r.stopOnce.Do(func() {
		r.Server.health.Shutdown() // clients polling health see NOT_SERVING while draining
		t := time.AfterFunc(gracePeriod, r.grpc.Stop)
		r.grpc.GracefulStop()
		t.Stop()
		<-r.done
		r.Server.Close()
	})
	<-r.done
	return r.err
}
