package restfront

import (
	"bytes"
	"io"
	"testing"

	"google.golang.org/grpc/mem"
)

// BenchmarkReadDeclared: a body of declared length read as it arrives, into
// buffers taken as bytes come (readDeclared); BenchmarkReadWhole, the same
// bytes into one buffer of the declared length (what memory safety rules
// out), for comparison.
func BenchmarkReadDeclared(b *testing.B) {
	for _, n := range []int{150_000, 1_200_000, 6_200_000} {
		body := bytes.Repeat([]byte{7}, n)
		b.Run(itoaB(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				src, err := readDeclared(bytes.NewReader(body), n)
				if err != nil {
					b.Fatal(err)
				}
				src.free()
			}
		})
	}
}

func itoaB(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func BenchmarkReadWhole(b *testing.B) {
	for _, n := range []int{150_000, 1_200_000, 6_200_000} {
		body := bytes.Repeat([]byte{7}, n)
		b.Run(itoaB(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			pool := mem.DefaultBufferPool()
			for b.Loop() {
				p := pool.Get(n)
				io.ReadFull(bytes.NewReader(body), *p)
				pool.Put(p)
			}
		})
	}
}
