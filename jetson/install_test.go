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
	// The default config governs a Triton: no embedded mock on Triton's port, a
	// socket in vig.service's RuntimeDirectory (PrivateTmp hides /tmp).
	out, err := runInstall(t, env, "--binary", bin)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if !strings.Contains(out, "installed") || !strings.Contains(out, "examples/jetson.yaml as /etc/vig/vig.yaml") || !strings.Contains(out, "--strict") {
		t.Errorf("install does not say what it installed:\n%s", out)
	}
	cfgText, err := os.ReadFile(filepath.Join(dest, "etc/vig/vig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := os.ReadFile("../examples/jetson.yaml"); string(cfgText) != string(want) {
		t.Error("the default config is not examples/jetson.yaml")
	}
	if strings.Contains(string(cfgText), "embedded") || strings.Contains(string(cfgText), "/tmp/") || !strings.Contains(string(cfgText), "/run/vig/") {
		t.Errorf("the default config must govern Triton (no embedded backend) with its socket under /run/vig:\n%s", cfgText)
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

	// An unchanged config is replaced by another --config (the old one kept as .bak).
	cfg := filepath.Join(dest, "etc/vig/vig.yaml")
	if out, err := runInstall(t, env, "--binary", bin, "--config", "../examples/demo.yaml"); err != nil || !strings.Contains(out, "replaced /etc/vig/vig.yaml") {
		t.Fatalf("re-install over an unchanged config: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(cfg); !strings.Contains(string(b), "embedded: true") {
		t.Error("the unchanged config was not replaced by --config")
	}
	if b, _ := os.ReadFile(cfg + ".bak"); string(b) != string(cfgText) {
		t.Error("the replaced config was not kept as vig.yaml.bak")
	}

	// A changed config: a re-install keeps it and says so; the profiling variant
	// replaces the plain one.
	if err := os.WriteFile(cfg, []byte("# edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runInstall(t, env, "--profiling", "--binary", bin)
	if err != nil || !strings.Contains(out, "kept your changed /etc/vig/vig.yaml") {
		t.Fatalf("install --profiling: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "# edited\n" {
		t.Errorf("config overwritten: %q", b)
	}
	if b, _ := os.ReadFile(cfg + ".new"); string(b) == "" {
		t.Error("the new default is not beside the kept config as vig.yaml.new")
	}
	// Another --config over a changed one stops, installing nothing, unless --force.
	before := len(readCalls(t, calls))
	out, err = runInstall(t, env, "--binary", bin, "--config", "../examples/android.yaml")
	if err == nil || !strings.Contains(out, "--force") || len(readCalls(t, calls)) != before {
		t.Fatalf("--config over a changed config: %v, %d calls\n%s", err, len(readCalls(t, calls))-before, out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "# edited\n" {
		t.Errorf("config overwritten without --force: %q", b)
	}
	if out, err := runInstall(t, env, "--profiling", "--force", "--binary", bin, "--config", "../examples/jetson.yaml"); err != nil || !strings.Contains(out, "replaced") {
		t.Fatalf("--force: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(cfg + ".bak"); string(b) != "# edited\n" {
		t.Errorf("--force lost the changed config: .bak is %q", b)
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
		{[]string{"--config"}, "--config needs a FILE"},
	} {
		out, err := runInstall(t, env, tt.args...)
		if err == nil || !strings.Contains(out, tt.want) {
			t.Errorf("install %v: %v %q, want a failure saying %q", tt.args, err, out, tt.want)
		}
	}
	// --help prints the header comment and nothing of the script.
	out, err = runInstall(t, env, "--help")
	if err != nil || !strings.Contains(out, "jetson/install.sh --uninstall") || strings.Contains(out, "set -eu") || strings.Contains(out, "#") {
		t.Errorf("--help: %v\n%s", err, out)
	}
}
