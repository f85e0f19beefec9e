package restfront

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/vig-edge/vig/proto/inference"
)

// cudaShm serves /v2/cudasharedmemory/{status, unregister} and
// /v2/cudasharedmemory/region/{name}/{status, register, unregister}: passed
// to the backend's CUDA shared memory RPCs, as for a gRPC client. vig never
// maps a CUDA region (the backend does, from the IPC handle); a request
// naming one goes to the backend as it is.
func (f *Frontend) cudaShm(w http.ResponseWriter, r *http.Request, seg []string) {
	region, op := shmPath(seg)
	switch op {
	case "status":
		if !method(w, r, http.MethodGet) {
			return
		}
		var resp pb.CudaSharedMemoryStatusResponse
		if err := f.call(r, "CudaSharedMemoryStatus", &pb.CudaSharedMemoryStatusRequest{Name: region}, &resp); err != nil {
			fail(w, err)
			return
		}
		type st struct {
			Name     string `json:"name"`
			DeviceID uint64 `json:"device_id"`
			ByteSize uint64 `json:"byte_size"`
		}
		out := []st{}
		for _, e := range resp.Regions {
			s, err := cudaRegion(e)
			if err != nil {
				failCode(w, http.StatusInternalServerError, codes.Internal, "backend CudaSharedMemoryStatus: "+err.Error())
				return
			}
			out = append(out, s)
		}
		slices.SortFunc(out, func(a, b st) int { return strings.Compare(a.Name, b.Name) })
		writeJSON(w, r, out)
	case "register":
		if !method(w, r, http.MethodPost) {
			return
		}
		if region == "" {
			failCode(w, http.StatusNotFound, codes.NotFound, "register: use /v2/cudasharedmemory/region/{name}/register")
			return
		}
		src, good := f.readBody(w, r)
		if !good {
			return
		}
		defer src.free()
		body := src.bytes()
		var in struct {
			RawHandle *struct {
				B64 *string `json:"b64"`
			} `json:"raw_handle"`
			DeviceID *int64  `json:"device_id"`
			ByteSize *uint64 `json:"byte_size"`
		}
		err := exactUnmarshal(body, &in)
		if err != nil || in.RawHandle == nil || in.RawHandle.B64 == nil || in.DeviceID == nil || in.ByteSize == nil {
			msg := `CUDA shared memory register request needs "raw_handle": {"b64": <base64 of the cudaIpcMemHandle_t>}, "device_id" and "byte_size" (integers)`
			if err != nil {
				msg += ": " + err.Error()
			}
			failCode(w, http.StatusBadRequest, codes.InvalidArgument, msg)
			return
		}
		handle, err := base64.StdEncoding.DecodeString(*in.RawHandle.B64)
		if err != nil {
			failCode(w, http.StatusBadRequest, codes.InvalidArgument, "raw_handle.b64 is not base64: "+err.Error())
			return
		}
		req := &pb.CudaSharedMemoryRegisterRequest{Name: region, RawHandle: handle, DeviceId: *in.DeviceID, ByteSize: *in.ByteSize}
		if err := f.call(r, "CudaSharedMemoryRegister", req, &pb.CudaSharedMemoryRegisterResponse{}); err != nil {
			fail(w, err)
			return
		}
		ok(w, true)
	case "unregister":
		if !method(w, r, http.MethodPost) {
			return
		}
		if err := f.call(r, "CudaSharedMemoryUnregister", &pb.CudaSharedMemoryUnregisterRequest{Name: region}, &pb.CudaSharedMemoryUnregisterResponse{}); err != nil {
			fail(w, err)
			return
		}
		ok(w, true)
	default:
		failCode(w, http.StatusNotFound, codes.NotFound, fmt.Sprintf("%s: not a CUDA shared memory endpoint", r.URL.Path))
	}
}

// cudaRegion decodes one entry of CudaSharedMemoryStatusResponse.regions
// (map<string, RegionStatus{name = 1, device_id = 2, byte_size = 3}>).
func cudaRegion(entry []byte) (s struct {
	Name     string `json:"name"`
	DeviceID uint64 `json:"device_id"`
	ByteSize uint64 `json:"byte_size"`
}, err error) {
	err = fields(entry, func(num protowire.Number, v []byte, x uint64) error {
		if num != 2 || v == nil {
			return nil
		}
		return fields(v, func(num protowire.Number, v []byte, x uint64) error {
			switch num {
			case 1:
				s.Name = string(v)
			case 2:
				s.DeviceID = x
			case 3:
				s.ByteSize = x
			}
			return nil
		})
	})
	return s, err
}
