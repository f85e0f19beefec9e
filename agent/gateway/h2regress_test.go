package gateway_test

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/gateway"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// A malformed grpc-timeout header is answered INTERNAL on its stream, and the
// connection and vig go on serving. (FuzzServerConn found that it crashed vig:
// the stream was answered before its method's counters were resolved.)
func TestH2MalformedTimeout(t *testing.T) {
	e, _ := withProbe(t, "")
	h := dialH2(t, e.tcp)
	for i, v := range []string{"bogus", "", "1", "99999999999S", "-1S"} {
		r, err := h.call(uint32(2*i+1), "/"+gateway.Service+"/ServerLive", nil, "grpc-timeout", v)
		if err != nil {
			t.Fatalf("grpc-timeout %q: %v", v, err)
		}
		if got := field(r.trailers, "grpc-status"); got != "13" {
			t.Errorf("grpc-timeout %q: grpc-status %q, want 13 (INTERNAL)", v, got)
		}
	}
	r, err := h.call(21, "/"+gateway.Service+"/ServerLive", nil, "grpc-timeout", "5S")
	if err != nil || field(r.trailers, "grpc-status") != "0" {
		t.Fatalf("after malformed timeouts: %v, trailers %v", err, r.trailers)
	}
}

// Response headers and trailers above the client's SETTINGS_MAX_HEADER_LIST_SIZE
// are not sent (RFC 9113 §6.5.2: the client advertised what it accepts). vig used
// to send them anyway, and grpc-go's client tore the whole connection down
// (COMPRESSION_ERROR: every call on it failed UNAVAILABLE). Now the call is
// answered INTERNAL naming the setting, and the connection goes on serving.
func TestH2ResponseHeadersHonourClientLimit(t *testing.T) {
	echo := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		var f wire.Frame
		if err := ss.RecvMsg(&f); err != nil {
			return err
		}
		f.Free()
		if v := md.Get("x-hdr-size"); len(v) == 1 {
			n, _ := strconv.Atoi(v[0])
			ss.SetHeader(metadata.Pairs("x-big", strings.Repeat("h", n)))
		}
		if v := md.Get("x-trl-size"); len(v) == 1 {
			n, _ := strconv.Atoi(v[0])
			ss.SetTrailer(metadata.Pairs("x-big", strings.Repeat("t", n)))
		}
		return ss.SendMsg(&pb.ModelConfigResponse{})
	}), grpc.ForceServerCodecV2(wire.RawCodec()))
	e := startEnvBehind(t, echo)
	cc, err := grpc.NewClient("passthrough:///"+e.tcp, append(gateway.DialOptions(e.cfg.GRPC),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithMaxHeaderListSize(1000))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // liveness, not speed
	defer cancel()
	for _, tc := range []struct{ key, what string }{{"x-hdr-size", "response headers"}, {"x-trl-size", "response trailers"}} {
		_, err := c.ModelConfig(metadata.AppendToOutgoingContext(ctx, tc.key, "2000"), &pb.ModelConfigRequest{Name: "m"})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tc.what) || !strings.Contains(err.Error(), "SETTINGS_MAX_HEADER_LIST_SIZE of 1000") {
			t.Errorf("%s of 2 kB to a client that takes 1000 bytes: %v, want INTERNAL naming the setting", tc.what, err)
		}
		var hdr, trl metadata.MD
		_, err = c.ModelConfig(metadata.AppendToOutgoingContext(ctx, tc.key, "500"), &pb.ModelConfigRequest{Name: "m"}, grpc.Header(&hdr), grpc.Trailer(&trl))
		if md := metadata.Join(hdr, trl); err != nil || len(md.Get("x-big")) != 1 {
			t.Errorf("%s within the client's limit, on the same connection: %v, metadata %v", tc.what, err, md)
		}
	}
}

// A ModelStreamInfer that sends no request is answered OK with a complete
// trailers-only response. vig used to send only the trailers (grpc-status 0,
// without :status), which grpc-go's client reads as a malformed response.
func TestH2EmptyStreamInfer(t *testing.T) {
	e, _ := withProbe(t, "")
	c := pb.NewGRPCInferenceServiceClient(plainClient(t, e.tcp))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // liveness, not speed
	defer cancel()
	s, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != io.EOF {
		t.Fatalf("an empty ModelStreamInfer: %v, %v; want its end, status OK", r, err)
	}
}
