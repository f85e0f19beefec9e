package bench

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/shmring/client"
)

// ringStream is the stream of the shmring row's requests. vig names the backend
// request "stream#frame", so with the same frame numbers the DIRECT gRPC request
// (mockbackend.FrameID("datapath", frame)) gets the same mock execution time.
const ringStream = "datapath"

var ringSeq atomic.Int64

// ringAddr is an abstract Unix socket name for one vig process's ring listener.
func ringAddr() string {
	return fmt.Sprintf("@vigbench-%d-%d", os.Getpid(), ringSeq.Add(1))
}

// ringSupport says why no ring can be made on this machine (nil when one can).
func ringSupport() error {
	if _, err := shmring.Probe(); err != nil {
		return fmt.Errorf("no shared-memory ring on this machine: %w", err)
	}
	return nil
}

// ringSensor is a sensor attached to vig's ring frontend: the VIA side of the
// shmring row, and the idle ring sessions.
type ringSensor struct {
	c     *client.Client
	byRef bool // the region is keyed /dev/shm: vig forwards its frames by reference
}

// dialRing attaches a ring client (default ring sizes: 8 MiB request slots) to
// vig's ring listener at addr. Where the machine has /dev/shm the region is
// keyed (shmring.BackendShmKey), so that vig hands the frames to the mock
// backend by reference (Triton system shared memory) and the row measures that
// path; elsewhere (Android), or without preferRef, the region is a sealed memfd
// and the session is on the copy path.
func dialRing(addr string, preferRef bool) (*ringSensor, error) {
	opts := client.Options{} // BackendAuto: a sealed memfd where the kernel has one
	_, err := os.Stat("/dev/shm")
	byRef := err == nil && preferRef
	if byRef {
		opts.Backend = shmring.BackendShmKey
	}
	c, err := client.Dial(addr, opts)
	if err != nil {
		return nil, fmt.Errorf("attach ring client to %s: %w", addr, err)
	}
	return &ringSensor{c: c, byRef: byRef}, nil
}

// call sends one frame through the ring and waits for its result. The frame is
// written into the loaned slot before the clock starts (a sensor's capture
// writes it there once, in place; the gRPC rows likewise encode their message
// before timing); the time is Submit to the result in hand. It checks that the
// answer is the mock backend's for this frame, and returns its digest of the
// input (mockbackend.Digest).
func (r *ringSensor) call(frame uint64, data []byte) (time.Duration, uint64, error) {
	f, err := r.c.Loan()
	if err != nil {
		return 0, 0, err
	}
	if len(data) > len(f.Bytes()) {
		r.c.Return(f)
		return 0, 0, fmt.Errorf("%d-byte frame does not fit the %d-byte ring slot", len(data), len(f.Bytes()))
	}
	n := copy(f.Bytes(), data)
	req := client.Request{Stream: ringStream, Model: benchModel, Frame: frame, Len: n}
	t0 := time.Now()
	tag, err := r.c.Submit(f, &req)
	if err != nil {
		r.c.Return(f)
		return 0, 0, err
	}
	var res client.Result
	err = r.c.Next(&res)
	d := time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	defer r.c.Release(&res)
	if err := res.Err(); err != nil {
		return 0, 0, err
	}
	if res.Tag != tag {
		return 0, 0, fmt.Errorf("ring answered tag %d, want %d (one request in flight)", res.Tag, tag)
	}
	o, out := res.Output(0)
	digest, got, ok := mockOutput(out)
	if !ok || got != frame || res.NumOutputs() != 1 || o.Name != "OUTPUT0" {
		return 0, 0, fmt.Errorf("ring answer %x (%d outputs) is not the mock backend's for frame %d", res.Payload(), res.NumOutputs(), frame)
	}
	return d, digest, nil
}

// mockOutput reads a mock backend output: the digest of the input and the frame
// number, little-endian uint64s.
func mockOutput(out []byte) (digest, frame uint64, ok bool) {
	if len(out) != 16 {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(out), binary.LittleEndian.Uint64(out[8:]), true
}

func (r *ringSensor) Close() { r.c.Close() }
