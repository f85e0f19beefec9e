package android

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeADB is an adb on PATH that records every call and plays a phone: the
// device's DEVICE_DIR is a local directory, push and pull copy, shell runs the
// command with sh. devices lists what $FAKE_DEVICES holds.
const fakeADB = `#!/bin/sh
echo "$*" >> "$FAKE_ADB_LOG"
if [ "$1" = devices ]; then
	printf 'List of devices attached\n%b' "$FAKE_DEVICES"
	exit 0
fi
[ "$1" = -s ] || { echo "fake adb: called without -s: $*" >&2; exit 1; }
shift 2
case $1 in
push | pull) cp "$2" "$3" ;;
shell)
	case "$2" in "svc power"*) exit 0 ;; esac
	exec sh -c "$2" ;;
*) echo "fake adb: unexpected $1" >&2; exit 1 ;;
esac
`

// fakeVig stands in for the pushed binary: it serves until SIGTERM, then drains.
const fakeVig = `#!/bin/sh
trap 'echo "drained: 0 answered, 0 lost"; exit 0' TERM
echo "TMPDIR=$TMPDIR args=$*"
echo "vig serving"
while :; do sleep 0.05; done
`

type phone struct {
	t         *testing.T
	dir, log  string
	deviceDir string
	env       []string
	binary    string
}

func newPhone(t *testing.T, devices string) *phone {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	p := &phone{t: t, dir: dir, log: filepath.Join(dir, "adb.log"), deviceDir: filepath.Join(dir, "device", "vig"), binary: filepath.Join(dir, "vig-linux-arm64")}
	for name, body := range map[string]string{"adb": fakeADB, "vig-linux-arm64": fakeVig} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "adb"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "FAKE_ADB_LOG="+p.log,
		"FAKE_DEVICES="+devices, "DEVICE_DIR="+p.deviceDir, "ANDROID_SERIAL=")
	t.Cleanup(func() { p.run("stop") }) // a failed test must not leave the fake vig running
	return p
}

func (p *phone) run(args ...string) (string, error) {
	cmd := exec.Command("sh", append([]string{"vig-adb.sh"}, args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// calls returns the adb calls recorded since the last call to calls.
func (p *phone) calls() []string {
	b, _ := os.ReadFile(p.log)
	os.Remove(p.log)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && l != "devices" {
			out = append(out, strings.ReplaceAll(l, p.deviceDir, "DIR"))
		}
	}
	return out
}

func (p *phone) want(step string, got []string, want ...string) {
	p.t.Helper()
	at := 0
	for _, w := range want {
		found := false
		for ; at < len(got); at++ {
			if strings.Contains(got[at], w) {
				found = true
				at++
				break
			}
		}
		if !found {
			p.t.Errorf("%s: adb calls lack %q (in order):\n%s", step, w, strings.Join(got, "\n"))
			return
		}
	}
}

func TestADBScript(t *testing.T) {
	p := newPhone(t, "R5CT12345AB\tdevice\n")
	out, err := p.run("push", "--binary", p.binary, "--config", "../examples/demo.yaml")
	if err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	p.want("push", p.calls(), "-s R5CT12345AB shell mkdir -p DIR", "push "+p.binary+" DIR/vig", "shell chmod 755 DIR/vig", "push ../examples/demo.yaml DIR/vig.yaml")
	if fi, err := os.Stat(filepath.Join(p.deviceDir, "vig")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("vig on the device is not executable: %v %v", fi, err)
	}

	if out, err = p.run("start", "--stayon"); err != nil || !strings.Contains(out, "vig runs on R5CT12345AB") {
		t.Fatalf("start: %v\n%s", err, out)
	}
	p.want("start", p.calls(), "shell svc power stayon usb", "nohup ./vig serve -c vig.yaml", "grep -q 'vig serving' vig.log")
	if out, err := p.run("start"); err == nil || !strings.Contains(out, "already runs") {
		t.Errorf("second start: %v %q, want a refusal", err, out)
	}
	p.calls()
	if out, err = p.run("stop"); err != nil || !strings.Contains(out, "drained: 0 answered, 0 lost") {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	p.want("stop", p.calls(), "kill -TERM", "shell svc power stayon false")

	dest := filepath.Join(p.dir, "pulled.log")
	if out, err = p.run("logs", dest); err != nil {
		t.Fatalf("logs: %v\n%s", err, out)
	}
	p.want("logs", p.calls(), "pull DIR/vig.log "+dest)
	b, err := os.ReadFile(dest)
	if err != nil || !strings.Contains(string(b), "TMPDIR="+p.deviceDir+" args=serve -c vig.yaml") || !strings.Contains(string(b), "drained:") {
		t.Errorf("pulled log %q, %v", b, err)
	}
	if out, err := p.run("stop"); err == nil || !strings.Contains(out, "not running") {
		t.Errorf("stop when stopped: %v %q", err, out)
	}
	// Without --stayon, stop leaves the power setting alone.
	p.run("start")
	p.calls()
	p.run("stop")
	for _, c := range p.calls() {
		if strings.Contains(c, "svc power") {
			t.Errorf("stop after a start without --stayon called %q", c)
		}
	}
}

// TestADBPushConfig: push installs examples/android.yaml by default (a governor
// for the phone's server, no embedded mock, no /tmp), keeps a config changed on
// the phone, and replaces it only with --force.
func TestADBPushConfig(t *testing.T) {
	p := newPhone(t, "R5CT1\tdevice\n")
	onPhone := filepath.Join(p.deviceDir, "vig.yaml")
	out, err := p.run("push", "--binary", p.binary)
	if err != nil || !strings.Contains(out, "android.yaml as vig.yaml") {
		t.Fatalf("push: %v\n%s", err, out)
	}
	got, _ := os.ReadFile(onPhone)
	if want, _ := os.ReadFile("../examples/android.yaml"); string(got) != string(want) {
		t.Fatalf("default config on the phone is not examples/android.yaml:\n%s", got)
	}
	if strings.Contains(string(got), "embedded") || strings.Contains(string(got), `"/tmp`) {
		t.Errorf("examples/android.yaml must govern the phone's server, with no /tmp socket:\n%s", got)
	}
	// Unchanged on the phone: another --config replaces it.
	if out, err := p.run("push", "--binary", p.binary, "--config", "../examples/demo.yaml"); err != nil || !strings.Contains(out, "the old one is vig.yaml.bak") {
		t.Fatalf("push over an unchanged config: %v\n%s", err, out)
	}
	// Changed on the phone: a plain push keeps it and says so.
	if err := os.WriteFile(onPhone, []byte("# edited on the phone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := p.run("push", "--binary", p.binary); err != nil || !strings.Contains(out, "kept the vig.yaml changed on the phone") {
		t.Fatalf("re-push: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(onPhone); string(b) != "# edited on the phone\n" {
		t.Fatalf("a changed config was overwritten: %q", b)
	}
	p.calls()
	out, err = p.run("push", "--binary", p.binary, "--config", "../examples/demo.yaml")
	if err == nil || !strings.Contains(out, "--force") {
		t.Fatalf("--config over a changed config: %v\n%s", err, out)
	}
	for _, c := range p.calls() {
		if strings.Contains(c, " push ") && !strings.Contains(c, " pull ") {
			t.Errorf("refused push still pushed: %q", c)
		}
	}
	if out, err := p.run("push", "--binary", p.binary, "--config", "../examples/demo.yaml", "--force"); err != nil {
		t.Fatalf("--force: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(onPhone + ".bak"); string(b) != "# edited on the phone\n" {
		t.Errorf("--force lost the changed config: .bak %q", b)
	}
}

// TestADBHelp: --help works without adb installed and prints no script lines.
func TestADBHelp(t *testing.T) {
	cmd := exec.Command("sh", "vig-adb.sh", "--help")
	cmd.Env = append(os.Environ(), "ADB=/nonexistent/adb")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "vig-adb.sh push") || strings.Contains(string(out), "set -eu") || strings.Contains(string(out), "#") {
		t.Errorf("--help without adb: %v\n%s", err, out)
	}
}

func TestADBScriptDevices(t *testing.T) {
	tests := []struct {
		name, devices, serial, want string
	}{
		{"no device", "", "", "no device: connect a phone by USB with USB debugging on"},
		{"two devices", "R5CT1\tdevice\nemulator-5554\tdevice\n", "", "2 devices attached (R5CT1 emulator-5554): set ANDROID_SERIAL"},
		{"unauthorized", "R5CT1\tunauthorized\n", "", "accept the USB debugging prompt"},
		{"serial not attached", "R5CT1\tdevice\n", "XYZ", "ANDROID_SERIAL=XYZ is not a ready device; ready: R5CT1"},
		{"serial picks one of two", "R5CT1\tdevice\nemulator-5554\tdevice\n", "emulator-5554", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPhone(t, tt.devices)
			p.env = append(p.env, "ANDROID_SERIAL="+tt.serial)
			out, err := p.run("push", "--binary", p.binary, "--config", "../examples/demo.yaml")
			calls := p.calls()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				p.want("push", calls, "-s "+tt.serial+" push")
				return
			}
			if err == nil || !strings.Contains(out, tt.want) {
				t.Errorf("got %v %q, want a failure saying %q", err, out, tt.want)
			}
			if len(calls) != 0 {
				t.Errorf("adb used although no device was chosen: %q", calls)
			}
		})
	}
	// ADB= names the adb binary; a missing one says how to get it.
	p := newPhone(t, "")
	p.env = append(p.env, "ADB="+filepath.Join(p.dir, "no-such-adb"))
	if out, err := p.run("status"); err == nil || !strings.Contains(out, "set ADB=") {
		t.Errorf("missing adb: %v %q", err, out)
	}
	p.env = append(p.env, "ADB="+filepath.Join(p.dir, "adb"), "FAKE_DEVICES=R1\tdevice\n", "PATH=/usr/bin:/bin")
	if out, err := p.run("status"); err != nil || !strings.Contains(out, "vig is not running on R1") {
		t.Errorf("ADB=path outside PATH: %v %q", err, out)
	}
}
