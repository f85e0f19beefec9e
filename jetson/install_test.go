package jetson

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// installEnv prepares a DESTDIR, a binary and fake systemctl/useradd that record
// their arguments, one call per line, in calls.
func installEnv(t *testing.T) (dest, bin, calls string, env []string) {
	t.Helper()
	dir := t.TempDir()
	dest, calls = filepath.Join(dir, "root"), filepath.Join(dir, "calls")
	bin = filepath.Join(dir, "vig-linux-arm64")
	for name, body := range map[string]string{
		"vig-linux-arm64": "binary",
		"systemctl":       "#!/bin/sh\necho \"systemctl $*\" >> " + calls + "\n",
		"useradd":         "#!/bin/sh\necho \"useradd $*\" >> " + calls + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env = append(os.Environ(), "DESTDIR="+dest, "SYSTEMCTL="+filepath.Join(dir, "systemctl"), "USERADD="+filepath.Join(dir, "useradd"))
	return dest, bin, calls, env
}

func runInstall(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"install.sh"}, args...)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func readCalls(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestInstallScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dest, bin, calls, env := installEnv(t)
	if out, err := runInstall(t, env, "--binary", bin, "--config", "../examples/demo.yaml"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	for _, f := range []string{"usr/local/bin/vig", "etc/vig/vig.yaml", "etc/systemd/system/vig.service"} {
		if _, err := os.Stat(filepath.Join(dest, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dest, "usr/local/bin/vig")); err == nil && fi.Mode().Perm() != 0o755 {
		t.Errorf("binary mode %v, want 0755", fi.Mode().Perm())
	}
	got := strings.Join(readCalls(t, calls), "\n")
	wantOrder := []string{"systemctl disable --now vig-profiling.service", "systemctl daemon-reload", "systemctl enable --now vig.service"}
	at := 0
	for _, w := range wantOrder {
		i := strings.Index(got[at:], w)
		if i < 0 {
			t.Fatalf("calls lack %q after position %d:\n%s", w, at, got)
		}
		at += i + len(w)
	}
	if _, err := exec.Command("id", "vig").CombinedOutput(); err != nil && !strings.Contains(got, "useradd --system") {
		t.Errorf("no user vig here and useradd was not called:\n%s", got)
	}

	// The profiling variant replaces the plain one; an edited config is kept.
	cfg := filepath.Join(dest, "etc/vig/vig.yaml")
	if err := os.WriteFile(cfg, []byte("# edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runInstall(t, env, "--profiling", "--binary", bin, "--config", "../examples/demo.yaml"); err != nil || !strings.Contains(out, "keeping the existing") {
		t.Fatalf("install --profiling: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "# edited\n" {
		t.Errorf("config overwritten: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dest, "etc/systemd/system/vig.service")); !os.IsNotExist(err) {
		t.Errorf("vig.service still installed beside vig-profiling.service: %v", err)
	}
	if c := readCalls(t, calls); c[len(c)-1] != "systemctl enable --now vig-profiling.service" {
		t.Errorf("last call %q", c[len(c)-1])
	}

	if out, err := runInstall(t, env, "--uninstall"); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	for _, f := range []string{"usr/local/bin/vig", "etc/systemd/system/vig-profiling.service"} {
		if _, err := os.Stat(filepath.Join(dest, f)); !os.IsNotExist(err) {
			t.Errorf("%s left after uninstall: %v", f, err)
		}
	}
	if _, err := os.Stat(cfg); err != nil {
		t.Errorf("uninstall removed the config: %v", err)
	}
	if c := readCalls(t, calls); c[len(c)-1] != "systemctl daemon-reload" {
		t.Errorf("uninstall ends with %q, want daemon-reload", c[len(c)-1])
	}

	// Failures say what to do.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--binary", filepath.Join(t.TempDir(), "missing")}, "run make arm64"},
		{[]string{"--frobnicate"}, "unknown argument"},
	} {
		out, err := runInstall(t, env, tt.args...)
		if err == nil || !strings.Contains(out, tt.want) {
			t.Errorf("install %v: %v %q, want a failure saying %q", tt.args, err, out, tt.want)
		}
	}
}
