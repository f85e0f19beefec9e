package main

import "testing"

func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"everything"}, 2},
		{[]string{"wire", "extra"}, 2},
		{[]string{"--quick"}, 2},
		{[]string{"--bogus"}, 2},
		{[]string{"--help"}, 0},
		{[]string{"wire", "-h"}, 0},
	} {
		if got := runBench(tc.args); got != tc.code {
			t.Errorf("vig bench %q = %d, want %d", tc.args, got, tc.code)
		}
	}
}

// A missing scenario directory is reported (exit 1) before anything runs.
func TestBenchMissingScenarios(t *testing.T) {
	if got := runBench([]string{"wire", "--quick", "--scenarios", t.TempDir(), "--out", t.TempDir()}); got != 1 {
		t.Errorf("vig bench wire with an empty scenario dir = %d, want 1", got)
	}
}
