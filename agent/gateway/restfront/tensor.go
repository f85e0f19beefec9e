package restfront

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// JSON tensor data, converted once: the "data" array of an input becomes the
// little-endian bytes a raw_input_contents entry carries (what the binary tensor
// data extension would have sent), and an output's raw bytes become a "data"
// array. Nested arrays are flattened in row-major order, as Triton does.

// elemSize is the byte size of an element of Triton's fixed-size datatypes; BYTES
// (length-prefixed strings) is 0.
func elemSize(dt string) (int, bool) {
	switch dt {
	case "BOOL", "UINT8", "INT8":
		return 1, true
	case "UINT16", "INT16", "FP16", "BF16":
		return 2, true
	case "UINT32", "INT32", "FP32":
		return 4, true
	case "UINT64", "INT64", "FP64":
		return 8, true
	case "BYTES":
		return 0, true
	}
	return 0, false
}

// elements is the number of elements of shape, or an error for a negative or
// overflowing dimension.
func elements(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// encodeData converts the JSON array data of a tensor of datatype dt into its
// raw bytes, appended to dst, and returns them with the number of elements.
// want, the element count of the shape, sizes dst once (bounded by what data
// can hold: every element takes at least one byte of JSON).
func encodeData(dst []byte, dt string, data []byte, want int64) ([]byte, int64, error) {
	switch dt {
	case "FP16", "BF16":
		return dst, 0, fmt.Errorf("receiving %s data via JSON is not supported: send it with the binary tensor data extension (parameter binary_data_size)", dt)
	}
	size, ok := elemSize(dt)
	if !ok {
		return dst, 0, fmt.Errorf("unknown datatype %q", dt)
	}
	if size > 0 {
		dst = slices.Grow(dst, int(min(want, int64(len(data))))*size)
	}
	// One string of the whole array, so that strconv parses substrings of it
	// rather than a fresh string per element.
	tk := tokens{data: string(data)}
	if err := tk.start(); err != nil {
		return dst, 0, err
	}
	var n int64
	for {
		tok, err := tk.next()
		if err != nil {
			return dst, n, err
		}
		if tok == "" {
			return dst, n, nil
		}
		n++
		switch dt {
		case "FP32":
			// Parsed as a double and rounded to float, as Triton's HTTP server
			// does (RapidJSON's double, then a C cast): the same bytes.
			f, err := strconv.ParseFloat(tok, 64)
			if err != nil || !number(tok) {
				return dst, n, elemError(dt, tok, err)
			}
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(f)))
		case "FP64":
			f, err := strconv.ParseFloat(tok, 64)
			if err != nil || !number(tok) {
				return dst, n, elemError(dt, tok, err)
			}
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
		case "INT8", "INT16", "INT32", "INT64":
			v, err := strconv.ParseInt(tok, 10, size*8)
			if err != nil || !number(tok) {
				return dst, n, elemError(dt, tok, err)
			}
			dst = appendLE(dst, uint64(v), size)
		case "UINT8", "UINT16", "UINT32", "UINT64":
			v, err := strconv.ParseUint(tok, 10, size*8)
			if err != nil || !number(tok) {
				return dst, n, elemError(dt, tok, err)
			}
			dst = appendLE(dst, v, size)
		case "BOOL":
			switch tok {
			case "true":
				dst = append(dst, 1)
			case "false":
				dst = append(dst, 0)
			default:
				return dst, n, fmt.Errorf("BOOL element %.40s is not true or false", tok)
			}
		default: // BYTES
			if tok[0] != '"' {
				return dst, n, fmt.Errorf("BYTES element %.40s is not a string", tok)
			}
			s, err := unquote(tok)
			if err != nil {
				return dst, n, err
			}
			dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
			dst = append(dst, s...)
		}
	}
}

// number reports whether tok starts as a JSON number does: strconv also takes
// "inf", "NaN" and hexadecimal floats ("0x1p-2", where it also allows
// underscores), which JSON does not. Checked on the first bytes only, so that
// it costs nothing per element.
func number(tok string) bool {
	if tok[0] == '-' {
		tok = tok[1:]
	}
	if len(tok) == 0 || tok[0] < '0' || tok[0] > '9' {
		return false
	}
	return len(tok) < 2 || (tok[1] != 'x' && tok[1] != 'X')
}

func elemError(dt string, tok string, err error) error {
	if err == nil || !number(tok) {
		return fmt.Errorf("%s element %.40s is not a number", dt, tok)
	}
	return fmt.Errorf("%s element %s: %w", dt, tok, errors.Unwrap(err))
}

func appendLE(dst []byte, v uint64, size int) []byte {
	switch size {
	case 1:
		return append(dst, byte(v))
	case 2:
		return binary.LittleEndian.AppendUint16(dst, uint16(v))
	case 4:
		return binary.LittleEndian.AppendUint32(dst, uint32(v))
	}
	return binary.LittleEndian.AppendUint64(dst, v)
}

// unquote returns the contents of the JSON string tok (quotes included): a
// substring of tok when it has no escapes.
func unquote(tok string) (string, error) {
	inner := tok[1 : len(tok)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c < 0x20 {
			plain = false
			break
		}
	}
	if plain {
		return inner, nil
	}
	var s string
	if err := json.Unmarshal([]byte(tok), &s); err != nil {
		return "", fmt.Errorf("BYTES element: %v", err)
	}
	return s, nil
}

// maxDepth bounds the nesting of a data array.
const maxDepth = 64

// tokens reads the scalar elements of the JSON array data, nested arrays
// flattened. data has been validated as JSON by the header's decoder; tokens
// still refuses what is not an array of scalars.
type tokens struct {
	data  string
	i     int
	depth int
}

func (t *tokens) start() error {
	t.i = skipSpace(t.data, 0)
	if t.i >= len(t.data) || t.data[t.i] != '[' {
		return errors.New("'data' must be an array")
	}
	return nil
}

// next returns the next element, or nil at the end of the array.
func (t *tokens) next() (string, error) {
	data := t.data
	for i := t.i; i < len(data); {
		switch c := data[i]; c {
		case ' ', '\t', '\n', '\r', ',':
			i++
		case '[':
			t.depth++
			if t.depth > maxDepth {
				return "", fmt.Errorf("'data' is nested deeper than %d", maxDepth)
			}
			i++
		case ']':
			t.depth--
			i++
			if t.depth == 0 {
				if j := skipSpace(data, i); j != len(data) {
					return "", errors.New("'data' has bytes after its array")
				}
				t.i = i
				return "", nil
			}
		case '{':
			return "", errors.New("'data' holds an object; it must hold only numbers, booleans or strings")
		case '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(data) {
				return "", errors.New("'data': unterminated string")
			}
			t.i = j + 1
			return data[i : j+1], nil
		default:
			j := i + 1
			for j < len(data) {
				if c := data[j]; c == ',' || c == ']' || c == ' ' || c == '\n' || c == '\t' || c == '\r' {
					break
				}
				j++
			}
			t.i = j
			return data[i:j], nil
		}
	}
	return "", errors.New("'data': unterminated array")
}

func skipSpace(b string, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// appendData appends the JSON array of the raw bytes of an output of datatype
// dt and n elements.
func appendData(b []byte, dt string, raw []byte) ([]byte, error) {
	switch dt {
	case "FP16", "BF16":
		return b, fmt.Errorf("sending %s data via JSON is not supported: ask for it with the binary tensor data extension (output parameter binary_data: true)", dt)
	}
	size, ok := elemSize(dt)
	if !ok {
		return b, fmt.Errorf("unknown datatype %q", dt)
	}
	b = append(b, '[')
	if dt == "BYTES" {
		for first := true; len(raw) > 0; first = false {
			if len(raw) < 4 {
				return b, errors.New("BYTES output: truncated length prefix")
			}
			l := binary.LittleEndian.Uint32(raw)
			if uint64(l) > uint64(len(raw)-4) {
				return b, errors.New("BYTES output: element longer than the tensor")
			}
			if !first {
				b = append(b, ',')
			}
			b = appendString(b, raw[4:4+l])
			raw = raw[4+l:]
		}
		return append(b, ']'), nil
	}
	if len(raw)%size != 0 {
		return b, fmt.Errorf("%s output of %d bytes is not a whole number of elements", dt, len(raw))
	}
	for i := 0; i < len(raw); i += size {
		if i > 0 {
			b = append(b, ',')
		}
		e := raw[i : i+size]
		switch dt {
		case "BOOL":
			b = strconv.AppendBool(b, e[0] != 0)
		case "UINT8":
			b = strconv.AppendUint(b, uint64(e[0]), 10)
		case "INT8":
			b = strconv.AppendInt(b, int64(int8(e[0])), 10)
		case "UINT16":
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint16(e)), 10)
		case "INT16":
			b = strconv.AppendInt(b, int64(int16(binary.LittleEndian.Uint16(e))), 10)
		case "UINT32":
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint32(e)), 10)
		case "INT32":
			b = strconv.AppendInt(b, int64(int32(binary.LittleEndian.Uint32(e))), 10)
		case "UINT64":
			b = strconv.AppendUint(b, binary.LittleEndian.Uint64(e), 10)
		case "INT64":
			b = strconv.AppendInt(b, int64(binary.LittleEndian.Uint64(e)), 10)
		case "FP32":
			f := float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return b, fmt.Errorf("FP32 output holds %v, which JSON cannot carry: ask for it with binary_data", f)
			}
			b = strconv.AppendFloat(b, f, 'g', -1, 32)
		case "FP64":
			f := math.Float64frombits(binary.LittleEndian.Uint64(e))
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return b, fmt.Errorf("FP64 output holds %v, which JSON cannot carry: ask for it with binary_data", f)
			}
			b = strconv.AppendFloat(b, f, 'g', -1, 64)
		}
	}
	return append(b, ']'), nil
}

// appendString appends s as a JSON string (invalid UTF-8 as U+FFFD, as
// encoding/json does).
func appendString(b []byte, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
