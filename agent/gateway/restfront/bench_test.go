package restfront

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand"
	"strconv"
	"testing"
)

// The JSON decoder, chosen by measurement (go test -bench ParseJSON): a 150 KB
// FP32 tensor (37,500 floats, ~420 KB of JSON) and a 1.2 MB one. "typed" is what
// a handler would write with encoding/json alone (into []float32, then to
// bytes); "vig" is parseInfer (encoding/json for the header with "data" kept as
// raw JSON, then vig's own one-pass conversion into little-endian bytes).
// The numbers and the choice are in the package doc.

func fp32Body(n int) []byte {
	r := rand.New(rand.NewSource(1))
	b := []byte(`{"inputs":[{"name":"INPUT0","shape":[` + strconv.Itoa(n) + `],"datatype":"FP32","data":[`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(r.Float32()*255), 'g', -1, 32)
	}
	return append(b, "]}]}"...)
}

func BenchmarkParseJSON(b *testing.B) {
	for _, n := range []int{37_500, 300_000} {
		body := fp32Body(n)
		b.Run("typed/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var v struct {
					Inputs []struct {
						Name, Datatype string
						Shape          []int64
						Data           []float32
					}
				}
				if err := json.Unmarshal(body, &v); err != nil {
					b.Fatal(err)
				}
				out := make([]byte, 0, 4*len(v.Inputs[0].Data))
				for _, f := range v.Inputs[0].Data {
					out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
				}
			}
		})
		b.Run("vig/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseInfer("m", "", body, -1, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseBinary: the same tensor sent with the binary data extension
// costs the header alone, whatever its size.
func BenchmarkParseBinary(b *testing.B) {
	for _, n := range []int{0, 150_000, 6_200_000} {
		hdr := []byte(`{"inputs":[{"name":"INPUT0","shape":[` + strconv.Itoa(n) + `],"datatype":"UINT8","parameters":{"binary_data_size":` + strconv.Itoa(n) + `}}]}`)
		body := append(hdr, make([]byte, n)...)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseInfer("m", "", body, len(hdr), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
