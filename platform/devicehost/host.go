// Package devicehost gives vig doctor access to the machine it runs on: the root
// file system, the environment, tools, and the live probes of platform/shmprobe,
// netopt and cilium/ebpf. agent/doctor itself makes no system calls; it sees the
// device only through the doctor.Host this package fills (and tests fill with
// fixtures).
package devicehost

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/doctor"
	"github.com/vig-edge/vig/android"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/shmprobe"
	"github.com/vig-edge/vig/proto/inference"
)

// New returns the Host of the machine vig runs on.
func New() *doctor.Host {
	return &doctor.Host{
		Root:        os.DirFS("/"),
		Getenv:      os.Getenv,
		Exec:        android.Exec,
		EUID:        os.Geteuid(),
		DevShm:      shmprobe.DevShmWritable,
		Memfd:       shmprobe.Memfd,
		NoDelay:     probeNoDelay,
		DialBackend: dialBackend,
		Since:       time.Since,
		BPF:         probeBPF,
		Route:       netopt.RouteTo,
	}
}

// probeBPF asks the kernel to load a minimal tracepoint program (cilium/ebpf's
// feature probe, run once per process).
func probeBPF() error {
	err := features.HaveProgramType(ebpf.TracePoint)
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w: %v", errors.ErrUnsupported, err)
	}
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: %v", fs.ErrPermission, err)
	}
	return err
}

// probeNoDelay opens a loopback connection through netopt and reads TCP_NODELAY
// back on both ends: the guarantee vig's sockets rely on, checked on a real socket.
func probeNoDelay(ctx context.Context) error {
	var st netopt.Stats
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", &st)
	if err != nil {
		return fmt.Errorf("loopback listener: %w", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() { // owns the accepted connection until it is handed over
		c, err := ln.Accept()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- c
	}()
	c, err := netopt.Dial(ctx, "tcp", ln.Addr().String(), &st)
	if err != nil {
		return fmt.Errorf("dial through netopt: %w", err)
	}
	defer c.Close()
	var server net.Conn
	select {
	case server = <-accepted:
		defer server.Close()
	case err := <-acceptErr:
		return fmt.Errorf("accept through netopt: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
	for side, conn := range map[string]net.Conn{"dialed": c, "accepted": server} {
		tc, ok := conn.(*net.TCPConn)
		if !ok {
			return fmt.Errorf("%s connection is %T, not TCP", side, conn)
		}
		on, err := netopt.NoDelay(tc)
		if err != nil {
			return fmt.Errorf("%s connection: reading TCP_NODELAY: %w", side, err)
		}
		if !on {
			return fmt.Errorf("%s connection: %w", side, netopt.ErrNoDelay)
		}
	}
	if st.NoDelayVerified.Load() != 2 || st.NoDelayFailed.Load() != 0 {
		return fmt.Errorf("netopt verified %d and refused %d connections, want 2 and 0", st.NoDelayVerified.Load(), st.NoDelayFailed.Load())
	}
	return nil
}

// dialBackend opens a gRPC client to a Triton-protocol backend over netopt's dialer
// (so the backend leg gets TCP_NODELAY like every other socket of vig).
func dialBackend(ctx context.Context, address string) (inference.GRPCInferenceServiceClient, func(), error) {
	var st netopt.Stats
	cc, err := grpc.NewClient("passthrough:///"+address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(st.DialAddr))
	if err != nil {
		return nil, nil, err
	}
	return inference.NewGRPCInferenceServiceClient(cc), func() { cc.Close() }, nil
}
