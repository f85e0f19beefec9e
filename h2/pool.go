package h2

import (
	"sync"

	"google.golang.org/grpc/mem"
)

// msgPool holds the buffers messages are assembled in: the chunk sizes of
// chunkSize, each tier a sync.Pool. Unlike grpc-go's default pool it does not
// clear a buffer it hands out again. Clearing is a full pass over the memory of
// every message (a 6.2 MB frame spent 8 % of vig's CPU in memclr), and it buys
// nothing here: the Assembler fills every byte of a chunk from the wire before a
// message that holds it is delivered, and a chunk of a message never completed
// goes back unread. `go test -bench Assemble6MB ./h2`: 1.2–1.7 ms per 6.2 MB
// message with this pool, 4.6–9.0 ms with grpc-go's (2-vCPU VM, one run each).
var msgPool mem.BufferPool = newDirtyPool(256, 4<<10, firstChunk, secondChunk, maxChunk)

// dirtyPool is a tiered pool of buffers whose previous contents stay in them.
type dirtyPool struct {
	tiers []dirtyTier // by size, ascending
}

type dirtyTier struct {
	size int
	pool *sync.Pool
}

func newDirtyPool(sizes ...int) *dirtyPool {
	p := &dirtyPool{}
	for _, s := range sizes {
		p.tiers = append(p.tiers, dirtyTier{size: s, pool: new(sync.Pool)})
	}
	return p
}

// tier is the smallest tier that holds n bytes, nil when n exceeds them all.
func (p *dirtyPool) tier(n int) *dirtyTier {
	for i := range p.tiers {
		if n <= p.tiers[i].size {
			return &p.tiers[i]
		}
	}
	return nil
}

// Get returns a buffer of length n whose bytes are whatever the pool's last
// user left in it.
func (p *dirtyPool) Get(n int) *[]byte {
	t := p.tier(n)
	if t == nil {
		b := make([]byte, n)
		return &b
	}
	if b, ok := t.pool.Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, t.size)
	return &b
}

// Put gives b back to the tier of its capacity; a buffer of no tier's size is
// left to the garbage collector.
func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if t := p.tier(c); t != nil && t.size == c {
		t.pool.Put(b)
	}
}
