package restfront

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/vig-edge/vig/proto/inference"
)

// The infer request of Triton's HTTP/REST protocol (KServe v2 with Triton's
// binary tensor data extension), turned into the ModelInferRequest a gRPC client
// would have sent:
//
//	body = JSON header [ binary tensor data ]
//
// The header's length is the Inference-Header-Content-Length header when binary
// data follows, else the whole body. An input with parameter binary_data_size N
// takes the next N bytes of the binary part, in input order; those bytes become
// its raw_input_contents entry as they are (a view of the body: no copy, no
// conversion). An input with a JSON "data" array is converted once into the same
// little-endian bytes. The HTTP-only parameters (binary_data_size, binary_data,
// binary_data_output) are consumed here; every other parameter is forwarded
// (vig's own, vig_stream and vig_capture_ns, are read and removed by the gateway
// as for a gRPC client).

// Parameter names of the binary tensor data extension.
const (
	paramBinarySize   = "binary_data_size"
	paramBinary       = "binary_data"
	paramBinaryOutput = "binary_data_output"
)

// jsonRequest is the JSON header of an infer request.
type jsonRequest struct {
	ID         string                     `json:"id"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Inputs     []jsonInput                `json:"inputs"`
	Outputs    []jsonOutput               `json:"outputs"`
}

type jsonInput struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   string                     `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Data       json.RawMessage            `json:"data"`
}

type jsonOutput struct {
	Name       string                     `json:"name"`
	Parameters map[string]json.RawMessage `json:"parameters"`
}

// inferRequest is a parsed infer request: the message for the gateway, and what
// the answer needs to know (which outputs the client wants in binary).
type inferRequest struct {
	msg mem.BufferSlice
	// binaryOut: the outputs whose binary_data parameter says how to answer
	// them; allBinary (binary_data_output): every other output.
	binaryOut map[string]bool
	allBinary bool
	// shmOut: requested outputs written to shared memory, with their parameters.
	shmOut map[string]map[string]*pb.InferParameter
}

// errRequest is an error in the client's request (HTTP 400).
type errRequest struct{ msg string }

func (e *errRequest) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &errRequest{fmt.Sprintf(format, args...)}
}

// parseInfer reads an infer request for model (and version) from body. headerLen
// is the Inference-Header-Content-Length, -1 when absent. The tensor bytes of
// the result view body, which must stay unmodified until the call is answered;
// when root holds body (a pooled buffer), they are views of root, each with its
// own reference, so that the buffer returns to its pool once the message is
// freed.
func parseInfer(model, version string, body []byte, headerLen int, root mem.Buffer) (*inferRequest, error) {
	src := &bodySrc{b: body, n: len(body)}
	if root != nil {
		src.bufs = []mem.Buffer{root}
	}
	return parseInferSrc(model, version, src, headerLen)
}

// parseInferSrc is parseInfer of a body as read (bodySrc): the JSON header is
// read from contiguous bytes (copied only when it spans the body's buffers);
// binary tensors are views of the body's buffers, never copied.
func parseInferSrc(model, version string, src *bodySrc, headerLen int) (*inferRequest, error) {
	if headerLen < 0 {
		headerLen = src.n
	}
	if headerLen > src.n {
		return nil, badRequest("Inference-Header-Content-Length %d is larger than the %d-byte body", headerLen, src.n)
	}
	header := src.contiguous(0, headerLen)
	var req jsonRequest
	if err := decodeRequest(header, &req); err != nil {
		return nil, badRequest("failed to parse the request JSON header (is Inference-Header-Content-Length right?): %v", err)
	}
	if len(req.Inputs) == 0 {
		return nil, badRequest("the request has no inputs")
	}
	if len(req.Inputs)+len(req.Outputs) > maxTensors {
		return nil, badRequest("the request has more than %d tensors", maxTensors)
	}
	out := &inferRequest{binaryOut: map[string]bool{}}
	m := &pb.ModelInferRequest{ModelName: model, ModelVersion: version, Id: req.ID}
	var err error
	if m.Parameters, err = convertParams(req.Parameters, "request", func(k string, v json.RawMessage) (bool, error) {
		if k != paramBinaryOutput {
			return false, nil
		}
		b, err := boolParam(k, v)
		out.allBinary = b
		return true, err
	}); err != nil {
		return nil, err
	}
	// Triton's gRPC takes sequence_id as int64_param or string_param; its
	// correlation id is a uint64, set from the int64's bits: an id above
	// 2^63-1 goes as the int64 of the same bits, which Triton reads back.
	if p, ok := m.Parameters["sequence_id"]; ok {
		if u, ok := p.ParameterChoice.(*pb.InferParameter_Uint64Param); ok {
			p.ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: int64(u.Uint64Param)}
		}
	}

	binOff, binLeft := headerLen, int64(src.n-headerLen) // the binary part not yet taken
	raws := make([]entry, len(req.Inputs))
	var conv []byte // the converted JSON tensors, one after the other
	type span struct {
		lo, hi int
		ok     bool
	}
	convSpans := make([]span, len(req.Inputs))
	inShm := make([]bool, len(req.Inputs))
	for i := range req.Inputs {
		in := &req.Inputs[i]
		if in.Name == "" {
			return nil, badRequest("input %d has no name", i)
		}
		if _, ok := elemSize(in.Datatype); !ok {
			return nil, badRequest("input '%s': unknown datatype %q", in.Name, in.Datatype)
		}
		n, err := elements(in.Shape)
		if err != nil {
			return nil, badRequest("input '%s': %v", in.Name, err)
		}
		binSize := int64(-1)
		shm := false
		t := &pb.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
		if t.Parameters, err = convertParams(in.Parameters, "input '"+in.Name+"'", func(k string, v json.RawMessage) (bool, error) {
			switch k {
			case paramBinarySize:
				v, err := intParam(k, v)
				if err != nil || v < 0 {
					return true, badRequest("input '%s': %s must be a non-negative integer", in.Name, k)
				}
				binSize = v
				return true, nil
			case "shared_memory_region":
				shm = true
			}
			return false, nil
		}); err != nil {
			return nil, err
		}
		hasData := len(in.Data) > 0
		switch {
		case string(in.Data) == "null":
			return nil, badRequest("input '%s': 'data' is null: give an array, or no 'data' with binary_data_size or a shared-memory region", in.Name)
		case binSize >= 0 && hasData:
			return nil, badRequest("input '%s' has both 'data' and the binary_data_size parameter", in.Name)
		case shm && (binSize >= 0 || hasData):
			return nil, badRequest("input '%s' names a shared-memory region and also carries data", in.Name)
		case binSize >= 0:
			if binSize > binLeft {
				return nil, badRequest("input '%s': binary_data_size %d is past the end of the body (%d bytes of binary data left)", in.Name, binSize, binLeft)
			}
			raws[i] = entry{off: binOff, n: int(binSize)}
			binOff += int(binSize)
			binLeft -= binSize
		case hasData:
			lo := len(conv)
			var got int64
			if conv, got, err = encodeData(conv, in.Datatype, in.Data, n); err != nil {
				return nil, badRequest("input '%s': %v", in.Name, err)
			}
			if got != n {
				return nil, badRequest("input '%s': 'data' has %d elements, but shape %v needs %d (Shape does not match true shape of 'data' field)", in.Name, got, in.Shape, n)
			}
			convSpans[i] = span{lo, len(conv), true}
		case shm:
			inShm[i] = true
		default:
			return nil, badRequest("input '%s' has no 'data', no binary_data_size and no shared-memory region", in.Name)
		}
		m.Inputs = append(m.Inputs, t)
	}
	if binLeft > 0 {
		return nil, badRequest("%d bytes of binary data after the last input's (check the inputs' binary_data_size and Inference-Header-Content-Length)", binLeft)
	}
	for i := range convSpans {
		if s := convSpans[i]; s.ok {
			raws[i] = entry{off: -1, b: conv[s.lo:s.hi:s.hi]}
		}
	}
	for i := range req.Outputs {
		o := &req.Outputs[i]
		if o.Name == "" {
			return nil, badRequest("output %d has no name", i)
		}
		t := &pb.ModelInferRequest_InferRequestedOutputTensor{Name: o.Name}
		binary, set := false, false
		if t.Parameters, err = convertParams(o.Parameters, "output '"+o.Name+"'", func(k string, v json.RawMessage) (bool, error) {
			if k != paramBinary {
				return false, nil
			}
			var err error
			binary, err = boolParam(k, v)
			set = true
			return true, err
		}); err != nil {
			return nil, err
		}
		if set { // else binary_data_output decides, as for outputs not named
			out.binaryOut[o.Name] = binary
		}
		if _, ok := t.Parameters["shared_memory_region"]; ok && binary {
			return nil, badRequest("output '%s' names a shared-memory region and asks for binary_data: it is written to one place, ask for one", o.Name)
		}
		if _, ok := t.Parameters["shared_memory_region"]; ok {
			if out.shmOut == nil {
				out.shmOut = map[string]map[string]*pb.InferParameter{}
			}
			out.shmOut[o.Name] = t.Parameters
		}
		m.Outputs = append(m.Outputs, t)
	}
	// Triton's rule: an input in shared memory takes no raw_input_contents
	// entry; the others take one each, in input order.
	k := 0
	for i := range raws {
		if !inShm[i] {
			raws[k] = raws[i]
			k++
		}
	}
	out.msg, err = encode(m, raws[:k], src)
	return out, err
}

// entry is a raw_input_contents entry: n bytes of the body at off, or, when
// off is -1, b (converted JSON data).
type entry struct {
	off, n int
	b      []byte
}

func (e entry) len() int {
	if e.off < 0 {
		return len(e.b)
	}
	return e.n
}

// bodySrc is a request body as read: the buffers it arrived in (each a
// pooled buffer the caller frees), or b alone.
type bodySrc struct {
	bufs []mem.Buffer // nil: b
	b    []byte       // the whole body, when it is one buffer or plain
	n    int
}

// contiguous returns the body's bytes [off, off+n) as one slice: a view when
// they lie in one buffer, else a copy.
func (s *bodySrc) contiguous(off, n int) []byte {
	if s.bufs == nil || len(s.bufs) == 1 {
		return s.b[off : off+n : off+n]
	}
	out := make([]byte, 0, n)
	for _, v := range s.view(off, n) {
		out = append(out, v.ReadOnlyData()...)
		v.Free()
	}
	return out
}

// view returns the body's bytes [off, off+n) as views of its buffers, each
// with its own reference.
func (s *bodySrc) view(off, n int) mem.BufferSlice {
	if s.bufs == nil {
		return mem.BufferSlice{mem.SliceBuffer(s.b[off : off+n : off+n])}
	}
	var out mem.BufferSlice
	pos := 0
	for _, b := range s.bufs {
		l := b.Len()
		lo, hi := max(off-pos, 0), min(off+n-pos, l)
		if lo < hi {
			out = append(out, b.Slice(lo, hi))
		}
		pos += l
		if pos >= off+n {
			break
		}
	}
	return out
}

// bytes returns the whole body as one slice (copied once when it came in
// several buffers).
func (s *bodySrc) bytes() []byte { return s.contiguous(0, s.n) }

// reader reads the body's bytes in order.
func (s *bodySrc) reader() io.Reader {
	if s.bufs == nil {
		return bytes.NewReader(s.b)
	}
	rs := make([]io.Reader, len(s.bufs))
	for i, b := range s.bufs {
		rs[i] = bytes.NewReader(b.ReadOnlyData())
	}
	return io.MultiReader(rs...)
}

// free returns the body's buffers to their pools.
func (s *bodySrc) free() {
	for _, b := range s.bufs {
		b.Free()
	}
	s.bufs = nil
}

// maxTensors bounds the tensors of one request (as wire's parser does).
const maxTensors = 4096

// encode marshals m and appends raws as its raw_input_contents: the tensor
// bytes are views of the body (src), not copies.
func encode(m *pb.ModelInferRequest, raws []entry, src *bodySrc) (mem.BufferSlice, error) {
	head, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, badRequest("encoding the request: %v", err)
	}
	if len(raws) == 0 {
		return mem.BufferSlice{mem.SliceBuffer(head)}, nil
	}
	// The small tag and length prefixes go into one buffer after the header, so
	// that the message is header, then prefix and tensor for each input.
	ends := make([]int, len(raws))
	for i, r := range raws {
		head = protowire.AppendTag(head, 7, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(r.len()))
		ends[i] = len(head)
	}
	msg := make(mem.BufferSlice, 0, 2*len(raws))
	lo := 0
	hi := ends[0]
	for i, r := range raws {
		msg = append(msg, mem.SliceBuffer(head[lo:hi]))
		switch {
		case r.len() == 0:
		case r.off >= 0:
			msg = append(msg, src.view(r.off, r.n)...)
		default:
			msg = append(msg, mem.SliceBuffer(r.b))
		}
		if i+1 < len(raws) {
			lo, hi = ends[i], ends[i+1]
		}
	}
	return msg, nil
}

// convertParams turns a JSON parameters object into Triton parameters; take
// consumes the keys of the HTTP protocol itself (returning true).
func convertParams(ps map[string]json.RawMessage, what string, take func(k string, v json.RawMessage) (bool, error)) (map[string]*pb.InferParameter, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(ps))
	for k := range ps {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out map[string]*pb.InferParameter
	for _, k := range keys {
		v := ps[k]
		if done, err := take(k, v); err != nil {
			var e *errRequest
			if errors.As(err, &e) {
				return nil, err
			}
			return nil, badRequest("%s: %v", what, err)
		} else if done {
			continue
		}
		p, err := jsonParam(v)
		if err != nil {
			return nil, badRequest("%s parameter '%s': %v", what, k, err)
		}
		if out == nil {
			out = map[string]*pb.InferParameter{}
		}
		out[k] = p
	}
	return out, nil
}

// jsonParam converts one JSON parameter value: a boolean, a string, an integer
// (int64_param; uint64_param above the int64 range) or another number
// (double_param).
func jsonParam(v json.RawMessage) (*pb.InferParameter, error) {
	s := string(bytes.TrimSpace(v))
	switch {
	case s == "true" || s == "false":
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: s == "true"}}, nil
	case len(s) > 0 && s[0] == '"':
		var str string
		if err := json.Unmarshal(v, &str); err != nil {
			return nil, err
		}
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: str}}, nil
	case len(s) > 0 && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')):
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: i}}, nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: u}}, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, fmt.Errorf("number %s is out of range", s)
		}
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: f}}, nil
	}
	return nil, fmt.Errorf("must be a boolean, a number or a string, not %.40s", s)
}

func boolParam(k string, v json.RawMessage) (bool, error) {
	switch string(bytes.TrimSpace(v)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badRequest("parameter %s must be true or false", k)
}

func intParam(k string, v json.RawMessage) (int64, error) {
	i, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	if err != nil {
		return 0, badRequest("parameter %s must be an integer", k)
	}
	return i, nil
}

// forwardHeaders adds the request headers whose names match
// Options.ForwardHeaders to the message as string parameters, as Triton's
// HTTP server does with --http-header-forward-pattern. Names are lower case
// (as gRPC metadata keys are); several values of one header are joined by
// ", ". The entries go first: a parameter of the same name in the JSON
// header comes later and wins.
func (f *Frontend) forwardHeaders(r *http.Request, req *inferRequest) error {
	re := f.opts.ForwardHeaders
	if re == nil {
		return nil
	}
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		if re.MatchString(strings.ToLower(name)) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	var b []byte
	for _, name := range names {
		key, val := strings.ToLower(name), strings.Join(r.Header[name], ", ")
		if !utf8.ValidString(val) {
			return badRequest("header %s is forwarded to the backend as a string parameter and must be UTF-8", name)
		}
		var p []byte
		p = protowire.AppendTag(p, 3, protowire.BytesType)
		p = protowire.AppendString(p, val)
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, key)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendBytes(e, p)
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	req.msg = append(mem.BufferSlice{mem.SliceBuffer(b)}, req.msg...)
	return nil
}

// decodeRequest decodes the JSON header of an infer request with its member
// names matched exactly, as Triton's parser matches them: encoding/json
// matches them regardless of case ("Inputs" would be taken for "inputs",
// which Triton ignores). The header is decoded once by encoding/json, unless
// a string in it equals a member name under case folding without being it:
// then it is decoded member by member, taking exact names only.
func decodeRequest(b []byte, req *jsonRequest) error {
	if !foldedName(b) {
		return json.Unmarshal(b, req)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return err
	}
	*req = jsonRequest{}
	var ins, outs []map[string]json.RawMessage
	for _, f := range []struct {
		key string
		dst any
	}{{"id", &req.ID}, {"parameters", &req.Parameters}, {"inputs", &ins}, {"outputs", &outs}} {
		if v, ok := top[f.key]; ok {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return fmt.Errorf("%q: %w", f.key, err)
			}
		}
	}
	for i, in := range ins {
		var t jsonInput
		for _, f := range []struct {
			key string
			dst any
		}{{"name", &t.Name}, {"shape", &t.Shape}, {"datatype", &t.Datatype}, {"parameters", &t.Parameters}, {"data", &t.Data}} {
			if v, ok := in[f.key]; ok {
				if err := json.Unmarshal(v, f.dst); err != nil {
					return fmt.Errorf("input %d %q: %w", i, f.key, err)
				}
			}
		}
		req.Inputs = append(req.Inputs, t)
	}
	for i, out := range outs {
		var t jsonOutput
		for _, f := range []struct {
			key string
			dst any
		}{{"name", &t.Name}, {"parameters", &t.Parameters}} {
			if v, ok := out[f.key]; ok {
				if err := json.Unmarshal(v, f.dst); err != nil {
					return fmt.Errorf("output %d %q: %w", i, f.key, err)
				}
			}
		}
		req.Outputs = append(req.Outputs, t)
	}
	return nil
}

// requestNames are the member names of the infer request's objects.
var requestNames = []string{"id", "parameters", "inputs", "outputs", "name", "shape", "datatype", "data"}

// foldedName reports whether a JSON string in b equals one of requestNames
// under case folding but not exactly. One pass over the bytes; a string with
// an escape is decoded first (encoding/json matches the decoded name).
func foldedName(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		start, esc := i, false
		for i++; i < len(b) && b[i] != '"'; i++ {
			if b[i] == '\\' {
				esc = true
				i++
			}
		}
		if i >= len(b) {
			return false
		}
		if i-start-1 > 40 {
			continue // longer than any name, however folded
		}
		name := b[start+1 : i]
		if esc {
			var s string
			if json.Unmarshal(b[start:i+1], &s) != nil {
				continue
			}
			name = []byte(s)
		}
		for _, k := range requestNames {
			if string(name) != k && bytes.EqualFold(name, []byte(k)) {
				return true
			}
		}
	}
	return false
}

// exactUnmarshal decodes the JSON object b into the struct v points to with
// member names matched exactly, as Triton's parser matches them (encoding/json
// alone matches them regardless of case); members of other names are
// ignored. Nested structs (and pointers to them) are decoded the same way.
func exactUnmarshal(b []byte, v any) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return err
	}
	rv := reflect.ValueOf(v).Elem()
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		raw, ok := members[name]
		if name == "" || !ok {
			continue
		}
		f := rv.Field(i)
		st := f.Type()
		if st.Kind() == reflect.Pointer {
			st = st.Elem()
		}
		if st.Kind() != reflect.Struct || string(bytes.TrimSpace(raw)) == "null" {
			if err := json.Unmarshal(raw, f.Addr().Interface()); err != nil {
				return fmt.Errorf("%q: %w", name, err)
			}
			continue
		}
		p := reflect.New(st)
		if err := exactUnmarshal(raw, p.Interface()); err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
		if f.Kind() == reflect.Pointer {
			f.Set(p)
		} else {
			f.Set(p.Elem())
		}
	}
	return nil
}
