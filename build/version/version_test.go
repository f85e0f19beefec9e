package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestStampedVersionWins(t *testing.T) {
	orig := version
	t.Cleanup(func() { version = orig })
	version = "v1.2.3"
	if got := String(); got != "v1.2.3" {
		t.Errorf("String() = %q with a stamped version", got)
	}
	if got := Full(); !strings.HasPrefix(got, "vig v1.2.3 ") || !strings.HasSuffix(got, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("Full() = %q", got)
	}
	version = ""
	if got := String(); got == "" || strings.Contains(got, " ") {
		t.Errorf("unstamped String() = %q: want the build info's version or devel", got)
	}
}

// TestUnstampedNamesTheRelease: a build without -ldflags (go build, go test) still
// names the release its source descends from, read from the committed VERSION file.
func TestUnstampedNamesTheRelease(t *testing.T) {
	orig := version
	t.Cleanup(func() { version = orig })
	version = ""
	rel := Release()
	if !strings.HasPrefix(rel, "v") || strings.Count(rel, ".") != 2 || strings.ContainsAny(rel, " \n") {
		t.Fatalf("Release() = %q: want vMAJOR.MINOR.PATCH from build/version/VERSION", rel)
	}
	if got := String(); !strings.HasPrefix(got, "v") {
		t.Errorf("unstamped String() = %q: want %s… or a module version", got, rel)
	}
}
