package gateway_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/mockbackend"
	pb "github.com/vig-edge/vig/proto/inference"
)

func shmObject(t *testing.T, size int) (key string, data []byte) {
	t.Helper()
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine: %v", err)
	}
	key = fmt.Sprintf("/vig-gw-shm-%d-%d", os.Getpid(), time.Now().UnixNano())
	data = make([]byte, size)
	for i := range data {
		data[i] = byte(i * 13)
	}
	if err := os.WriteFile("/dev/shm"+key, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/dev/shm" + key) })
	return key, data
}

func shmInfer(model, id, region string, offset, size int64) *pb.ModelInferRequest {
	params := map[string]*pb.InferParameter{
		"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: region}},
		"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: size}},
	}
	if offset != 0 {
		params["shared_memory_offset"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: offset}}
	}
	return &pb.ModelInferRequest{ModelName: model, Id: id,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{size}, Parameters: params}}}
}

// On the system-shm path the payload never passes through vig: the bytes vig
// receives per request do not grow from 150 KB to 6.2 MB tensors.
func TestShmPathBytesFlat(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	const regionSize = 8 << 20
	key, data := shmObject(t, regionSize)
	if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "frames", Key: key, ByteSize: regionSize}); err != nil {
		t.Fatal(err)
	}
	received := func() float64 { return scrape(t, e.reg)[`vig_grpc_received_bytes_total{method="ModelInfer"}`] }
	perRequest := map[int64]float64{}
	for i, size := range []int64{150_000, 6_200_000} {
		before := received()
		r, err := c.ModelInfer(ctx, shmInfer("detector", mockbackend.FrameID("cam", uint64(i)), "frames", 0, size))
		if err != nil {
			t.Fatalf("shm infer %d B: %v", size, err)
		}
		if got, want := binary.LittleEndian.Uint64(r.RawOutputContents[0]), mockbackend.Digest([][]byte{data[:size]}); got != want {
			t.Errorf("%d B: backend digest %x, want %x of the region's bytes", size, got, want)
		}
		perRequest[size] = received() - before
	}
	small, large := perRequest[150_000], perRequest[6_200_000]
	if large > 1024 || large-small > 16 {
		t.Errorf("bytes through vig per request: %v at 150 KB, %v at 6.2 MB; must not grow with tensor size", small, large)
	}
	t.Logf("bytes through vig per request: %v (150 KB tensor), %v (6.2 MB tensor)", small, large)
}

// vig checks shared-memory references with Triton's codes before queueing.
func TestShmReferencesChecked(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	ctx := ctxT(t)
	tcp := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	uds := pb.NewGRPCInferenceServiceClient(e.dial(t, e.unix))
	key, _ := shmObject(t, 4096)
	if _, err := tcp.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: key, ByteSize: 4096}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		region       string
		offset, size int64
		want         codes.Code
	}{
		{"fits", "r", 96, 4000, codes.OK},
		{"unknown region", "nope", 0, 16, codes.NotFound},
		{"offset beyond region", "r", 4096, 1, codes.InvalidArgument},
		{"past the end", "r", 100, 4000, codes.InvalidArgument},
		{"overflow", "r", 1, 1<<63 - 1, codes.InvalidArgument},
	} {
		_, err := tcp.ModelInfer(ctx, shmInfer("detector", "cam#1", tc.region, tc.offset, tc.size))
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := tcp.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "bad", Key: "no-slash", ByteSize: 16}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad key: %v, want INVALID_ARGUMENT", err)
	}

	// A region registered over the Unix socket belongs to the registering uid: a
	// peer whose uid vig cannot establish (TCP) may not use it.
	key2, _ := shmObject(t, 4096)
	if _, err := uds.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "mine", Key: key2, ByteSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if _, err := uds.ModelInfer(ctx, shmInfer("detector", "cam#2", "mine", 0, 64)); err != nil {
		t.Errorf("owner using its region: %v", err)
	}
	if _, err := tcp.ModelInfer(ctx, shmInfer("detector", "cam#3", "mine", 0, 64)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("other peer using a uid-bound region: %v, want PERMISSION_DENIED", err)
	}
	if _, err := tcp.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: "mine"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("other peer unregistering a uid-bound region: %v, want PERMISSION_DENIED", err)
	}

	// A region registered with the backend directly is found there.
	key3, _ := shmObject(t, 4096)
	if _, err := e.direct.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "direct", Key: key3, ByteSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if _, err := tcp.ModelInfer(context.Background(), shmInfer("detector", "cam#4", "direct", 0, 64)); err != nil {
		t.Errorf("region registered directly with the backend: %v", err)
	}
}

// What tritonclient.grpc sends for one input in system shared memory and one as
// data (InferInput.set_shared_memory leaves the input no raw content; the
// request's raw_input_contents holds the data input's bytes only): vig passes
// it and the backend answers it as when sent to it directly (Triton's rule,
// src/grpc/infer_handler.cc: inputs in shared memory take no raw entry).
func TestShmInputBesideDataInput(t *testing.T) {
	e := startEnv(t, testConfig(t, ""), true)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	key, data := shmObject(t, 4096)
	if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "frames", Key: key, ByteSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.direct.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "frames_direct", Key: key, ByteSize: 4096}); err != nil {
		t.Fatal(err)
	}
	// 3 bytes: read whole; 300 KB: forwarded cut-through, checked by wire.RawScan.
	for i, mask := range [][]byte{{7, 8, 9}, bytes.Repeat([]byte{5}, 300<<10)} {
		req := func(region, id string) *pb.ModelInferRequest {
			r := shmInfer("detector", id, region, 64, 1000)
			r.Inputs = append(r.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: "MASK", Datatype: "UINT8", Shape: []int64{int64(len(mask))}})
			r.RawInputContents = [][]byte{mask}
			return r
		}
		via, err := c.ModelInfer(ctx, req("frames", mockbackend.FrameID("cam", uint64(2*i))))
		if err != nil {
			t.Fatalf("%d B through vig: %v", len(mask), err)
		}
		direct, err := e.direct.ModelInfer(ctx, req("frames_direct", mockbackend.FrameID("cam", uint64(2*i+1))))
		if err != nil {
			t.Fatalf("%d B to the backend: %v", len(mask), err)
		}
		want := mockbackend.Digest([][]byte{data[64:1064], mask})
		for name, r := range map[string]*pb.ModelInferResponse{"through vig": via, "to the backend": direct} {
			if got := binary.LittleEndian.Uint64(r.RawOutputContents[0]); got != want {
				t.Errorf("%d B %s: digest %x, want %x (the region's bytes, then the data input's)", len(mask), name, got, want)
			}
		}
	}
}
