package h2

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/mem"
)

// poison fills buffers of every tier with 0xAA and gives them back, so the next
// messages are assembled in memory that held other bytes.
func poison() {
	for _, t := range msgPool.(*dirtyPool).tiers {
		for range 4 {
			b := msgPool.Get(t.size)
			for i := range *b {
				(*b)[i] = 0xAA
			}
			msgPool.Put(b)
		}
	}
}

// Buffers come back from the pool with their old bytes in them; every message
// is still delivered exactly as sent, whatever the sizes and however its bytes
// are split across reads.
func TestAssemblerDirtyBuffers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 255, 256, 4097, 16 << 10, 16<<10 + 1, 48 << 10, 1<<20 + 7, 6_200_000} {
		poison()
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		wire := binary.BigEndian.AppendUint32([]byte{0}, uint32(size))
		wire = append(wire, body...)
		b := NewBudget(8 << 20)
		var a Assembler
		var got []byte
		delivered := 0
		deliver := func(m mem.BufferSlice, _ bool) error {
			delivered++
			got = m.Materialize()
			m.Free()
			return nil
		}
		r := NewInput(bytes.NewReader(wire), 4096)
		for left := len(wire); left > 0; {
			n := min(left, 1+rng.IntN(20<<10)) // DATA frames of any size
			if _, err := a.Read(r, n, 8<<20, &b, deliver); err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
			left -= n
		}
		if delivered != 1 || !bytes.Equal(got, body) {
			t.Fatalf("%d bytes: %d message(s) delivered, equal %v", size, delivered, bytes.Equal(got, body))
		}
		if b.left != b.limit {
			t.Fatalf("%d bytes: budget %d of %d after delivery", size, b.left, b.limit)
		}
	}
}

// A buffer given back is handed out again (sync.Pool may drop some, so the
// test asks many times), at the length asked for.
func TestDirtyPoolReuses(t *testing.T) {
	reused := false
	for range 100 {
		b := msgPool.Get(maxChunk)
		p := &(*b)[0]
		msgPool.Put(b)
		c := msgPool.Get(1000)
		if len(*c) != 1000 || cap(*c) != 4<<10 && cap(*c) != maxChunk {
			t.Fatalf("Get(1000): len %d cap %d", len(*c), cap(*c))
		}
		d := msgPool.Get(maxChunk - 1)
		if len(*d) != maxChunk-1 {
			t.Fatalf("Get(%d): len %d", maxChunk-1, len(*d))
		}
		reused = reused || &(*d)[0] == p
		msgPool.Put(c)
		msgPool.Put(d)
	}
	if !reused {
		t.Fatal("a 1 MiB buffer given back was never handed out again")
	}
	if b := msgPool.Get(maxChunk + 1); len(*b) != maxChunk+1 {
		t.Fatalf("Get above the largest tier: len %d", len(*b))
	}
}

// BenchmarkAssemble6MB is the cost of assembling a 6.2 MB message from 16 KiB
// DATA frames (grpc-go's frame size) out of a buffered reader.
func BenchmarkAssemble6MB(b *testing.B) {
	const size = 6_200_000
	wire := binary.BigEndian.AppendUint32([]byte{0}, size)
	wire = append(wire, make([]byte, size)...)
	br := NewInput(nil, 64<<10)
	budget := NewBudget(64 << 20)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		br.Reset(bytes.NewReader(wire))
		var a Assembler
		for left := len(wire); left > 0; {
			n := min(left, 16<<10)
			if _, err := a.Read(br, n, 64<<20, &budget, func(m mem.BufferSlice, _ bool) error { m.Free(); return nil }); err != nil {
				b.Fatal(err)
			}
			left -= n
		}
	}
}
