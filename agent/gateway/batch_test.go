package gateway_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/netopt"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// rowBackend is a Triton-protocol backend of one batching model: each output
// row is computed from its input row alone, so a client can tell whose row it
// got. It records the batch size of every request it takes.
type rowBackend struct {
	pb.UnimplementedGRPCInferenceServiceServer
	exec time.Duration

	mu      sync.Mutex
	sizes   []int
	hold    chan struct{} // when set, a request waits for it (or its end)
	entered chan int      // when set, told each request's rows as it arrives
	fail    error         // when set, a batch of more than one row fails with it
	ended   atomic.Int32  // requests whose client (vig) stopped them
}

func (b *rowBackend) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	if len(req.Inputs) != 1 || len(req.Inputs[0].Shape) != 2 || len(req.RawInputContents) != 1 {
		return nil, status.Errorf(codes.InvalidArgument, "want one input [b, n], got %v", req.Inputs)
	}
	rows := int(req.Inputs[0].Shape[0])
	b.mu.Lock()
	b.sizes = append(b.sizes, rows)
	hold, entered, fail := b.hold, b.entered, b.fail
	b.mu.Unlock()
	if entered != nil {
		entered <- rows
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			b.ended.Add(1)
			return nil, ctx.Err()
		}
	}
	time.Sleep(b.exec)
	if fail != nil && rows > 1 {
		return nil, fail
	}
	out := bytes.Clone(req.RawInputContents[0])
	for i := range out {
		out[i] ^= 0x5a
	}
	return &pb.ModelInferResponse{ModelName: req.ModelName, Id: req.Id,
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "OUT", Datatype: "UINT8", Shape: req.Inputs[0].Shape},
		},
		RawOutputContents: [][]byte{out}}, nil
}

func (b *rowBackend) batched() (batches, frames int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.sizes {
		if n > 1 {
			batches++
			frames += n
		}
	}
	return
}

// startRowBackend serves b on a loopback port.
func startRowBackend(t *testing.T, b *rowBackend) (addr string, srv *grpc.Server) {
	t.Helper()
	ln, err := netopt.Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv = grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, b)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), srv
}

// batchYAML: six streams of one model that batches up to 8 frames.
const batchYAML = `
listen: {metrics: "off"}
backend: {slots: 1, stats_interval_ms: -1}
scheduler: {safety_margin_pct: 100, pipeline: false}
models:
  det: {exec_ms: 10, max_batch: 8, batch_exec_ms: {1: 10, 8: 20}}
streams:
  - {name: cam0, model: det, class: high, period_ms: 60, max_age_ms: 30000}
  - {name: cam1, model: det, class: high, period_ms: 60, max_age_ms: 30000}
  - {name: cam2, model: det, class: high, period_ms: 60, max_age_ms: 30000}
  - {name: cam3, model: det, class: high, period_ms: 60, max_age_ms: 30000}
  - {name: cam4, model: det, class: high, period_ms: 60, max_age_ms: 30000}
  - {name: cam5, model: det, class: high, period_ms: 60, max_age_ms: 30000}
`

// frameRequest is frame n of camera cam: 64 bytes that say whose frame it is.
func frameRequest(cam, n int) *pb.ModelInferRequest {
	data := make([]byte, 64)
	for i := 0; i < len(data); i += 8 {
		binary.LittleEndian.PutUint32(data[i:], uint32(cam))
		binary.LittleEndian.PutUint32(data[i+4:], uint32(n))
	}
	return &pb.ModelInferRequest{
		ModelName: "det", Id: fmt.Sprintf("cam%d#%d", cam, n),
		Parameters: map[string]*pb.InferParameter{
			wire.ParamStream: {ParameterChoice: &pb.InferParameter_StringParam{StringParam: fmt.Sprintf("cam%d", cam)}},
		},
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "UINT8", Shape: []int64{1, 64}}},
		RawInputContents: [][]byte{data},
	}
}

// checkOwnAnswer fails unless resp is req's own answer.
func checkOwnAnswer(t *testing.T, req *pb.ModelInferRequest, resp *pb.ModelInferResponse) {
	t.Helper()
	want := bytes.Clone(req.RawInputContents[0])
	for i := range want {
		want[i] ^= 0x5a
	}
	if resp.Id != req.Id || len(resp.Outputs) != 1 || len(resp.Outputs[0].Shape) != 2 || resp.Outputs[0].Shape[0] != 1 ||
		len(resp.RawOutputContents) != 1 || !bytes.Equal(resp.RawOutputContents[0], want) {
		t.Errorf("request %s got another's answer: id %q outputs %v", req.Id, resp.Id, resp.Outputs)
	}
}

// Six cameras of one batching model through vig: the backend sees batches,
// and every client gets its own frame's answer.
func TestBatchSixStreams(t *testing.T) {
	rb := &rowBackend{exec: 15 * time.Millisecond}
	addr, _ := startRowBackend(t, rb)
	// A frame the scheduler holds for a batch that never comes (its peers'
	// sensors stopped) is dropped late at its max_age: 1 s here.
	e, gov, _ := governedAt(t, strings.ReplaceAll(batchYAML, "max_age_ms: 30000", "max_age_ms: 1000"), addr)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	const frames = 12
	var wg sync.WaitGroup
	var answered, refused atomic.Int32
	start := time.Now()
	for cam := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range frames {
				time.Sleep(time.Until(start.Add(time.Duration(n) * 60 * time.Millisecond)))
				req := frameRequest(cam, n)
				resp, err := c.ModelInfer(ctx, req)
				if err != nil {
					// The scheduler may drop a frame it cannot deliver fresh.
					s := status.Convert(err)
					late := s.Code() == codes.DeadlineExceeded && strings.HasPrefix(s.Message(), "vig:")
					if code := s.Code(); code != codes.Aborted && code != codes.Unavailable && !late {
						t.Errorf("%s: %v", req.Id, err)
					}
					refused.Add(1)
					continue
				}
				answered.Add(1)
				checkOwnAnswer(t, req, resp)
			}
		}()
	}
	wg.Wait()
	batches, inBatches := rb.batched()
	t.Logf("%d answered, %d refused; %d batches carried %d frames; backend requests %v", answered.Load(), refused.Load(), batches, inBatches, rb.sizes)
	if batches == 0 {
		t.Fatalf("the backend never got a batch: %v", rb.sizes)
	}
	var snap sched.Snapshot
	gov.Snapshot(&snap)
	var jobs, rows int
	for _, b := range snap.Batches {
		for n := 2; n < len(b.Sizes); n++ {
			jobs += int(b.Sizes[n])
			rows += n * int(b.Sizes[n])
		}
	}
	if jobs != batches || rows != inBatches {
		t.Errorf("scheduler counted %d batches of %d rows; the backend took %d of %d", jobs, rows, batches, inBatches)
	}
	drained(t, e.gw)
	checkBalanced(t, e.reg)
}

// heldBatch starts the six streams' first frames with the backend holding
// every request, and returns when a batch of the five that waited behind the
// first is on the backend (the first runs alone on the free slot).
func heldBatch(t *testing.T, e *env, rb *rowBackend, c pb.GRPCInferenceServiceClient, ctxs []context.Context) (results chan error, resps []*pb.ModelInferResponse) {
	t.Helper()
	results = make(chan error, 6)
	resps = make([]*pb.ModelInferResponse, 6)
	send := func(cam int) {
		r, err := c.ModelInfer(ctxs[cam], frameRequest(cam, 0))
		resps[cam] = r
		results <- err
	}
	go send(0)
	if n := <-rb.entered; n != 1 {
		t.Fatalf("first request of %d rows", n)
	}
	for cam := 1; cam < 6; cam++ {
		go send(cam)
	}
	// The five wait behind the held first; release it: they go as one batch.
	eventuallyWaiting(t, e, 5)
	rb.hold <- struct{}{}
	if err := <-results; err != nil {
		t.Fatalf("cam0 alone: %v", err)
	}
	if n := <-rb.entered; n != 5 {
		t.Fatalf("batch of %d rows, want 5", n)
	}
	return results, resps
}

// eventuallyWaiting waits until n requests wait in vig's queues.
func eventuallyWaiting(t *testing.T, e *env, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d requests waiting", n), func() bool {
		w := 0.0
		for _, c := range streamCounters(t, e.reg) {
			w += c["waiting"]
		}
		return w == float64(n)
	})
}

func TestBatchExactlyOnce(t *testing.T) {
	newEnvYAML := func(t *testing.T, yaml string) (*rowBackend, *env, *gateway.Governor, *grpc.Server, pb.GRPCInferenceServiceClient) {
		rb := &rowBackend{hold: make(chan struct{}), entered: make(chan int, 16)}
		addr, srv := startRowBackend(t, rb)
		e, gov, _ := governedAt(t, yaml, addr)
		return rb, e, gov, srv, pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	}
	newEnv := func(t *testing.T) (*rowBackend, *env, *gateway.Governor, *grpc.Server, pb.GRPCInferenceServiceClient) {
		return newEnvYAML(t, batchYAML)
	}
	ctxs := func(t *testing.T) ([]context.Context, []context.CancelFunc) {
		var cs []context.Context
		var cancels []context.CancelFunc
		for range 6 {
			ctx, cancel := context.WithCancel(ctxT(t))
			cs, cancels = append(cs, ctx), append(cancels, cancel)
		}
		return cs, cancels
	}
	outcomes := func(t *testing.T, gov *gateway.Governor) (forwarded, cancelled, failed uint64) {
		var snap sched.Snapshot
		gov.Snapshot(&snap)
		for _, st := range snap.Streams {
			forwarded += st.Forwarded
			cancelled += st.Cancelled
			failed += st.BackendError
		}
		return
	}

	t.Run("clients leave mid-batch", func(t *testing.T) {
		rb, e, gov, _, c := newEnv(t)
		cs, cancels := ctxs(t)
		results, resps := heldBatch(t, e, rb, c, cs)
		cancels[2]()
		cancels[4]()
		for range 2 {
			if err := <-results; status.Code(err) != codes.Canceled {
				t.Fatalf("a client that left: %v", err)
			}
		}
		eventually(t, "vig sees two members leave", func() bool { return gateway.LeftInBatches(gov) == 2 })
		rb.hold <- struct{}{}
		for range 3 {
			if err := <-results; err != nil {
				t.Fatalf("a member that stayed: %v", err)
			}
		}
		for _, cam := range []int{1, 3, 5} {
			checkOwnAnswer(t, frameRequest(cam, 0), resps[cam])
		}
		drained(t, e.gw)
		eventually(t, "the batch's outcomes", func() bool {
			f, can, _ := outcomes(t, gov)
			return f == 4 && can == 2
		})
		checkBalanced(t, e.reg)
		if rb.ended.Load() != 0 {
			t.Errorf("the batch was stopped at the backend although three members stayed")
		}
	})

	t.Run("every member leaves", func(t *testing.T) {
		rb, e, gov, _, c := newEnv(t)
		cs, cancels := ctxs(t)
		results, _ := heldBatch(t, e, rb, c, cs)
		for cam := 1; cam < 6; cam++ {
			cancels[cam]()
		}
		for range 5 {
			if err := <-results; status.Code(err) != codes.Canceled {
				t.Fatalf("a client that left: %v", err)
			}
		}
		eventually(t, "the batch stopped at the backend", func() bool { return rb.ended.Load() == 1 })
		drained(t, e.gw)
		eventually(t, "the batch's outcomes", func() bool {
			f, can, _ := outcomes(t, gov)
			return f == 1 && can == 5
		})
		checkBalanced(t, e.reg)
	})

	t.Run("backend fails the batch", func(t *testing.T) {
		rb, e, gov, _, c := newEnv(t)
		rb.fail = status.Error(codes.ResourceExhausted, "out of device memory")
		cs, _ := ctxs(t)
		results, _ := heldBatch(t, e, rb, c, cs)
		rb.hold <- struct{}{}
		for range 5 {
			err := <-results
			if s := status.Convert(err); s.Code() != codes.ResourceExhausted || s.Message() != "out of device memory" {
				t.Fatalf("member of a failed batch: %v, want the backend's status", err)
			}
		}
		drained(t, e.gw)
		eventually(t, "the batch's outcomes", func() bool {
			f, _, failed := outcomes(t, gov)
			return f == 1 && failed == 5
		})
		checkBalanced(t, e.reg)
	})

	t.Run("vig gives up on the batch", func(t *testing.T) {
		// The backend holds the batch past backend.call_timeout_ms: vig's
		// expiry stops it, and every member hears DEADLINE_EXCEEDED. The
		// clients set no deadline (with one, it is what vig gives up at).
		rb, e, gov, _, c := newEnvYAML(t, strings.Replace(batchYAML, "stats_interval_ms: -1", "stats_interval_ms: -1, call_timeout_ms: 300", 1))
		cs := make([]context.Context, 6)
		for i := range cs {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			cs[i] = ctx
		}
		results, _ := heldBatch(t, e, rb, c, cs)
		for range 5 {
			if err := <-results; status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("member of a batch vig gave up on: %v", err)
			}
		}
		eventually(t, "the batch stopped at the backend", func() bool { return rb.ended.Load() == 1 })
		drained(t, e.gw)
		eventually(t, "the batch's outcomes", func() bool {
			f, _, failed := outcomes(t, gov)
			return f == 1 && failed == 5
		})
		checkBalanced(t, e.reg)
	})

	t.Run("backend goes down", func(t *testing.T) {
		rb, e, gov, srv, c := newEnv(t)
		cs, _ := ctxs(t)
		results, _ := heldBatch(t, e, rb, c, cs)
		go srv.Stop()
		for range 5 {
			if err := <-results; status.Code(err) != codes.Unavailable {
				t.Fatalf("member of a batch whose backend went down: %v", err)
			}
		}
		drained(t, e.gw)
		eventually(t, "the batch's outcomes", func() bool {
			f, can, failed := outcomes(t, gov)
			return f == 1 && can+failed == 5
		})
		checkBalanced(t, e.reg)
	})
}

// Large frames of a batching model (above the cut-through size) arrive whole
// and join batches: what batching saves is worth more than overlapping the
// transfers.
func TestBatchLargeFramesJoin(t *testing.T) {
	rb := &rowBackend{hold: make(chan struct{}), entered: make(chan int, 16)}
	addr, _ := startRowBackend(t, rb)
	e, _, _ := governedAt(t, batchYAML, addr)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	big := func(cam int) *pb.ModelInferRequest {
		r := frameRequest(cam, 0)
		data := bytes.Repeat(r.RawInputContents[0], 200<<10/64)
		r.RawInputContents[0], r.Inputs[0].Shape = data, []int64{1, int64(len(data))}
		return r
	}
	results := make(chan error, 6)
	for cam := range 6 {
		req := big(cam)
		go func() {
			resp, err := c.ModelInfer(ctx, req, grpc.MaxCallRecvMsgSize(64<<20))
			if err == nil {
				checkOwnAnswer(t, req, resp)
			}
			results <- err
		}()
		if cam == 0 {
			if n := <-rb.entered; n != 1 {
				t.Fatalf("first request of %d rows", n)
			}
		}
	}
	eventuallyWaiting(t, e, 5)
	close(rb.hold)
	if n := <-rb.entered; n != 5 {
		t.Fatalf("the five 200 KB frames that waited went as %d rows, want one batch of 5", n)
	}
	for range 6 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
}
