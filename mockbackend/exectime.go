package mockbackend

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Execution times vary around a model's base by a factor in [minFactor, maxFactor].
const (
	minFactor = 0.9
	maxFactor = 1.3
)

// ExecTime is the execution time of one frame: base × f, with f in [0.9, 1.3] drawn
// from a hash of (seed, stream, frame). It is a pure function, so a benchmark that
// sends the same frames on two paths makes the backend do the same work on both,
// whatever order the frames run in.
func ExecTime(seed uint64, stream string, frame uint64, base time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	h := uint64(fnvOffset)
	h = fnvUint64(h, seed)
	h = fnvString(h, stream)
	h = fnvUint64(h, frame)
	// FNV-1a mixes its last bytes poorly into the high bits; a splitmix64 finalizer
	// spreads consecutive frame numbers over the whole range.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	u := float64(h>>11) / (1 << 53) // uniform in [0, 1)
	f := minFactor + (maxFactor-minFactor)*u
	return time.Duration(math.Round(float64(base) * f))
}

// FNV-1a, 64 bit: the hash of ExecTime and of the output tensor.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvUint64(h, v uint64) uint64 {
	for i := 0; i < 8; i++ {
		h ^= v & 0xff
		h *= fnvPrime
		v >>= 8
	}
	return h
}

// ParseFrameID splits a request id of the form "<stream>#<frame>" (e.g.
// "detector#42"). ok is false for any other id; the stream part may not be empty
// and the frame must be a decimal uint64 as FrameID writes it (no leading zeros:
// "cam#07" is not frame 7, so that one frame has one id and one execution time).
func ParseFrameID(id string) (stream string, frame uint64, ok bool) {
	i := strings.LastIndexByte(id, '#')
	if i <= 0 || i == len(id)-1 || id[i+1] == '0' && i+2 < len(id) {
		return "", 0, false
	}
	n, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id[:i], n, true
}

// FrameID formats the request id that names stream and frame (see ParseFrameID).
func FrameID(stream string, frame uint64) string {
	return stream + "#" + strconv.FormatUint(frame, 10)
}
