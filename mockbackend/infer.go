package mockbackend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/proto/inference"
)

// Tensor parameters that place a tensor in a registered system shared-memory region.
const (
	paramRegion   = "shared_memory_region"
	paramByteSize = "shared_memory_byte_size"
	paramOffset   = "shared_memory_offset"
)

// ModelInfer runs one request: it waits for a slot in FIFO order, holds it for the
// frame's execution time and answers OUTPUT0 (see the package doc).
func (s *Server) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return s.infer(ctx, req)
}

// ModelStreamInfer runs the requests of a stream concurrently (the slots bound how
// many execute) and sends the responses in completion order. A request that fails
// gets a response with error_message set and the request's id, model name and
// version in infer_response, so that the client can tell which one failed.
func (s *Server) ModelStreamInfer(stream grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	ctx := stream.Context()
	var (
		wg      sync.WaitGroup
		sendMu  sync.Mutex
		sendErr error
	)
	send := func(r *inference.ModelStreamInferResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendErr == nil {
			sendErr = stream.Send(r)
		}
	}
	defer wg.Wait()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil // wg.Wait: every accepted request is answered before the stream ends
		}
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.infer(ctx, req)
			if err != nil {
				send(&inference.ModelStreamInferResponse{
					ErrorMessage:  status.Convert(err).Message(),
					InferResponse: &inference.ModelInferResponse{ModelName: req.ModelName, ModelVersion: req.ModelVersion, Id: req.Id},
				})
				return
			}
			send(&inference.ModelStreamInferResponse{InferResponse: resp})
		}()
	}
}

// job is one request being served.
type job struct {
	inputs  [][]byte   // one per input tensor: raw bytes, encoded contents, or a view into shm
	names   []string   // input names
	rows    int        // batch size: the inputs' first dimension (1 for a model without one)
	split   [][][]byte // a batching model's inputs by row: split[i][k] is input k's row i
	rowOut  []byte     // a batching model's OUTPUT0: RowOutput of each row
	outputs []*output  // outputs to produce
	regions []*region  // regions held until the job ends
}

type output struct {
	name   string
	region *region // nil: raw_output_contents
	data   []byte  // the output's bytes in the region when region != nil
}

func (s *Server) infer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	arrival := time.Now()
	m, err := s.lookup(req.ModelName, req.ModelVersion)
	if err != nil {
		return nil, err
	}
	stream, frame, ok := ParseFrameID(req.Id)
	if !ok {
		stream, frame = m.Name, m.arrivals.Add(1)-1
	}
	resp, st, err := s.runInSequence(ctx, m, req, stream, frame, arrival)
	done := time.Now()
	m.mu.Lock()
	if err != nil {
		m.st.fail.add(done.Sub(arrival))
	} else {
		m.st.last = done
		m.st.inferences += uint64(st.rows)
		if st.leader {
			m.st.executions++
			if m.st.batches == nil {
				m.st.batches = map[int]uint64{}
			}
			m.st.batches[st.batch]++
		}
		m.st.success.add(done.Sub(arrival))
		m.st.queue.add(st.queue)
		m.st.input.add(st.input)
		m.st.comp.add(st.infer)
		m.st.output.add(st.output)
	}
	m.mu.Unlock()
	return resp, err
}

type phases struct {
	queue, input, infer, output time.Duration
	rows, batch                 int  // the request's rows, its execution's
	leader                      bool // the request held the slot (counts the execution)
}

func (s *Server) run(ctx context.Context, m *model, req *inference.ModelInferRequest, stream string, frame uint64, arrival time.Time) (*inference.ModelInferResponse, phases, error) {
	var ph phases
	j := &job{}
	defer func() {
		for _, r := range j.regions {
			s.shm.release(r)
		}
	}()
	if err := s.prepare(j, m, req); err != nil {
		return nil, ph, err
	}
	digest, err := digestInputs(j)
	if err != nil {
		return nil, ph, err
	}
	if m.MaxBatch > 0 {
		if err := readShared("reading inputs from", func() {
			j.rowOut = make([]byte, 0, RowBytes*j.rows)
			for _, row := range j.split {
				j.rowOut = append(j.rowOut, RowOutput(row)...)
			}
		}); err != nil {
			return nil, ph, err
		}
	}
	queued := time.Now()
	ph.input = queued.Sub(arrival)

	wk := work{rows: j.rows, policy: m.policy, limit: m.limit}
	if j.rows == 1 {
		wk.exec = ExecTime(s.cfg.Seed, stream, frame, m.Exec)
	} else {
		wk.exec = time.Duration(math.Round(float64(m.Exec) * meanFactor * float64(j.rows)))
	}
	g, err := s.acquire(ctx, m, req, queued, wk)
	if err != nil {
		return nil, ph, err
	}
	if h := s.grantHook.Load(); h != nil {
		(*h)(req.Id, grant{slot: m.base + g.slot, start: g.start, end: g.end, exec: g.exec, leader: g.leader})
	}
	end := g.end
	if s.timeline != nil {
		s.timeline.add(Job{ID: req.Id, Model: m.Name, Stream: stream, Frame: frame, Slot: m.base + g.slot, Accelerator: m.accel,
			Queued: queued, Start: g.start, End: end, Execution: g.exec.id, Rows: j.rows, Batch: g.exec.rows, Interference: g.exec.factor})
	}
	if g.leader {
		if s.spin >= 0 {
			waitUntil(end, s.spin)
		} else {
			time.Sleep(time.Until(end))
		}
		m.pool.release(g.slot, end)
		close(g.exec.done)
	} else {
		<-g.exec.done
	}
	finished := time.Now()
	ph.queue = g.start.Sub(queued)
	ph.infer = finished.Sub(g.start)
	ph.rows, ph.batch, ph.leader = j.rows, g.exec.rows, g.leader

	resp := &inference.ModelInferResponse{ModelName: m.Name, ModelVersion: modelVersion, Id: req.Id}
	if IsDetector(m.Name) {
		for _, o := range detectorOutputs(j, digest, frame) {
			resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape})
			resp.RawOutputContents = append(resp.RawOutputContents, o.Data)
		}
		ph.output = time.Since(finished)
		return resp, ph, nil
	}
	if m.MaxBatch > 0 {
		out := j.rowOut
		for _, o := range j.outputs {
			resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{
				Name: o.name, Datatype: rowDatatype, Shape: []int64{int64(j.rows), RowBytes},
			})
			if err := answer(resp, o, out); err != nil {
				return nil, ph, err
			}
		}
		ph.output = time.Since(finished)
		return resp, ph, nil
	}
	var out [outputBytes]byte
	binary.LittleEndian.PutUint64(out[0:], digest)
	binary.LittleEndian.PutUint64(out[8:], frame)
	for _, o := range j.outputs {
		resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{
			Name: o.name, Datatype: outputDatatype, Shape: []int64{2},
		})
		if err := answer(resp, o, out[:]); err != nil {
			return nil, ph, err
		}
	}
	ph.output = time.Since(finished)
	return resp, ph, nil
}

// answer places an output's bytes: in raw_output_contents, or in its
// shared-memory region with an empty raw entry, as Triton answers one, so that
// raw_output_contents[i] still belongs to outputs[i].
func answer(resp *inference.ModelInferResponse, o *output, data []byte) error {
	if o.region == nil {
		resp.RawOutputContents = append(resp.RawOutputContents, data)
		return nil
	}
	if err := writeShared(o.data, data); err != nil {
		return err
	}
	resp.RawOutputContents = append(resp.RawOutputContents, []byte{})
	return nil
}

// meanFactor is the mean of ExecTime's factor: a row of a request that came
// with several rows takes Exec × meanFactor.
const meanFactor = (minFactor + maxFactor) / 2

// prepare checks the request as Triton does and resolves every tensor's bytes.
func (s *Server) prepare(j *job, m *model, req *inference.ModelInferRequest) error {
	// Triton's rule (src/grpc/infer_handler.cc, InferGRPCToInput): an input
	// in shared memory takes no raw entry; every other input takes its
	// contents, or else the next raw entry in input order; contents beside raw
	// entries are refused; entries left over are ignored.
	raw, next := req.RawInputContents, 0
	for _, in := range req.Inputs {
		sh, err := shmParams(in.Name, in.Parameters)
		if err != nil {
			return err
		}
		var data []byte
		switch {
		case sh.region != "" && in.Contents != nil:
			return status.Errorf(codes.InvalidArgument,
				"unexpected 'content' provided when using shared memory for input tensor '%s' for model '%s'", in.Name, m.Name)
		case sh.region != "":
			if data, err = s.sharedSlice(j, in.Name, sh); err != nil {
				return err
			}
		case in.Contents != nil && len(raw) != 0:
			return status.Errorf(codes.InvalidArgument,
				"contents field must not be specified when using raw_input_contents for '%s' for model '%s'", in.Name, m.Name)
		case in.Contents != nil:
			// Deterministic encoding: the same contents always hash the same.
			if data, err = (proto.MarshalOptions{Deterministic: true}).Marshal(in.Contents); err != nil {
				return status.Errorf(codes.InvalidArgument, "input '%s': %v", in.Name, err)
			}
		case next < len(raw):
			data = raw[next]
			next++
		default:
			return status.Errorf(codes.InvalidArgument,
				"unable to find data for input tensor '%s' for model '%s' in request.", in.Name, m.Name)
		}
		if in.Contents == nil {
			if err := checkByteSize(m.Name, in, len(data)); err != nil {
				return err
			}
		}
		j.names = append(j.names, in.Name)
		j.inputs = append(j.inputs, data)
	}
	j.rows = 1
	if IsDetector(m.Name) {
		return prepareDetector(j, m, req)
	}
	outBytes := uint64(outputBytes)
	if m.MaxBatch > 0 {
		if err := splitRows(j, m, req); err != nil {
			return err
		}
		outBytes = uint64(RowBytes * j.rows)
	}
	if len(req.Outputs) == 0 {
		j.outputs = []*output{{name: OutputName}}
		return nil
	}
	for _, o := range req.Outputs {
		if o.Name != OutputName {
			return status.Errorf(codes.InvalidArgument, "unexpected inference output '%s' for model '%s' (it has only %s)", o.Name, m.Name, OutputName)
		}
		sh, err := shmParams(o.Name, o.Parameters)
		if err != nil {
			return err
		}
		out := &output{name: o.Name}
		if sh.region != "" {
			if sh.size < outBytes {
				return status.Errorf(codes.InvalidArgument,
					"shared memory size specified with the request for output '%s' (%d bytes) should be at least %d bytes to hold the results",
					o.Name, sh.size, outBytes)
			}
			if out.data, err = s.sharedSlice(j, o.Name, sh); err != nil {
				return err
			}
			out.data = out.data[:outBytes]
			out.region = j.regions[len(j.regions)-1]
		}
		j.outputs = append(j.outputs, out)
	}
	return nil
}

// elemSize is the byte size of an element of Triton's fixed-size datatypes.
var elemSize = map[string]uint64{
	"BOOL": 1, "UINT8": 1, "INT8": 1,
	"UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2,
	"UINT32": 4, "INT32": 4, "FP32": 4,
	"UINT64": 8, "INT64": 8, "FP64": 8,
}

// checkByteSize compares a tensor's bytes with its datatype and shape, as Triton
// does. BYTES tensors (length-prefixed strings) and datatypes the mock does not know
// are not checked: it accepts any input.
func checkByteSize(model string, in *inference.ModelInferRequest_InferInputTensor, n int) error {
	size, ok := elemSize[in.Datatype]
	if !ok {
		return nil
	}
	want := size
	for _, d := range in.Shape {
		if d < 0 {
			return status.Errorf(codes.InvalidArgument, "input '%s' for model '%s' has a negative dimension in shape %v", in.Name, model, in.Shape)
		}
		if d != 0 && want > (1<<63)/uint64(d) {
			return status.Errorf(codes.InvalidArgument, "input '%s' for model '%s': shape %v is too large", in.Name, model, in.Shape)
		}
		want *= uint64(d)
	}
	if uint64(n) != want {
		return status.Errorf(codes.InvalidArgument,
			"unexpected total byte size %d for input '%s' for model '%s', expecting %d (%s, shape %v)", n, in.Name, model, want, in.Datatype, in.Shape)
	}
	return nil
}

// shmRef is a tensor's shared-memory reference.
type shmRef struct {
	region       string
	offset, size uint64
}

// shmParams reads shared_memory_region/_byte_size/_offset with Triton's rules: the
// region is a string, the size an int64 required with a region, the offset an
// optional int64; a size or offset without a region is an error.
func shmParams(tensor string, params map[string]*inference.InferParameter) (shmRef, error) {
	var ref shmRef
	var hasSize, hasOffset bool
	for key, p := range params {
		switch key {
		case paramRegion:
			v, ok := p.GetParameterChoice().(*inference.InferParameter_StringParam)
			if !ok {
				return ref, status.Errorf(codes.InvalidArgument, "invalid value type for '%s' of tensor '%s': expected string_param", key, tensor)
			}
			ref.region = v.StringParam
		case paramByteSize, paramOffset:
			v, ok := p.GetParameterChoice().(*inference.InferParameter_Int64Param)
			if !ok {
				return ref, status.Errorf(codes.InvalidArgument, "invalid value type for '%s' of tensor '%s': expected int64_param", key, tensor)
			}
			if v.Int64Param < 0 {
				return ref, status.Errorf(codes.InvalidArgument, "'%s' of tensor '%s' is negative (%d)", key, tensor, v.Int64Param)
			}
			if key == paramByteSize {
				ref.size, hasSize = uint64(v.Int64Param), true
			} else {
				ref.offset, hasOffset = uint64(v.Int64Param), true
			}
		}
	}
	switch {
	case ref.region == "" && (hasSize || hasOffset):
		return ref, status.Errorf(codes.InvalidArgument,
			"'%s' or '%s' given without '%s' for tensor '%s'", paramByteSize, paramOffset, paramRegion, tensor)
	case ref.region != "" && !hasSize:
		return ref, status.Errorf(codes.InvalidArgument,
			"'%s' is required with '%s' for tensor '%s'", paramByteSize, paramRegion, tensor)
	}
	return ref, nil
}

// sharedSlice acquires the region (held until the job ends) and checks the bounds.
func (s *Server) sharedSlice(j *job, tensor string, ref shmRef) ([]byte, error) {
	reg, err := s.shm.acquire(ref.region)
	if err != nil {
		return nil, err
	}
	j.regions = append(j.regions, reg)
	return reg.slice(tensor, ref.offset, ref.size)
}

// Digest is OUTPUT0[0] of a request whose input tensors hold the given bytes, in
// order: FNV-1a (64 bit) over each input's length and CRC-32C. CRC-32C runs at
// memory speed (hardware instructions on amd64 and arm64), so a 6 MB frame costs the
// mock well under a millisecond of CPU instead of the ~6 ms of a byte-wise hash.
func Digest(inputs [][]byte) uint64 {
	h := uint64(fnvOffset)
	for _, b := range inputs {
		h = fnvUint64(h, uint64(len(b)))
		h = fnvUint64(h, uint64(crc32.Checksum(b, castagnoli)))
	}
	return h
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// digestInputs is Digest, with a fault in a shared-memory mapping (the owner shrank
// the object under us: SIGBUS) turned into an error instead of a crash.
func digestInputs(j *job) (d uint64, err error) {
	if len(j.regions) == 0 {
		return Digest(j.inputs), nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "reading inputs from shared memory: %v (was the object truncated?)", r)
		}
	}()
	return Digest(j.inputs), nil
}

// writeShared copies an output into a region with the same fault protection.
func writeShared(dst, src []byte) error {
	return readShared("writing output to", func() { copy(dst, src) })
}

// readShared runs f, which touches shared memory, with a fault turned into an
// error saying what it was doing.
func readShared(doing string, f func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "%s shared memory: %v (was the object truncated?)", doing, r)
		}
	}()
	f()
	return nil
}

// splitRows reads a batching model's batch size, the first dimension every input
// must share, and splits each input's bytes into its rows, as Triton checks and
// batches them: fixed-size datatypes by bytes, BYTES by their length-prefixed
// elements.
func splitRows(j *job, m *model, req *inference.ModelInferRequest) error {
	if len(req.Inputs) == 0 {
		return status.Errorf(codes.InvalidArgument, "inference request to model '%s' has no inputs: a batching model reads its batch size from the inputs' first dimension", m.Name)
	}
	b := int64(-1)
	for _, in := range req.Inputs {
		if len(in.Shape) == 0 {
			return status.Errorf(codes.InvalidArgument,
				"input '%s' for model '%s' has shape []: the model has max_batch_size %d, so every input's first dimension is the batch size (send [1, …] for one frame)", in.Name, m.Name, m.MaxBatch)
		}
		if in.Contents != nil {
			return status.Errorf(codes.InvalidArgument,
				"input '%s' for model '%s': the mock's batching models read raw_input_contents or shared memory; send the tensor as raw bytes", in.Name, m.Name)
		}
		switch d := in.Shape[0]; {
		case d < 1:
			return status.Errorf(codes.InvalidArgument, "inference request batch-size must be >= 1 for '%s' (input '%s' has shape %v)", m.Name, in.Name, in.Shape)
		case d > int64(m.MaxBatch):
			return status.Errorf(codes.InvalidArgument, "inference request batch-size must be <= %d for '%s'", m.MaxBatch, m.Name)
		case b >= 0 && d != b:
			return status.Errorf(codes.InvalidArgument,
				"input '%s' for model '%s' has batch size %d, another input %d: every input's first dimension is the same batch size", in.Name, m.Name, d, b)
		default:
			b = d
		}
	}
	j.rows = int(b)
	j.split = make([][][]byte, j.rows)
	for i := range j.split {
		j.split[i] = make([][]byte, len(j.inputs))
	}
	for k, in := range req.Inputs {
		rows, err := rowsOf(j.inputs[k], in, j.rows)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "input '%s' for model '%s': %v", in.Name, m.Name, err)
		}
		for i, r := range rows {
			j.split[i][k] = r
		}
	}
	return nil
}

// rowsOf splits one input's bytes into its b rows.
func rowsOf(data []byte, in *inference.ModelInferRequest_InferInputTensor, b int) ([][]byte, error) {
	out := make([][]byte, b)
	if in.Datatype != "BYTES" {
		if len(data)%b != 0 {
			return nil, fmt.Errorf("%d bytes do not split into %d rows", len(data), b)
		}
		n := len(data) / b
		for i := range out {
			out[i] = data[i*n : (i+1)*n]
		}
		return out, nil
	}
	elems := int64(1)
	for _, d := range in.Shape {
		if d < 0 || d > 1<<31 || elems*d > 1<<31 {
			return nil, fmt.Errorf("shape %v is not a BYTES tensor the mock splits", in.Shape)
		}
		elems *= d
	}
	per, off := elems/int64(b), 0
	for i := range out {
		start := off
		for range per {
			if len(data)-off < 4 {
				return nil, fmt.Errorf("BYTES element at byte %d: want a 4-byte length prefix", off)
			}
			n := int(binary.LittleEndian.Uint32(data[off:]))
			if n > len(data)-off-4 {
				return nil, fmt.Errorf("BYTES element at byte %d: length %d runs past the tensor's %d bytes", off, n, len(data))
			}
			off += 4 + n
		}
		out[i] = data[start:off]
	}
	if off != len(data) {
		return nil, fmt.Errorf("BYTES tensor of shape %v has %d bytes after its %d elements", in.Shape, len(data)-off, elems)
	}
	return out, nil
}

// RowOutput is a batching model's OUTPUT0 row for an input row (one slice per
// input tensor, in request order): Digest(row) and FNV-1a over the row's bytes,
// 8 bytes each, little endian. It depends on that row alone, so a client can
// recompute it and tell whether it got its own frame's answer.
func RowOutput(row [][]byte) []byte {
	out := make([]byte, RowBytes)
	binary.LittleEndian.PutUint64(out, Digest(row))
	h := uint64(fnvOffset)
	for _, b := range row {
		h = fnvUint64(h, uint64(len(b)))
		h = fnvBytes(h, b)
	}
	binary.LittleEndian.PutUint64(out[8:], h)
	return out
}
