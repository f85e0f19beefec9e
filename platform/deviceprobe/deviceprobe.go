// Package deviceprobe holds the live probes vig doctor runs against the machine
// it is on: whether the kernel loads eBPF programs, whether TCP_NODELAY holds on a
// real loopback pair opened through netopt, and a gRPC connection to the backend
// over netopt's dialer. Each returns a plain error (or a client) and knows
// nothing of doctor: cmd/vig assembles doctor's Host from these and from
// platform/shmprobe, so that platform/ depends on nothing of agent/.
package deviceprobe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/proto/inference"
)

// BPF asks the kernel to load a minimal tracepoint program (cilium/ebpf's feature
// probe, run once per process). It wraps errors.ErrUnsupported when the kernel
// (or an emulator in between) has no eBPF, fs.ErrPermission when vig may not
// load programs.
func BPF() error {
	err := features.HaveProgramType(ebpf.TracePoint)
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w: %v", errors.ErrUnsupported, err)
	}
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: %v", fs.ErrPermission, err)
	}
	return err
}

// NoDelay opens a loopback connection through netopt and reads TCP_NODELAY back
// on both ends: the guarantee vig's sockets rely on, checked on a real socket.
func NoDelay(ctx context.Context) error {
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

// DialBackend opens a gRPC client to a Triton-protocol backend at address
// ("host:port" or "unix:PATH") over netopt's dialer (so the backend leg gets TCP_NODELAY like
// every other socket of vig); the returned function releases it. The connection
// is made by the first call.
func DialBackend(ctx context.Context, address string) (inference.GRPCInferenceServiceClient, func(), error) {
	var st netopt.Stats
	cc, err := grpc.NewClient("passthrough:///"+address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(st.DialAddr))
	if err != nil {
		return nil, nil, err
	}
	return inference.NewGRPCInferenceServiceClient(cc), func() { cc.Close() }, nil
}
