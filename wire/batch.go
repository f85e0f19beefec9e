package wire

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Batching: several ModelInferRequests of one model merged into one, as Triton's
// own dynamic batcher forms a batch, and the batch's ModelInferResponse split back
// into one answer per request, byte-equal to what that request alone would have
// got from a server computing per row.
//
// A model that batches (max_batch_size > 0) has the batch as the first dimension
// of every input and output, so a batch is each input's rows concatenated along
// the first dimension, and its answer is cut along the same dimension.

// Why a request runs alone (BatchKey's reason; a metrics label).
const (
	AloneShm      = "shared_memory" // a tensor names a shared-memory region
	AloneContents = "contents"      // tensors given in contents, not raw_input_contents
	AloneNoInputs = "no_inputs"     // no inputs, or no raw_input_contents for them
	AloneRows     = "rows_differ"   // the inputs' first dimensions differ
	AloneShape    = "shape"         // an input without dimensions, or a dimension < 1
	AloneDatatype = "datatype"      // a datatype vig cannot cut into rows
	AloneSize     = "size"          // an input's bytes do not match its shape
	AloneSequence = "sequence"      // a request of a sequence (sequence_id, _start, _end)
)

// Sequence parameters: a stateful model's requests, never batched across streams.
const (
	paramSeqID    = "sequence_id"
	paramSeqStart = "sequence_start"
	paramSeqEnd   = "sequence_end"
)

// maxBatchElems bounds the element count vig computes from a shape, far above
// any message vig accepts, so that products of dimensions cannot overflow.
const maxBatchElems = 1 << 40

var keySeed = maphash.MakeSeed()

// DatatypeSize is the size in bytes of one element of a Triton datatype; 0 for
// BYTES (length-prefixed elements) and for names Triton does not define.
func DatatypeSize(dt []byte) int {
	switch string(dt) {
	case "BOOL", "UINT8", "INT8":
		return 1
	case "UINT16", "INT16", "FP16", "BF16":
		return 2
	case "UINT32", "INT32", "FP32":
		return 4
	case "UINT64", "INT64", "FP64":
		return 8
	}
	return 0
}

func isBytes(dt []byte) bool { return string(dt) == "BYTES" }

// rowElems is the number of elements of one row of a tensor of shape (the
// product of its dimensions after the first); ok false when one is negative or
// the product is absurd.
func rowElems(shape []int64) (int64, bool) {
	n := int64(1)
	for _, d := range shape[1:] {
		if d < 0 || (d > 0 && n > maxBatchElems/d) {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// BatchKey reports which requests h may be merged with: requests of the same
// model whose keys are equal and non-zero have the same model version, the same
// inputs (names, datatypes, dimensions after the first, tensor parameters), the
// same requested outputs and the same parameters other than vig's own (Triton's
// priority and timeout included), so that one request carrying all their rows is
// what each would have been, rows apart. rows is the request's first dimension.
// A request that cannot join any batch gets key 0 and the reason (an Alone*
// constant). msg is the message h.Raw indexes (vig's parameters stripped or not).
//
// Equal keys are a hash's: a collision would merge requests whose tensors
// differ in a way the merge then refuses (MergeInfer checks what it relies on).
func BatchKey(h *InferHeader, msg mem.BufferSlice) (key uint64, rows int, alone string) {
	if h.Shm {
		return 0, 0, AloneShm
	}
	if len(h.Inputs) == 0 || h.RawInputs != len(h.Inputs) {
		for i := range h.Inputs {
			if h.Inputs[i].HasContents {
				return 0, 0, AloneContents
			}
		}
		return 0, 0, AloneNoInputs
	}
	for i := range h.Params {
		switch string(h.Params[i].Key) {
		case paramSeqID, paramSeqStart, paramSeqEnd:
			return 0, 0, AloneSequence
		}
	}
	var r int64
	for i := range h.Inputs {
		t := &h.Inputs[i]
		if len(t.Shape) == 0 || t.Shape[0] < 1 || t.Shape[0] > maxTensorsPerInfer {
			return 0, 0, AloneShape
		}
		if i == 0 {
			r = t.Shape[0]
		} else if t.Shape[0] != r {
			return 0, 0, AloneRows
		}
		per, ok := rowElems(t.Shape)
		if !ok {
			return 0, 0, AloneShape
		}
		if !inputFits(t, per*r, h.Raw[i], msg) {
			if DatatypeSize(t.Datatype) == 0 && !isBytes(t.Datatype) {
				return 0, 0, AloneDatatype
			}
			return 0, 0, AloneSize
		}
	}

	var m maphash.Hash
	m.SetSeed(keySeed)
	writeField(&m, h.Version)
	writeUint(&m, uint64(len(h.Inputs)))
	for i := range h.Inputs {
		t := &h.Inputs[i]
		writeField(&m, t.Name)
		writeField(&m, t.Datatype)
		writeUint(&m, uint64(len(t.Shape)))
		for _, d := range t.Shape[1:] {
			writeUint(&m, uint64(d))
		}
		writeUint(&m, paramsHash(t.Params, false))
	}
	writeUint(&m, uint64(len(h.Outputs)))
	for i := range h.Outputs {
		writeField(&m, h.Outputs[i].Name)
		writeUint(&m, paramsHash(h.Outputs[i].Params, false))
	}
	writeUint(&m, paramsHash(h.Params, true))
	key = m.Sum64()
	if key == 0 {
		key = 1
	}
	return key, int(r), ""
}

// inputFits reports whether an input's raw bytes hold exactly elems elements
// of its datatype: a request that is wrong alone must fail alone, not fail the
// batch it would have joined.
func inputFits(t *Tensor, elems int64, raw Span, msg mem.BufferSlice) bool {
	if raw.Off < 0 || raw.Off+raw.Len > msg.Len() {
		return false
	}
	if sz := DatatypeSize(t.Datatype); sz > 0 {
		return int64(raw.Len) == elems*int64(sz)
	}
	if !isBytes(t.Datatype) {
		return false
	}
	var er elemReader
	er.reset(msg, raw)
	for range elems {
		if _, ok := er.next(); !ok {
			return false
		}
	}
	return er.left == 0
}

func writeField(m *maphash.Hash, b []byte) {
	writeUint(m, uint64(len(b)))
	m.Write(b)
}

func writeUint(m *maphash.Hash, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	m.Write(b[:])
}

// paramsHash hashes a parameters map independently of its entries' order (a
// protobuf map has none: Go's encoder shuffles it); skipVig leaves vig's own out.
func paramsHash(ps []Param, skipVig bool) uint64 {
	var sum uint64
	for i := range ps {
		p := &ps[i]
		if skipVig && isVig(p.Key) {
			continue
		}
		var m maphash.Hash
		m.SetSeed(keySeed)
		writeField(&m, p.Key)
		writeUint(&m, uint64(p.Kind))
		switch p.Kind {
		case ParamBool:
			if p.Bool {
				writeUint(&m, 1)
			}
		case ParamInt64:
			writeUint(&m, uint64(p.Int))
		case ParamUint64:
			writeUint(&m, p.Uint)
		case ParamDouble:
			writeUint(&m, math.Float64bits(p.Double))
		case ParamString:
			writeField(&m, p.Str)
		}
		sum += m.Sum64()
	}
	return sum
}

func isVig(key []byte) bool {
	return len(key) >= len(vigPrefix) && string(key[:len(vigPrefix)]) == vigPrefix
}

// elemReader walks the length-prefixed elements of a BYTES tensor (a 4-byte
// little-endian length, then that many bytes) inside a span of a message.
type elemReader struct {
	c    cursor
	left int // bytes of the span not yet read
}

func (r *elemReader) reset(msg mem.BufferSlice, s Span) {
	r.c.reset(msg, r.c.arena)
	r.left = s.Len
	if r.c.skip(s.Off) != nil {
		r.left = -1
	}
}

// next reads one element and returns its size with its prefix.
func (r *elemReader) next() (int, bool) {
	if r.left < 4 {
		return 0, false
	}
	r.c.arena = r.c.arena[:0]
	b, err := r.c.take(4)
	if err != nil {
		return 0, false
	}
	n := int64(binary.LittleEndian.Uint32(b))
	if n > int64(r.left-4) {
		return 0, false
	}
	if r.c.skip(int(n)) != nil {
		return 0, false
	}
	r.left -= 4 + int(n)
	return 4 + int(n), true
}

// BatchPart is one request of a batch: its header and the message its Raw
// spans index.
type BatchPart struct {
	H   *InferHeader
	Msg mem.BufferSlice
}

// rows is a part's first dimension (BatchKey accepted it).
func (p *BatchPart) rows() int64 { return p.H.Inputs[0].Shape[0] }

// Batcher merges requests into a batch and splits the batch's answer. It keeps
// scratch storage between uses; one Batcher is not for concurrent use.
type Batcher struct {
	scratch []byte
	segs    []segment
	resp    InferResponse
	cur     cursor
	top     []field // the response's top-level fields
	outs    []outFields
	er      elemReader
	bounds  []int // per output, per part: where each part's bytes begin (relative), then the end
}

// segment is a piece of an assembled message: bytes of the Batcher's scratch
// (view false) or a span of a source message.
type segment struct {
	lo, hi int
	view   bool
	src    int // index of the source message for a view
	span   Span
}

type field struct {
	num        protowire.Number
	start, end int  // the whole field, tag included
	unknown    bool // not a field of the message (another number or wire type)
}

type outFields struct {
	fields []field // the tensor's own fields other than its shape, absolute offsets
}

// Merge builds the ModelInferRequest of a batch of parts whose BatchKeys are
// equal: the first part's model, version, id, parameters (vig's stripped) and
// requested outputs, each input with shape [Σrows, dims…] and its
// raw_input_contents the parts' bytes in order. The tensor bytes are not
// copied: the result holds views of the parts' messages (each with its own
// reference) and one pooled buffer of headers.
func (b *Batcher) Merge(parts []BatchPart, pool mem.BufferPool) (mem.BufferSlice, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("batch of no requests")
	}
	lead := parts[0].H
	var total int64
	for i := range parts {
		h := parts[i].H
		if len(h.Inputs) != len(lead.Inputs) || h.RawInputs != len(h.Inputs) || len(h.Raw) != len(h.Inputs) || len(h.Outputs) != len(lead.Outputs) {
			return nil, fmt.Errorf("batch member %d does not match the batch's first request", i)
		}
		for j := range h.Inputs {
			t, l := &h.Inputs[j], &lead.Inputs[j]
			if len(t.Shape) == 0 || len(t.Shape) != len(l.Shape) || string(t.Name) != string(l.Name) || string(t.Datatype) != string(l.Datatype) || t.Shape[0] != h.Inputs[0].Shape[0] {
				return nil, fmt.Errorf("batch member %d: input %q does not match the batch's first request", i, t.Name)
			}
			for k := 1; k < len(t.Shape); k++ {
				if t.Shape[k] != l.Shape[k] {
					return nil, fmt.Errorf("batch member %d: input %q has shape %v, the batch's first request %v", i, t.Name, t.Shape, l.Shape)
				}
			}
			if h.Raw[j].Off < 0 || h.Raw[j].Off+h.Raw[j].Len > parts[i].Msg.Len() {
				return nil, fmt.Errorf("batch member %d: input %q lies outside its message", i, t.Name)
			}
		}
		total += parts[i].rows()
	}
	s := b.scratch[:0]
	segs := b.segs[:0]
	s = appendStr(s, 1, lead.Model)
	s = appendStr(s, 2, lead.Version)
	s = appendStr(s, 3, lead.ID)
	for i := range lead.Params {
		if !isVig(lead.Params[i].Key) {
			s = appendParamEntry(s, 4, &lead.Params[i])
		}
	}
	for j := range lead.Inputs {
		t := &lead.Inputs[j]
		n := len(t.Shape)
		shape := sizeVarint(uint64(total))
		for _, d := range t.Shape[1:] {
			shape += sizeVarint(uint64(d))
		}
		size := sizeStr(1, t.Name) + sizeStr(2, t.Datatype) + 1 + sizeVarint(uint64(shape)) + shape
		for k := range t.Params {
			size += sizeParamEntry(4, &t.Params[k])
		}
		s = protowire.AppendTag(s, 5, protowire.BytesType)
		s = protowire.AppendVarint(s, uint64(size))
		s = appendStr(s, 1, t.Name)
		s = appendStr(s, 2, t.Datatype)
		s = protowire.AppendTag(s, 3, protowire.BytesType)
		s = protowire.AppendVarint(s, uint64(shape))
		s = protowire.AppendVarint(s, uint64(total))
		for _, d := range t.Shape[1:n] {
			s = protowire.AppendVarint(s, uint64(d))
		}
		for k := range t.Params {
			s = appendParamEntry(s, 4, &t.Params[k])
		}
	}
	for j := range lead.Outputs {
		o := &lead.Outputs[j]
		size := sizeStr(1, o.Name)
		for k := range o.Params {
			size += sizeParamEntry(2, &o.Params[k])
		}
		s = protowire.AppendTag(s, 6, protowire.BytesType)
		s = protowire.AppendVarint(s, uint64(size))
		s = appendStr(s, 1, o.Name)
		for k := range o.Params {
			s = appendParamEntry(s, 2, &o.Params[k])
		}
	}
	for j := range lead.Inputs {
		n := 0
		for i := range parts {
			n += parts[i].H.Raw[j].Len
		}
		s = protowire.AppendTag(s, 7, protowire.BytesType)
		s = protowire.AppendVarint(s, uint64(n))
		segs = appendScratch(segs, len(s))
		for i := range parts {
			segs = append(segs, segment{view: true, src: i, span: parts[i].H.Raw[j]})
		}
	}
	segs = appendScratch(segs, len(s))
	b.scratch, b.segs = s, segs
	return b.assemble(pool, func(i int) mem.BufferSlice { return parts[i].Msg }), nil
}

// appendScratch closes the scratch segment that ends at end (if any bytes).
func appendScratch(segs []segment, end int) []segment {
	lo := 0
	for i := len(segs) - 1; i >= 0; i-- {
		if !segs[i].view {
			lo = segs[i].hi
			break
		}
	}
	if end > lo {
		segs = append(segs, segment{lo: lo, hi: end})
	}
	return segs
}

// assemble turns b.segs into a message: the scratch bytes copied once into a
// pooled buffer, sliced, and views of the sources.
func (b *Batcher) assemble(pool mem.BufferPool, src func(int) mem.BufferSlice) mem.BufferSlice {
	n := 0
	for _, sg := range b.segs {
		if sg.view {
			n += 2 // a span seldom crosses more than one buffer boundary
		} else {
			n++
		}
	}
	out := make(mem.BufferSlice, 0, n)
	head := mem.Copy(b.scratch, pool)
	for _, sg := range b.segs {
		if sg.view {
			if sg.span.Len > 0 {
				out = append(out, sg.span.Slice(src(sg.src))...)
			}
			continue
		}
		out = append(out, head.Slice(sg.lo, sg.hi))
	}
	head.Free()
	return out
}

func appendStr(s []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return s
	}
	s = protowire.AppendTag(s, num, protowire.BytesType)
	return protowire.AppendBytes(s, v)
}

func sizeStr(num protowire.Number, v []byte) int {
	if len(v) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(v))
}

// paramValueSize is the size of the InferParameter message of p.
func paramValueSize(p *Param) int {
	switch p.Kind {
	case ParamBool:
		return 2 // a oneof member is written even when false
	case ParamInt64:
		return 1 + sizeVarint(uint64(p.Int))
	case ParamUint64:
		return 1 + sizeVarint(p.Uint)
	case ParamDouble:
		return 9
	case ParamString:
		return 1 + protowire.SizeBytes(len(p.Str))
	}
	return 0
}

func paramEntrySize(p *Param) int {
	return sizeStr(1, p.Key) + 1 + protowire.SizeBytes(paramValueSize(p))
}

func sizeParamEntry(num protowire.Number, p *Param) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(paramEntrySize(p))
}

// appendParamEntry encodes a map<string, InferParameter> entry as protobuf
// encoders do (key, then value, the value always present).
func appendParamEntry(s []byte, num protowire.Number, p *Param) []byte {
	s = protowire.AppendTag(s, num, protowire.BytesType)
	s = protowire.AppendVarint(s, uint64(paramEntrySize(p)))
	s = appendStr(s, 1, p.Key)
	s = protowire.AppendTag(s, 2, protowire.BytesType)
	s = protowire.AppendVarint(s, uint64(paramValueSize(p)))
	switch p.Kind {
	case ParamBool:
		s = protowire.AppendTag(s, 1, protowire.VarintType)
		s = protowire.AppendVarint(s, protowire.EncodeBool(p.Bool))
	case ParamInt64:
		s = protowire.AppendTag(s, 2, protowire.VarintType)
		s = protowire.AppendVarint(s, uint64(p.Int))
	case ParamString:
		s = protowire.AppendTag(s, 3, protowire.BytesType)
		s = protowire.AppendBytes(s, p.Str)
	case ParamDouble:
		s = protowire.AppendTag(s, 4, protowire.Fixed64Type)
		s = protowire.AppendFixed64(s, math.Float64bits(p.Double))
	case ParamUint64:
		s = protowire.AppendTag(s, 5, protowire.VarintType)
		s = protowire.AppendVarint(s, p.Uint)
	}
	return s
}

// SplitError is a batch answer that cannot be cut into its requests' answers;
// it names the output.
type SplitError struct {
	Output string
	Why    string
}

func (e *SplitError) Error() string {
	if e.Output == "" {
		return "batch answer cannot be split: " + e.Why
	}
	return fmt.Sprintf("batch answer cannot be split: output %q %s", e.Output, e.Why)
}

// Split cuts the ModelInferResponse of a batch that Merge formed of parts into
// one response per part, in out (len(parts) entries): the response's model,
// version, parameters and unknown fields, the part's own id, each output with
// shape [rows, dims…] and its rows of raw_output_contents. The outputs' bytes are
// not copied: each response holds views of resp (with their own references);
// resp stays the caller's. On error out holds nothing.
func (b *Batcher) Split(resp mem.BufferSlice, parts []BatchPart, pool mem.BufferPool, out []mem.BufferSlice) error {
	r := &b.resp
	if err := r.ParseResponse(resp); err != nil {
		return &SplitError{Why: err.Error()}
	}
	if err := b.fields(resp); err != nil {
		return &SplitError{Why: err.Error()}
	}
	var total int64
	for i := range parts {
		total += parts[i].rows()
	}
	if len(r.Raw) != len(r.Outputs) { // none at all (ParseResponse checked the rest)
		return &SplitError{Output: string(r.Outputs[0].Name), Why: "has no raw_output_contents"}
	}
	np := len(parts)
	b.bounds = b.bounds[:0]
	for i := range r.Outputs {
		o := &r.Outputs[i]
		if o.HasContents {
			return &SplitError{Output: string(o.Name), Why: "is given in contents, not raw_output_contents"}
		}
		if len(o.Shape) == 0 || o.Shape[0] != total {
			return &SplitError{Output: string(o.Name), Why: fmt.Sprintf("has shape %v: its first dimension is not the batch's %d rows", o.Shape, total)}
		}
		per, ok := rowElems(o.Shape)
		if !ok {
			return &SplitError{Output: string(o.Name), Why: fmt.Sprintf("has shape %v", o.Shape)}
		}
		raw := r.Raw[i]
		if sz := DatatypeSize(o.Datatype); sz > 0 {
			row := per * int64(sz)
			if int64(raw.Len) != row*total {
				return &SplitError{Output: string(o.Name), Why: fmt.Sprintf("has %d bytes for shape %v of %s", raw.Len, o.Shape, o.Datatype)}
			}
			at := 0
			for p := range parts {
				b.bounds = append(b.bounds, at)
				at += int(row * parts[p].rows())
			}
			b.bounds = append(b.bounds, at)
			continue
		}
		if !isBytes(o.Datatype) {
			return &SplitError{Output: string(o.Name), Why: fmt.Sprintf("has datatype %q, which vig cannot cut into rows", o.Datatype)}
		}
		b.er.reset(resp, raw)
		at := 0
		for p := range parts {
			b.bounds = append(b.bounds, at)
			for range per * parts[p].rows() {
				n, ok := b.er.next()
				if !ok {
					return &SplitError{Output: string(o.Name), Why: "has BYTES elements that do not match its shape"}
				}
				at += n
			}
		}
		if b.er.left != 0 {
			return &SplitError{Output: string(o.Name), Why: "has bytes beyond its shape's BYTES elements"}
		}
		b.bounds = append(b.bounds, at)
	}
	src := func(int) mem.BufferSlice { return resp }
	for p := range parts {
		b.segs = b.segs[:0]
		s := b.scratch[:0]
		rows := parts[p].rows()
		// Fields in number order, unknown ones last, as encoders write them.
		for _, f := range b.top {
			if !f.unknown && (f.num == 1 || f.num == 2) {
				s = appendSpan(s, resp, f.start, f.end)
			}
		}
		s = appendStr(s, 3, parts[p].H.ID)
		for _, f := range b.top {
			if !f.unknown && f.num == 4 {
				s = appendSpan(s, resp, f.start, f.end)
			}
		}
		for i := range r.Outputs {
			s = b.appendOutput(s, resp, i, rows)
		}
		for i := range r.Raw {
			lo, hi := b.bounds[i*(np+1)+p], b.bounds[i*(np+1)+p+1]
			s = protowire.AppendTag(s, 6, protowire.BytesType)
			s = protowire.AppendVarint(s, uint64(hi-lo))
			b.segs = appendScratch(b.segs, len(s))
			b.segs = append(b.segs, segment{view: true, span: Span{Off: r.Raw[i].Off + lo, Len: hi - lo}})
		}
		for _, f := range b.top {
			if f.unknown {
				s = appendSpan(s, resp, f.start, f.end)
			}
		}
		b.segs = appendScratch(b.segs, len(s))
		b.scratch = s
		out[p] = b.assemble(pool, src)
	}
	return nil
}

// appendOutput encodes output i of the batch answer for a part of rows rows:
// its own fields as the backend wrote them, the shape's first dimension
// replaced.
func (b *Batcher) appendOutput(s []byte, resp mem.BufferSlice, i int, rows int64) []byte {
	o := &b.resp.Outputs[i]
	fs := b.outs[i].fields
	shape := sizeVarint(uint64(rows))
	for _, d := range o.Shape[1:] {
		shape += sizeVarint(uint64(d))
	}
	size := 1 + sizeVarint(uint64(shape)) + shape
	for _, f := range fs {
		size += f.end - f.start
	}
	s = protowire.AppendTag(s, 5, protowire.BytesType)
	s = protowire.AppendVarint(s, uint64(size))
	k := 0
	for ; k < len(fs) && fs[k].num < 3; k++ {
		s = appendSpan(s, resp, fs[k].start, fs[k].end)
	}
	s = protowire.AppendTag(s, 3, protowire.BytesType)
	s = protowire.AppendVarint(s, uint64(shape))
	s = protowire.AppendVarint(s, uint64(rows))
	for _, d := range o.Shape[1:] {
		s = protowire.AppendVarint(s, uint64(d))
	}
	for ; k < len(fs); k++ {
		s = appendSpan(s, resp, fs[k].start, fs[k].end)
	}
	return s
}

// appendSpan appends bytes [lo, hi) of msg.
func appendSpan(s []byte, msg mem.BufferSlice, lo, hi int) []byte {
	n := len(s)
	s = append(s, make([]byte, hi-lo)...)
	Span{Off: lo, Len: hi - lo}.CopyTo(s[n:], msg)
	return s
}

// fields records where the response's top-level fields lie, and each output
// tensor's fields other than its shape (ParseResponse has checked the lengths).
func (b *Batcher) fields(resp mem.BufferSlice) error {
	b.top = b.top[:0]
	nout := 0
	c := &b.cur
	c.reset(resp, c.arena)
	size := resp.Len()
	for !c.done() {
		start := c.pos
		num, typ, n, err := c.field(size)
		if err != nil {
			return err
		}
		if typ != protowire.BytesType {
			if err := c.skipValue(num, typ); err != nil {
				return err
			}
			b.top = append(b.top, field{num: num, start: start, end: c.pos, unknown: true})
			continue
		}
		if num != 5 {
			if err := c.skip(n); err != nil {
				return err
			}
			b.top = append(b.top, field{num: num, start: start, end: c.pos, unknown: num > 6})
			continue
		}
		if nout == len(b.outs) {
			b.outs = append(b.outs, outFields{})
		}
		fs := b.outs[nout].fields[:0]
		end := c.pos + n
		for c.pos < end {
			fstart := c.pos
			fnum, ftyp, fn, err := c.field(end)
			if err != nil {
				return err
			}
			if ftyp == protowire.BytesType {
				err = c.skip(fn)
			} else {
				err = c.skipValue(fnum, ftyp)
			}
			if err != nil {
				return err
			}
			if fnum != 3 {
				fs = append(fs, field{num: fnum, start: fstart, end: c.pos})
			}
		}
		if c.pos != end {
			return ErrMalformed
		}
		b.outs[nout].fields = fs
		nout++
	}
	return nil
}
