package bench

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100..1, unsorted
	}
	for _, tc := range []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"empty", nil, 0.5, 0},
		{"one", []float64{7}, 0.99, 7},
		{"p50 of 1..100", hundred, 0.50, 50},
		{"p95 of 1..100", hundred, 0.95, 95},
		{"p99 of 1..100", hundred, 0.99, 99},
		{"p100", hundred, 1, 100},
		{"p0", hundred, 0, 1},
		{"p50 of 4", []float64{4, 1, 3, 2}, 0.5, 2},
		{"p99 of 4", []float64{4, 1, 3, 2}, 0.99, 4},
	} {
		if got := Percentile(tc.xs, tc.q); got != tc.want {
			t.Errorf("%s: Percentile(q=%v) = %v, want %v", tc.name, tc.q, got, tc.want)
		}
	}
	// The input is not modified.
	if hundred[0] != 100 {
		t.Errorf("Percentile sorted its input")
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{-1, 5}, 2},
	} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	xs := make([]float64, 200)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	d := Summarize(xs)
	if d.N != 200 || d.P50 != 100 || d.P95 != 190 || d.P99 != 198 || d.Max != 200 {
		t.Errorf("Summarize(1..200) = %+v", d)
	}
	if z := Summarize(nil); z != (Dist{}) {
		t.Errorf("Summarize(nil) = %+v", z)
	}
	if math.IsNaN(Summarize([]float64{1}).P99) {
		t.Error("NaN")
	}
}

func TestSlope(t *testing.T) {
	for _, tc := range []struct {
		xs, ys []float64
		want   float64
	}{
		{[]float64{0, 1, 2}, []float64{1, 3, 5}, 2},
		{[]float64{0, 1, 2, 3}, []float64{5, 5, 5, 5}, 0},
		{[]float64{0, 1, 2, 3}, []float64{0, 1, 0, 1}, 0.2},
		{[]float64{2, 2}, []float64{1, 3}, 0},
		{[]float64{1}, []float64{1}, 0},
	} {
		if got := Slope(tc.xs, tc.ys); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Slope(%v, %v) = %v, want %v", tc.xs, tc.ys, got, tc.want)
		}
	}
}
