package restfront

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"
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

// bstr views b as a string without copying (b is not modified while it is used).
func bstr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// encodeData converts the JSON array data of a tensor of datatype dt into its
// raw bytes, appended to dst, and returns them with the number of elements.
func encodeData(dst []byte, dt string, data []byte) ([]byte, int64, error) {
	switch dt {
	case "FP16", "BF16":
		return dst, 0, fmt.Errorf("receiving %s data via JSON is not supported: send it with the binary tensor data extension (parameter binary_data_size)", dt)
	}
	size, ok := elemSize(dt)
	if !ok {
		return dst, 0, fmt.Errorf("unknown datatype %q", dt)
	}
	var n int64
	err := walk(data, func(tok []byte) error {
		n++
		var err error
		dst, err = appendElem(dst, dt, size, tok)
		return err
	})
	return dst, n, err
}

var errNotNumber = errors.New("not a number")

func appendElem(dst []byte, dt string, size int, tok []byte) ([]byte, error) {
	if dt == "BYTES" {
		if len(tok) == 0 || tok[0] != '"' {
			return dst, fmt.Errorf("BYTES element %.40s is not a string", tok)
		}
		s, err := unquote(tok)
		if err != nil {
			return dst, err
		}
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
		return append(dst, s...), nil
	}
	if dt == "BOOL" {
		switch bstr(tok) {
		case "true":
			return append(dst, 1), nil
		case "false":
			return append(dst, 0), nil
		}
		return dst, fmt.Errorf("BOOL element %.40s is not true or false", tok)
	}
	if len(tok) == 0 || (tok[0] != '-' && (tok[0] < '0' || tok[0] > '9')) {
		return dst, fmt.Errorf("%s element %.40s is not a number", dt, tok)
	}
	s := bstr(tok)
	bad := func(err error) error { return fmt.Errorf("%s element %s: %w", dt, s, errors.Unwrap(err)) }
	switch dt {
	case "FP32":
		f, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return dst, bad(err)
		}
		return binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(f))), nil
	case "FP64":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return dst, bad(err)
		}
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f)), nil
	case "INT8", "INT16", "INT32", "INT64":
		v, err := strconv.ParseInt(s, 10, size*8)
		if err != nil {
			return dst, bad(err)
		}
		return appendLE(dst, uint64(v), size), nil
	default: // UINT8 … UINT64
		v, err := strconv.ParseUint(s, 10, size*8)
		if err != nil {
			return dst, bad(err)
		}
		return appendLE(dst, v, size), nil
	}
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

// unquote returns the contents of the JSON string tok (quotes included): a view
// of tok when it has no escapes.
func unquote(tok []byte) ([]byte, error) {
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
	if err := json.Unmarshal(tok, &s); err != nil {
		return nil, fmt.Errorf("BYTES element: %v", err)
	}
	return []byte(s), nil
}

// maxDepth bounds the nesting of a data array.
const maxDepth = 64

// walk calls elem with each scalar token of the JSON array data (nested arrays
// flattened). data has been validated as JSON by the header's decoder; walk still
// refuses what is not an array of scalars.
func walk(data []byte, elem func(tok []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return errors.New("'data' must be an array")
	}
	depth := 0
	for i < len(data) {
		switch c := data[i]; c {
		case ' ', '\t', '\n', '\r', ',':
			i++
		case '[':
			depth++
			if depth > maxDepth {
				return fmt.Errorf("'data' is nested deeper than %d", maxDepth)
			}
			i++
		case ']':
			depth--
			i++
			if depth == 0 {
				if j := skipSpace(data, i); j != len(data) {
					return errors.New("'data' has bytes after its array")
				}
				return nil
			}
		case '{':
			return errors.New("'data' holds an object; it must hold only numbers, booleans or strings")
		case '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(data) {
				return errors.New("'data': unterminated string")
			}
			if err := elem(data[i : j+1]); err != nil {
				return err
			}
			i = j + 1
		default:
			j := i
			for j < len(data) && data[j] != ',' && data[j] != ']' && data[j] != ' ' && data[j] != '\n' && data[j] != '\t' && data[j] != '\r' {
				j++
			}
			if err := elem(data[i:j]); err != nil {
				return err
			}
			i = j
		}
	}
	return errors.New("'data': unterminated array")
}

func skipSpace(b []byte, i int) int {
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
