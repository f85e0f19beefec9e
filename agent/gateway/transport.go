package gateway

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"

	"github.com/vig-edge/vig/agent/config"
)

// Transport sizing for camera frames. With grpc-go's defaults a 6.2 MB message is
// refused (4 MiB receive limit) or crawls through 64 KiB flow-control windows that
// grow only by BDP probes; windows of a whole frame or more let it cross in one go.
// Setting the windows explicitly turns BDP estimation off, which is what we want on
// loopback: the window is a memory budget, not a bandwidth guess.

// ServerOptions sizes a gRPC server (vig's frontend or the mock backend).
func ServerOptions(c config.GRPC) []grpc.ServerOption {
	maxMsg := c.MaxMessageMiB << 20
	win := int32(c.WindowMiB << 20)
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		grpc.InitialWindowSize(win),
		grpc.InitialConnWindowSize(win),
		grpc.ReadBufferSize(c.ReadBufferKiB << 10),
		grpc.WriteBufferSize(c.WriteBufferKiB << 10),
		// Idle connections give their write buffer back (10 idle sensors must not
		// pin 10 MiB).
		grpc.SharedWriteBuffer(true),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
}

// DialOptions sizes a gRPC client connection (vig's leg to the backend, or a client
// of vig). dial is the connection function, normally (*netopt.Stats).DialAddr.
func DialOptions(c config.GRPC) []grpc.DialOption {
	maxMsg := c.MaxMessageMiB << 20
	win := int32(c.WindowMiB << 20)
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)),
		grpc.WithInitialWindowSize(win),
		grpc.WithInitialConnWindowSize(win),
		grpc.WithReadBufferSize(c.ReadBufferKiB << 10),
		grpc.WithWriteBufferSize(c.WriteBufferKiB << 10),
		grpc.WithSharedWriteBuffer(true),
		// A backend that restarts is found again quickly; one that is down fails
		// requests fast (UNAVAILABLE) instead of hanging them.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: time.Second,
		}),
	}
}
