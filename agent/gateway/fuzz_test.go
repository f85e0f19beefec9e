package gateway

// Fuzz targets for what vig reads from untrusted clients on the gateway: the
// HTTP/2 frames of a client connection (h2.Reader and the server conn that drives
// it) and the shared-memory references of a ModelInfer request. build/test.sh
// runs each for a short time; crashers land in testdata/fuzz and stay as
// regression inputs.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/metrics"
	"github.com/vig-edge/vig/h2"
	"github.com/vig-edge/vig/internal/fuzztest"
	"github.com/vig-edge/vig/internal/h2test"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// fuzzGateway is a gateway whose backend is never reachable: everything a fuzzed
// client gets through to is answered UNAVAILABLE, without sockets or sleeps.
func fuzzGateway(f *testing.F) *Gateway {
	f.Helper()
	cfg, err := config.Parse("fuzz.yaml", []byte("listen: {metrics: \"off\"}\nmodels: {det: {exec_ms: 1}}\n"))
	if err != nil {
		f.Fatal(err)
	}
	cfg.GRPC.MaxMessageMiB = 1 // a fuzzed length prefix must not make vig wait for 64 MiB
	down := func(context.Context, string) (net.Conn, error) { return nil, errors.New("fuzz: no backend") }
	g, err := New(Options{Config: cfg, Dial: down, Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	g.handshakeTimeout = 2 * time.Second
	g.earlyMin = 16 // requests of 16 bytes and more are forwarded as they arrive (cutthrough.go)
	f.Cleanup(g.Stop)
	return g
}

// frames builds seed inputs: what follows the client preface.
type frames struct{ *h2test.Frames }

func newFrames() *frames { return &frames{h2test.NewFrames()} }

func (f *frames) request(stream uint32, path string, msg []byte) {
	f.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, EndHeaders: true, BlockFragment: f.Block(
		":method", "POST", ":scheme", "http", ":path", path, ":authority", "vig",
		"content-type", "application/grpc", "te", "trailers", "grpc-timeout", "2S")})
	prefix := []byte{0, 0, 0, 0, 0}
	prefix[1], prefix[2], prefix[3], prefix[4] = byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg))
	f.Fr.WriteData(stream, true, append(prefix, msg...))
}

// FuzzServerConn feeds arbitrary bytes, after the client preface, to a client
// connection of the gateway. Whatever they are, vig must not panic, the
// connection must end once the client has gone, and every stream vig accepted
// must have been answered (accepted == answered): nothing accepted is lost.
func FuzzServerConn(f *testing.F) {
	g := fuzzGateway(f)
	infer, _ := proto.Marshal(&pb.ModelInferRequest{ModelName: "det", Id: "cam#1",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "UINT8", Shape: []int64{4}}},
		RawInputContents: [][]byte{{1, 2, 3, 4}}})

	s := newFrames()
	s.Fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	s.request(1, wire.MethodInfer, infer)
	s.request(3, "/grpc.health.v1.Health/Check", nil)
	s.Fr.WritePing(false, [8]byte{1})
	s.Fr.WriteWindowUpdate(0, 1<<16)
	f.Add(s.Bytes())

	s = newFrames()
	s.Fr.WriteSettings()
	s.request(1, wire.MethodStreamInfer, infer)
	s.Fr.WriteRSTStream(1, http2.ErrCodeCancel)
	s.request(5, wire.MethodShmRegister, []byte{0x0a, 1, 'r', 0x12, 2, '/', 'k', 0x20, 8})
	s.Fr.WriteGoAway(5, http2.ErrCodeNo, nil)
	f.Add(s.Bytes())

	s = newFrames() // a header block split over CONTINUATION, then a stream-0 DATA frame
	blk := s.Block(":method", "POST", ":path", wire.MethodInfer, "content-type", "application/grpc", "x-pad", string(make([]byte, 300)))
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:10]})
	s.Fr.WriteContinuation(1, true, blk[10:])
	s.Fr.WriteData(0, false, []byte("x"))
	f.Add(s.Bytes())

	s = newFrames() // a message larger than the limit, and a SETTINGS frame of bad length
	s.Fr.WriteSettings()
	s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: s.Block(
		":method", "POST", ":path", wire.MethodInfer, "content-type", "application/grpc")})
	s.Fr.WriteData(1, false, []byte{0, 0x7f, 0xff, 0xff, 0xff})
	s.Fr.WriteRawFrame(http2.FrameSettings, 0, 0, []byte{1, 2, 3})
	f.Add(s.Bytes())
	f.Add([]byte{})

	s = newFrames() // a request taken as it arrives (three DATA frames), one reset inside it
	msg := append([]byte{0, 0, 0, 0, byte(len(infer))}, infer...)
	for _, id := range []uint32{1, 3} {
		s.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, BlockFragment: s.Block(
			":method", "POST", ":path", wire.MethodInfer, "content-type", "application/grpc")})
		s.Fr.WriteData(id, false, msg[:18])
		s.Fr.WriteData(id, false, msg[18:len(msg)-2])
	}
	s.Fr.WriteData(1, true, msg[len(msg)-2:])
	s.Fr.WriteRSTStream(3, http2.ErrCodeCancel)
	f.Add(s.Bytes())

	f.Fuzz(func(t *testing.T, data []byte) {
		defer fuzztest.Bound(t)()
		vig, client := net.Pipe()
		done := make(chan struct{})
		g.conns.Add(1)
		go func() { g.serveConn(vig); close(done) }()
		go io.Copy(io.Discard, client) // what vig answers; ends with the pipe
		client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := client.Write([]byte(h2.ClientPreface)); err == nil {
			client.Write(data) // vig may close first: that is allowed
		}
		client.Close()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the connection was not released 30 s after its client left")
		}
		for deadline := time.Now().Add(30 * time.Second); g.Answered() != g.Accepted(); {
			if time.Now().After(deadline) {
				t.Fatalf("%d streams accepted, %d answered: a request was lost", g.Accepted(), g.Answered())
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// FuzzShmReferences parses a ModelInfer request and checks its shared-memory
// references against a registry of three regions (one bound to uid 1000). An
// accepted request only names registered regions it may use, inside their bounds;
// a refused one gets one of Triton's codes. The same bytes are also checked as a
// SystemSharedMemoryRegister request.
func FuzzShmReferences(f *testing.F) {
	g := fuzzGateway(f)
	regions := map[string]shmRegion{
		"frames": {key: "/frames", size: 1 << 20},
		"empty":  {key: "/empty", size: 0},
		"mine":   {key: "/mine", offset: 64, size: 4096, uid: 1000, bound: true},
	}
	g.shm.regions = regions
	ref := func(region string, offset, size int64) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "det", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
			Name: "IN", Datatype: "UINT8", Shape: []int64{size}, Parameters: map[string]*pb.InferParameter{
				wire.ParamShmRegion:   {ParameterChoice: &pb.InferParameter_StringParam{StringParam: region}},
				wire.ParamShmByteSize: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: size}},
				wire.ParamShmOffset:   {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: offset}},
			}}}}
	}
	for _, r := range []*pb.ModelInferRequest{
		ref("frames", 0, 1<<20), ref("frames", 1<<20, 1), ref("frames", math.MaxInt64, math.MaxInt64),
		ref("empty", 0, 0), ref("mine", 0, 4096), ref("nope", 0, 1), ref("frames", -1, 4),
	} {
		b, _ := proto.Marshal(r)
		f.Add(b, uint16(1000))
		f.Add(b, uint16(0xffff)) // credentials unknown
	}
	reg, _ := proto.Marshal(&pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: "/frames", Offset: 8, ByteSize: 1 << 20})
	f.Add(reg, uint16(0))
	f.Fuzz(func(t *testing.T, msg []byte, uid16 uint16) {
		defer fuzztest.Bound(t)()
		uid, known := uint32(uid16), uid16 != 0xffff
		// The same bytes as a registration: accepted only with a valid key and
		// an offset + size that does not overflow. (The registry is not changed:
		// the returned function is what would record it.)
		if _, err := g.shmCheck(methodShmRegister, mem.BufferSlice{mem.SliceBuffer(msg)}, uid, known); err == nil {
			var r pb.SystemSharedMemoryRegisterRequest
			if perr := proto.Unmarshal(msg, &r); perr != nil || !validShmKey(r.Key) || r.Offset > math.MaxUint64-r.ByteSize {
				t.Fatalf("registration accepted: %v %+v", perr, &r)
			}
		} else if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("registration refused with %v", err)
		}
		var h wire.InferHeader
		if err := h.ParseInfer(mem.BufferSlice{mem.SliceBuffer(msg)}); err != nil || !h.Shm {
			return
		}
		err := g.checkShm(&h, uid, known, true) // the registry only: no backend to ask
		if err != nil {
			switch status.Code(err) {
			case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unavailable:
			default:
				t.Fatalf("refused with %v", err)
			}
			return
		}
		for _, ts := range [][]wire.Tensor{h.Inputs, h.Outputs} {
			for _, tn := range ts {
				var name string
				var has bool
				var offset, size int64
				for _, p := range tn.Params {
					switch string(p.Key) {
					case wire.ParamShmRegion:
						name, has = string(p.Str), true
					case wire.ParamShmOffset:
						offset = p.Int
					case wire.ParamShmByteSize:
						size = p.Int
					}
				}
				if !has {
					continue
				}
				reg, ok := regions[name]
				switch {
				case !ok:
					t.Fatalf("accepted unknown region %q", name)
				case reg.bound && (!known || uid != reg.uid):
					t.Fatalf("uid %d (known %v) may use %q, bound to uid %d", uid, known, name, reg.uid)
				case offset < 0 || size < 0 || uint64(offset)+uint64(size) > reg.size:
					t.Fatalf("accepted %d bytes at %d of the %d-byte region %q", size, offset, reg.size, name)
				}
			}
		}
	})
}
