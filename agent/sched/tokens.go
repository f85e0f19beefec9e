package sched

// tokenIndex maps live tokens to request-table indices. It is an
// open-addressing hash table with linear probing and backward-shift deletion,
// sized once at twice the request table, so inserts and deletes never
// allocate and never leave tombstones (a Go map with constant churn may
// rehash and allocate).
type tokenIndex struct {
	keys []uint64
	vals []int32 // request index + 1; 0 marks an empty bucket
	mask uint64
}

func newTokenIndex(n int) tokenIndex {
	size := 8
	for size < 2*n {
		size <<= 1
	}
	return tokenIndex{keys: make([]uint64, size), vals: make([]int32, size), mask: uint64(size - 1)}
}

func (t *tokenIndex) home(k uint64) uint64 {
	// Fibonacci hashing spreads sequential tokens over the table.
	return (k * 0x9E3779B97F4A7C15) >> 32 & t.mask
}

// get returns the request index of k, or -1.
func (t *tokenIndex) get(k uint64) int32 {
	for i := t.home(k); ; i = (i + 1) & t.mask {
		if t.vals[i] == 0 {
			return -1
		}
		if t.keys[i] == k {
			return t.vals[i] - 1
		}
	}
}

// put inserts k (which must not be present). The table is never full: it
// has twice as many buckets as there are requests.
func (t *tokenIndex) put(k uint64, v int32) {
	i := t.home(k)
	for t.vals[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.keys[i], t.vals[i] = k, v+1
}

// del removes k if present.
func (t *tokenIndex) del(k uint64) {
	i := t.home(k)
	for {
		if t.vals[i] == 0 {
			return
		}
		if t.keys[i] == k {
			break
		}
		i = (i + 1) & t.mask
	}
	// Shift later members of the probe run back so lookups need no
	// tombstones.
	for j := (i + 1) & t.mask; t.vals[j] != 0; j = (j + 1) & t.mask {
		h := t.home(t.keys[j])
		// Move j to i if its home is not in the cyclic range (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.vals[i] = 0
}
