package gateway

import "testing"

func TestValidShmKey(t *testing.T) {
	for key, want := range map[string]bool{
		"/frames": true, "/vig-cam0.1": true, "/..x": true,
		"": false, "/": false, "frames": false, "/a/b": false, "/../etc": false, "/..": false, "/.": false, "//": false,
	} {
		if got := validShmKey(key); got != want {
			t.Errorf("validShmKey(%q) = %v, want %v", key, got, want)
		}
	}
}
