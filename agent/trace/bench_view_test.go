package trace

import "testing"

// BenchmarkWriteChrome: a window of 30000 frames (about 100000 events),
// written as Chrome JSON; reports ns and bytes per event.
func BenchmarkWriteChrome(b *testing.B) {
	w := busyWindow(30000)
	var n countingWriter
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		if err := WriteChrome(&n, w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(w.Events)), "ns/event")
	b.ReportMetric(float64(n)/float64(len(w.Events)), "B/event")
}

// BenchmarkWriteSVG: the timeline page's drawing of 3000 frames (some 3 s
// of a busy vig).
func BenchmarkWriteSVG(b *testing.B) {
	w := busyWindow(3000)
	var n countingWriter
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		if err := WriteSVG(&n, w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(w.Events)), "ns/event")
	b.ReportMetric(float64(n)/float64(len(w.Events)), "B/event")
}

type countingWriter int

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}
