package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDemoUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--help"}, 0},
		{[]string{"extra"}, 2},
		{[]string{"-c", filepath.Join(t.TempDir(), "missing.yaml")}, 2},
	} {
		if got := runDemo(tc.args); got != tc.code {
			t.Errorf("vig demo %q = %d, want %d", tc.args, got, tc.code)
		}
	}
}

// The demo runs scenario B for a moment and exits 0 when its duration is up.
func TestDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for a second")
	}
	cfg := filepath.Join("..", "..", "examples", "scenarios", "b.yaml")
	if _, err := os.Stat(cfg); err != nil {
		t.Skip(err)
	}
	if got := runDemo([]string{"-c", cfg, "--duration", "1s", "--refresh", "500ms"}); got != 0 {
		t.Errorf("vig demo = %d, want 0", got)
	}
}
