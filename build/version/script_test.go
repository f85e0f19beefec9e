package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionScript: build/version.sh names the release from the committed
// VERSION file where no tag travelled with the source (v0.4.0, then
// v0.4.0-N-gHASH), and from git describe where a tag did.
func TestVersionScript(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("no git: %v", err)
	}
	dir := t.TempDir()
	script, err := os.ReadFile("../version.sh")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "build", "version"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "build", "version.sh"), script, 0o755))
	must(os.WriteFile(filepath.Join(dir, "build", "version", "VERSION"), []byte("v0.4.0\n"), 0o644))
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func() string {
		t.Helper()
		out, err := exec.Command("sh", filepath.Join(dir, "build", "version.sh")).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "release")
	if got := version(); got != "v0.4.0" {
		t.Errorf("at the commit that set VERSION: %q, want v0.4.0", got)
	}
	must(os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644))
	git("add", "x")
	git("commit", "-q", "-m", "next")
	if got, want := version(), "v0.4.0-1-g"+git("rev-parse", "--short", "HEAD"); got != want {
		t.Errorf("a commit later, no tag: %q, want %q", got, want)
	}
	git("tag", "-a", "v0.5.0", "-m", "v0.5.0")
	if got := version(); got != "v0.5.0" {
		t.Errorf("at a tag: %q, want v0.5.0", got)
	}
}
