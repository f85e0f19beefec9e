package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Parameter names vig reads. vig's own (prefix vig_) are removed before a request is
// forwarded; Triton's are forwarded untouched.
const (
	ParamStream        = "vig_stream"     // stream id; default: the model name
	ParamCapture       = "vig_capture_ns" // capture time of the frame (int64 or uint64 ns)
	vigPrefix          = "vig_"
	ParamPriority      = "priority"
	ParamTimeout       = "timeout"
	ParamShmRegion     = "shared_memory_region"
	ParamShmOffset     = "shared_memory_offset"
	ParamShmByteSize   = "shared_memory_byte_size"
	maxTensorsPerInfer = 4096
)

// ParamKind is the oneof case of a Triton InferParameter.
type ParamKind uint8

const (
	ParamNone ParamKind = iota
	ParamBool
	ParamInt64
	ParamString
	ParamDouble
	ParamUint64
)

// Param is one entry of a Triton parameters map. Key and Str view the request's
// buffers: valid only while the request frame is held.
type Param struct {
	Key    []byte
	Kind   ParamKind
	Bool   bool
	Int    int64
	Uint   uint64
	Double float64
	Str    []byte

	start, end int // byte range of the whole map entry field in the message
}

// Span is a byte range of a message: Len bytes at absolute offset Off.
type Span struct{ Off, Len int }

// Slice returns the span's bytes of msg as views of its buffers (each with its own
// reference, released by whoever sends or frees the result).
func (s Span) Slice(msg mem.BufferSlice) mem.BufferSlice {
	var out mem.BufferSlice
	pos := 0
	for _, b := range msg {
		n := b.Len()
		lo, hi := max(s.Off-pos, 0), min(s.Off+s.Len-pos, n)
		if lo < hi {
			out = append(out, b.Slice(lo, hi))
		}
		pos += n
		if pos >= s.Off+s.Len {
			break
		}
	}
	return out
}

// Tensor is what vig reads of an input or requested output tensor.
type Tensor struct {
	Name, Datatype []byte
	Shape          []int64 // inputs only: the dimensions as sent (negative ones included)
	Params         []Param
	HasContents    bool // InferTensorContents present (not raw)
}

// InferHeader is what vig reads of a ModelInferRequest: everything but the tensor
// data. Byte slices view the request's buffers and are valid while it is held.
type InferHeader struct {
	Model, Version, ID []byte
	Params             []Param
	Inputs, Outputs    []Tensor
	RawInputs          int    // number of raw_input_contents entries
	RawBytes           int    // their total size
	Raw                []Span // where each raw_input_contents entry's bytes lie in the message
	Size               int    // size of the whole message

	Stream     []byte // vig_stream, else Model
	Capture    int64  // vig_capture_ns; valid when HasCapture
	HasCapture bool

	Shm bool // some tensor names a shared-memory region

	cur cursor
}

// ParseInfer reads the header of a ModelInferRequest without touching its tensor
// data, and checks the rules every Triton server enforces. The error is meant for the
// client (it becomes INVALID_ARGUMENT).
func (h *InferHeader) ParseInfer(msg mem.BufferSlice) error {
	if _, err := h.parse(msg, msg.Len(), false); err != nil {
		return err
	}
	if err := h.check(); err != nil {
		return err
	}
	return h.checkRaw(h.RawInputs)
}

// ParseInferHead reads the head of a ModelInferRequest of total bytes that is
// still arriving (got holds its first bytes): every field before its first
// raw_input_contents, which protobuf encoders write last, field 7 being the
// highest. It reports where that field begins, or ok false when got does not
// hold the whole head yet (or the head breaks a rule, or there is no raw field
// in got: ParseInfer of the whole message says which). The bytes from head on
// are then checked as they arrive with RawScan. The header's RawInputs,
// RawBytes and Raw stay empty until RawScan.Fill.
func (h *InferHeader) ParseInferHead(got mem.BufferSlice, total int) (head int, ok bool) {
	head, err := h.parse(got, total, true)
	if err != nil || head < 0 || h.check() != nil {
		return 0, false
	}
	return head, true
}

// parse reads the fields of a message of total bytes from msg; with head, it
// stops at the first raw_input_contents and reports its offset (-1: none in msg).
func (h *InferHeader) parse(msg mem.BufferSlice, total int, head bool) (int, error) {
	h.Reset()
	c := &h.cur
	c.reset(msg, c.arena)
	h.Size = total
	for !c.done() {
		start := c.pos
		num, typ, n, err := c.field(h.Size)
		if err != nil {
			return 0, err
		}
		if head && num == 7 && typ == protowire.BytesType {
			return start, nil
		}
		// A known field with another wire type is an unknown field to protobuf
		// libraries, and so to vig: skipped, and forwarded.
		if typ != protowire.BytesType {
			if err := c.skipValue(num, typ); err != nil {
				return 0, err
			}
			continue
		}
		switch num {
		case 1, 2, 3:
			b, err := c.takeString(n)
			if err != nil {
				return 0, err
			}
			switch num {
			case 1:
				h.Model = b
			case 2:
				h.Version = b
			default:
				h.ID = b
			}
		case 4:
			b, err := c.take(n)
			if err != nil {
				return 0, err
			}
			p, err := parseParamEntry(b)
			if err != nil {
				return 0, fmt.Errorf("request parameter: %w", err)
			}
			p.start, p.end = start, c.pos
			h.Params = append(h.Params, p)
		case 5, 6:
			if len(h.Inputs)+len(h.Outputs) >= maxTensorsPerInfer {
				return 0, fmt.Errorf("more than %d tensors", maxTensorsPerInfer)
			}
			t := nextTensor(&h.Inputs)
			if num == 6 {
				h.Inputs = h.Inputs[:len(h.Inputs)-1]
				t = nextTensor(&h.Outputs)
			}
			if err := h.parseTensor(t, c.pos+n, num == 5); err != nil {
				return 0, err
			}
		case 7:
			h.RawInputs++
			h.RawBytes += n
			h.Raw = append(h.Raw, Span{Off: c.pos, Len: n})
			if err := c.skip(n); err != nil {
				return 0, err
			}
		default:
			if err := c.skip(n); err != nil {
				return 0, err
			}
		}
	}
	if head {
		return -1, nil
	}
	return 0, nil
}

// Reset empties the header for reuse, keeping its storage (a frontend that fills a
// header itself, rather than parsing a message, starts here).
func (h *InferHeader) Reset() {
	h.Model, h.Version, h.ID, h.Stream = nil, nil, nil, nil
	h.Params = h.Params[:0]
	h.Inputs = h.Inputs[:0]
	h.Outputs = h.Outputs[:0]
	h.RawInputs, h.RawBytes, h.Size = 0, 0, 0
	h.Raw = h.Raw[:0]
	h.Capture, h.HasCapture = 0, false
	h.Shm = false
}

// nextTensor extends ts by one element, reusing its parameter storage.
func nextTensor(ts *[]Tensor) *Tensor {
	if len(*ts) < cap(*ts) {
		*ts = (*ts)[:len(*ts)+1]
	} else {
		*ts = append(*ts, Tensor{})
	}
	t := &(*ts)[len(*ts)-1]
	*t = Tensor{Params: t.Params[:0], Shape: t.Shape[:0]}
	return t
}

// parseTensor reads an InferInputTensor (input) or InferRequestedOutputTensor up to
// the absolute offset end. Input contents are skipped in place: they may be large.
func (h *InferHeader) parseTensor(t *Tensor, end int, input bool) error {
	c := &h.cur
	for c.pos < end {
		num, typ, n, err := c.field(end)
		if err != nil {
			return err
		}
		if typ != protowire.BytesType {
			if num == 3 && input && typ == protowire.VarintType { // an unpacked dimension
				v, err := c.varint()
				if err != nil {
					return err
				}
				t.Shape = append(t.Shape, int64(v))
				continue
			}
			if err := c.skipValue(num, typ); err != nil {
				return err
			}
			continue
		}
		switch {
		case num == 1:
			t.Name, err = c.takeString(n)
		case num == 3 && input:
			var b []byte
			if b, err = c.take(n); err == nil {
				t.Shape, err = appendPacked(t.Shape, b)
			}
		case num == 2 && input:
			t.Datatype, err = c.takeString(n)
		case (num == 4 && input) || (num == 2 && !input):
			var b []byte
			if b, err = c.take(n); err == nil {
				var p Param
				if p, err = parseParamEntry(b); err == nil {
					t.Params = append(t.Params, p)
				}
			}
		case num == 5 && input:
			t.HasContents = true
			err = c.skip(n)
		default:
			err = c.skip(n)
		}
		if err != nil {
			return err
		}
	}
	if c.pos != end {
		return ErrMalformed
	}
	return nil
}

// appendPacked appends the packed varints of b (a repeated int64 field) to dims.
func appendPacked(dims []int64, b []byte) ([]int64, error) {
	for len(b) > 0 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return dims, ErrMalformed
		}
		dims = append(dims, int64(v))
		b = b[n:]
	}
	return dims, nil
}

// parseParamEntry decodes a map<string, InferParameter> entry.
func parseParamEntry(b []byte) (Param, error) {
	var p Param
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return p, ErrMalformed
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return p, ErrMalformed
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return p, ErrMalformed
		}
		b = b[n:]
		switch num {
		case 1:
			if !utf8.Valid(v) {
				return p, errUTF8
			}
			p.Key = v
		case 2:
			if err := parseParamValue(&p, v); err != nil {
				return p, err
			}
		}
	}
	return p, nil
}

func parseParamValue(p *Param, b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		var v uint64
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			p.Str, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		if w, known := paramWireType(num); known && w != typ {
			continue // an unknown field to protobuf libraries
		}
		switch {
		case num == 1 && typ == protowire.VarintType:
			p.Kind, p.Bool = ParamBool, v != 0
		case num == 2 && typ == protowire.VarintType:
			p.Kind, p.Int = ParamInt64, int64(v)
		case num == 3 && typ == protowire.BytesType:
			if !utf8.Valid(p.Str) {
				return errUTF8
			}
			p.Kind = ParamString
		case num == 4 && typ == protowire.Fixed64Type:
			p.Kind, p.Double = ParamDouble, math.Float64frombits(v)
		case num == 5 && typ == protowire.VarintType:
			p.Kind, p.Uint = ParamUint64, v
		}
	}
	return nil
}

// paramWireType is the wire type of each InferParameter oneof case.
func paramWireType(num protowire.Number) (protowire.Type, bool) {
	switch num {
	case 1, 2, 5:
		return protowire.VarintType, true
	case 3:
		return protowire.BytesType, true
	case 4:
		return protowire.Fixed64Type, true
	}
	return 0, false
}

// check applies the rules of Triton's protocol that vig can check from the
// head (all but checkRaw's), and reads vig's own parameters.
func (h *InferHeader) check() error {
	if len(h.Model) == 0 {
		return fmt.Errorf("model_name is empty")
	}
	h.Stream = h.Model
	for i := range h.Params {
		p := &h.Params[i]
		switch string(p.Key) {
		case ParamStream:
			if p.Kind != ParamString || len(p.Str) == 0 {
				return fmt.Errorf("parameter %s must be a non-empty string_param", ParamStream)
			}
			h.Stream = p.Str
		case ParamCapture:
			switch {
			case p.Kind == ParamInt64 && p.Int >= 0:
				h.Capture = p.Int
			case p.Kind == ParamUint64 && p.Uint <= math.MaxInt64:
				h.Capture = int64(p.Uint)
			default:
				return fmt.Errorf("parameter %s must be a non-negative int64_param or uint64_param (nanoseconds)", ParamCapture)
			}
			h.HasCapture = true
		}
	}
	for i := range h.Inputs {
		t := &h.Inputs[i]
		if err := h.checkTensorShm(t); err != nil {
			return fmt.Errorf("input %q: %w", t.Name, err)
		}
	}
	for i := range h.Outputs {
		if err := h.checkTensorShm(&h.Outputs[i]); err != nil {
			return fmt.Errorf("output %q: %w", h.Outputs[i].Name, err)
		}
	}
	return nil
}

// checkRaw applies Triton's rule on raw_input_contents, raw of them (its gRPC
// server, src/grpc/infer_handler.cc): an input in shared memory takes no
// entry; every other input takes its data from its contents or else from the
// next entry, in input order; contents and raw entries never mix in one
// request. Entries left over are ignored, as Triton ignores them.
func (h *InferHeader) checkRaw(raw int) error {
	next := 0
	for i := range h.Inputs {
		t := &h.Inputs[i]
		switch {
		case t.inShm():
		case t.HasContents && raw > 0:
			return fmt.Errorf("input %q: contents must not be set when raw_input_contents are used: send every input's data one way", t.Name)
		case t.HasContents:
		case next < raw:
			next++
		default:
			return fmt.Errorf("input %q has no data: not in shared memory, no contents, and no raw_input_contents entry left for it (%d entries: one per input not in shared memory, in input order)", t.Name, raw)
		}
	}
	return nil
}

// inShm reports whether the tensor names a shared-memory region.
func (t *Tensor) inShm() bool {
	for i := range t.Params {
		if string(t.Params[i].Key) == ParamShmRegion {
			return true
		}
	}
	return false
}

// errUTF8: proto3 strings must be valid UTF-8 (protobuf libraries refuse the message).
var errUTF8 = fmt.Errorf("%w: string field is not valid UTF-8", ErrMalformed)

// takeString is take for a string field.
func (c *cursor) takeString(n int) ([]byte, error) {
	b, err := c.take(n)
	if err == nil && !utf8.Valid(b) {
		err = errUTF8
	}
	return b, err
}

// checkTensorShm applies Triton's rules for a tensor's shared-memory parameters.
func (h *InferHeader) checkTensorShm(t *Tensor) error {
	var region, size, offset bool
	for _, p := range t.Params {
		switch string(p.Key) {
		case ParamShmRegion:
			if p.Kind != ParamString {
				return fmt.Errorf("%s must be a string_param", ParamShmRegion)
			}
			region = true
		case ParamShmByteSize:
			if p.Kind != ParamInt64 || p.Int < 0 {
				return fmt.Errorf("%s must be a non-negative int64_param", ParamShmByteSize)
			}
			size = true
		case ParamShmOffset:
			if p.Kind != ParamInt64 || p.Int < 0 {
				return fmt.Errorf("%s must be a non-negative int64_param", ParamShmOffset)
			}
			offset = true
		}
	}
	switch {
	case !region && (size || offset):
		return fmt.Errorf("%s or %s given without %s", ParamShmByteSize, ParamShmOffset, ParamShmRegion)
	case region && !size:
		return fmt.Errorf("%s requires %s", ParamShmRegion, ParamShmByteSize)
	case region && t.HasContents:
		return fmt.Errorf("tensor names a shared-memory region and also sets contents")
	}
	h.Shm = h.Shm || region
	return nil
}

// Param returns the request-level parameter named key.
func (h *InferHeader) Param(key string) (*Param, bool) {
	for i := range h.Params {
		if string(h.Params[i].Key) == key {
			return &h.Params[i], true
		}
	}
	return nil, false
}

// rebaseRaw shifts the raw tensor spans by the vig_ parameters removed before them.
func (h *InferHeader) rebaseRaw() {
	for i := range h.Raw {
		removed := 0
		for j := range h.Params {
			p := &h.Params[j]
			if p.end <= h.Raw[i].Off && bytes.HasPrefix(p.Key, []byte(vigPrefix)) {
				removed += p.end - p.start
			}
		}
		h.Raw[i].Off -= removed
	}
}

// HasVigParams reports whether any vig_ parameter must be stripped.
func (h *InferHeader) HasVigParams() bool {
	for i := range h.Params {
		if bytes.HasPrefix(h.Params[i].Key, []byte(vigPrefix)) {
			return true
		}
	}
	return false
}

// StripVig returns msg without vig's own parameters. The tensor data is not copied:
// the result is a list of views of msg's buffers, each with its own reference; msg
// keeps its references and must still be freed by its owner. h.Raw is moved to the
// offsets of the stripped message.
func (h *InferHeader) StripVig(msg mem.BufferSlice) mem.BufferSlice {
	defer h.rebaseRaw()
	out := make(mem.BufferSlice, 0, len(msg)+2)
	pos := 0 // absolute offset of b[0]
	next := 0
	for _, b := range msg {
		blen := b.Len()
		from := 0
		for from < blen {
			// Advance to the next cut that ends after the current point.
			for next < len(h.Params) && (!bytes.HasPrefix(h.Params[next].Key, []byte(vigPrefix)) || h.Params[next].end <= pos+from) {
				next++
			}
			keepEnd := blen
			if next < len(h.Params) && h.Params[next].start-pos < blen {
				keepEnd = max(h.Params[next].start-pos, from)
			}
			if keepEnd > from {
				out = append(out, b.Slice(from, keepEnd))
			}
			if keepEnd == blen {
				break
			}
			from = min(h.Params[next].end-pos, blen)
		}
		pos += blen
	}
	return out
}

// ErrRawNotLast: a request forwarded as it arrives (ParseInferHead) has a field
// after its raw_input_contents. Protobuf encoders write fields in number order,
// raw_input_contents (7) last; vig has forwarded the bytes before it already and
// cannot take back what it read as the header.
var ErrRawNotLast = errors.New("a field follows raw_input_contents: it must be the request's last field, as protobuf encoders write it")

// RawScan checks the rest of a request whose head ParseInferHead read, as it
// arrives: raw_input_contents entries and nothing else, each within the
// message. End completes the header with them. The bytes themselves are not
// kept.
type RawScan struct {
	pos   int    // absolute offset of the next byte
	size  int    // the message's total
	skip  int    // payload bytes of the current entry still to come
	lenv  uint64 // the length varint being read
	shift uint   // its next bit
	state uint8  // scanTag, scanLen, scanBody
	raw   []Span
	h     InferHeader // what End checks the entries against: the head's inputs (no views)
}

const (
	scanTag uint8 = iota
	scanLen
	scanBody
)

// Start begins the scan of h's message at head (from ParseInferHead). It
// keeps what End needs of h, so that h may be in use elsewhere meanwhile.
func (s *RawScan) Start(h *InferHeader, head int) {
	inputs := s.h.Inputs[:0]
	for _, t := range h.Inputs {
		c := Tensor{Name: bytes.Clone(t.Name), HasContents: t.HasContents}
		if t.inShm() {
			c.Params = []Param{{Key: []byte(ParamShmRegion)}}
		}
		inputs = append(inputs, c)
	}
	*s = RawScan{pos: head, size: h.Size, raw: s.raw[:0], h: InferHeader{Inputs: inputs}}
}

// Scan reads the next bytes of the message.
func (s *RawScan) Scan(b []byte) error {
	if len(b) > s.size-s.pos {
		return ErrMalformed
	}
	for len(b) > 0 {
		switch s.state {
		case scanTag:
			if b[0] != byte(7<<3|protowire.BytesType) {
				return ErrRawNotLast
			}
			s.state, s.lenv, s.shift = scanLen, 0, 0
			b = b[1:]
			s.pos++
		case scanLen:
			c := b[0]
			b = b[1:]
			s.pos++
			if s.shift > 28 { // a length above 2^35: never a message's
				return ErrMalformed
			}
			s.lenv |= uint64(c&0x7f) << s.shift
			s.shift += 7
			if c >= 0x80 {
				continue
			}
			if s.lenv > uint64(s.size-s.pos) {
				return ErrMalformed
			}
			if len(s.raw) >= maxTensorsPerInfer {
				return fmt.Errorf("more than %d raw_input_contents", maxTensorsPerInfer)
			}
			s.raw = append(s.raw, Span{Off: s.pos, Len: int(s.lenv)})
			s.skip, s.state = int(s.lenv), scanBody
			if s.skip == 0 {
				s.state = scanTag
			}
		case scanBody:
			k := min(s.skip, len(b))
			b = b[k:]
			s.pos += k
			if s.skip -= k; s.skip == 0 {
				s.state = scanTag
			}
		}
	}
	return nil
}

// End checks that the whole message was scanned and ends with a whole entry,
// and applies the rules ParseInfer applies to raw_input_contents (against the
// inputs Start saw; Fill completes the header).
func (s *RawScan) End() error {
	if s.pos != s.size || s.state != scanTag {
		return ErrMalformed
	}
	return s.h.checkRaw(len(s.raw))
}

// Fill sets h's RawInputs, RawBytes and Raw from a scan End accepted (at the
// offsets of the message with vig's parameters stripped, as StripVig leaves
// them).
func (s *RawScan) Fill(h *InferHeader) {
	h.Raw = append(h.Raw[:0], s.raw...)
	h.RawInputs, h.RawBytes = len(s.raw), 0
	for _, r := range s.raw {
		h.RawBytes += r.Len
	}
	if h.HasVigParams() {
		h.rebaseRaw()
	}
}
