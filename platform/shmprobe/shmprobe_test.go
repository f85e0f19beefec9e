package shmprobe

import "testing"

func TestKernelAtLeast(t *testing.T) {
	tests := []struct {
		rel  string
		want bool
	}{
		{"6.1.0-18-arm64", true},
		{"3.17.0", true},
		{"3.16.7-ckt", false},
		{"4.14.190-perf+", true},
		{"3.18", true},
		{"2.6.32-754.el6.x86_64", false},
		{"5.10.43+", true},
		{"garbage", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := kernelAtLeast(tt.rel, 3, 17); got != tt.want {
			t.Errorf("kernelAtLeast(%q, 3.17) = %v", tt.rel, got)
		}
	}
}

func FuzzKernelAtLeast(f *testing.F) {
	f.Add("6.1.0-18-arm64")
	f.Add("3.17")
	f.Fuzz(func(t *testing.T, rel string) {
		if kernelAtLeast(rel, 3, 17) && !kernelAtLeast(rel, 3, 0) {
			t.Fatalf("%q: ≥ 3.17 but not ≥ 3.0", rel)
		}
	})
}
