package proc

import (
	"bytes"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func FuzzParseStat(f *testing.F) {
	for _, name := range []string{"stat/amd64-weird-comm", "stat/arm64-android", "stat/kthreadd", "stat/kworker"} {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte("1 (a) R"))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		s, err := ParseStat(b)
		if err != nil {
			return
		}
		// The comm is exactly what lies between the first '(' and the last ')'.
		open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if s.Comm != string(b[open+1:closing]) {
			t.Fatalf("comm %q from %q", s.Comm, b)
		}
		if s.PID < 0 || s.PPID < 0 || s.NumThreads < 0 || s.Processor < -1 {
			t.Fatalf("negative field: %+v", s)
		}
	})
}

func FuzzParseSchedStat(f *testing.F) {
	f.Add([]byte("179139493 667146 28\n"))
	f.Add([]byte("0 0 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		s, err := ParseSchedStat(b)
		if err == nil && (s.OnCPU < 0 || s.RunQueueWait < 0) {
			t.Fatalf("negative duration from %q: %+v", b, s)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add(readFixture(f, "arm64/4321/status"))
	f.Add(readFixture(f, "amd64/10014/status"))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		s, err := ParseStatus(b)
		if err == nil && (s.Tgid < 0 || s.Pid < 0 || s.Threads < 0) {
			t.Fatalf("negative field from %q: %+v", b, s)
		}
	})
}
