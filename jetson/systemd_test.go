package jetson

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var units = []string{"systemd/vig.service", "systemd/vig-profiling.service"}

// unitKeys returns a unit file's key=value lines by "Section.Key" (a key set twice
// keeps both values, space-joined).
func unitKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#':
		case l[0] == '[':
			section = strings.Trim(l, "[]")
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Errorf("%s: line %q is not key=value", path, l)
			}
			k = section + "." + k
			if old, dup := keys[k]; dup {
				v = strings.TrimSpace(old + " " + v)
			}
			keys[k] = v
		}
	}
	return keys
}

func TestUnits(t *testing.T) {
	want := map[string]string{
		"Service.Type": "notify", "Service.WatchdogSec": "10s", "Service.Restart": "on-failure",
		"Service.NoNewPrivileges": "yes", "Service.ProtectSystem": "strict", "Service.ProtectHome": "yes",
		"Service.PrivateTmp": "yes", "Service.StateDirectory": "vig", "Service.RuntimeDirectory": "vig",
		"Service.NotifyAccess": "main", "Install.WantedBy": "multi-user.target",
	}
	for _, u := range units {
		k := unitKeys(t, u)
		for key, v := range want {
			if k[key] != v {
				t.Errorf("%s: %s=%q, want %q", u, key, k[key], v)
			}
		}
		if !strings.HasPrefix(k["Service.ExecStart"], "/usr/local/bin/vig serve --strict -c /etc/vig/vig.yaml") {
			t.Errorf("%s: ExecStart=%q", u, k["Service.ExecStart"])
		}
		if !strings.Contains(k["Unit.After"], "tritonserver.service") || strings.Contains(k["Unit.Requires"]+k["Unit.Wants"], "triton") {
			t.Errorf("%s: After=%q Requires=%q Wants=%q: want ordered after Triton's unit, not depending on it", u, k["Unit.After"], k["Unit.Requires"], k["Unit.Wants"])
		}
		if !strings.Contains(k["Service.RestrictAddressFamilies"], "AF_NETLINK") {
			t.Errorf("%s: the route report needs AF_NETLINK", u)
		}
	}
	base, prof := unitKeys(t, units[0]), unitKeys(t, units[1])
	if base["Service.CapabilityBoundingSet"] != "" || base["Service.AmbientCapabilities"] != "" || base["Service.User"] != "vig" {
		t.Errorf("vig.service must run as user vig without capabilities: %q %q %q",
			base["Service.User"], base["Service.CapabilityBoundingSet"], base["Service.AmbientCapabilities"])
	}
	for _, k := range []string{"Service.CapabilityBoundingSet", "Service.AmbientCapabilities"} {
		if prof[k] != "CAP_BPF CAP_PERFMON" {
			t.Errorf("vig-profiling.service: %s=%q, want exactly CAP_BPF CAP_PERFMON", k, prof[k])
		}
	}
	if !strings.Contains(prof["Service.ExecStart"], "--profile /var/lib/vig/") || prof["Unit.Conflicts"] != "vig.service" {
		t.Errorf("vig-profiling.service: ExecStart=%q Conflicts=%q", prof["Service.ExecStart"], prof["Unit.Conflicts"])
	}
}

// TestSystemdAnalyzeVerify runs systemd's own checker over both units. It prints
// its problems and still exits 0, so any output is a failure. A deliberately broken
// unit first proves that this systemd-analyze reports problems at all.
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install -y systemd; .ci/run does)")
	}
	dir := t.TempDir()
	// verify checks that ExecStart's binary exists and is executable.
	bin := filepath.Join(dir, "vig")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	verify := func(files ...string) string {
		out, err := exec.Command(sa, append([]string{"verify", "--man=no"}, files...)...).CombinedOutput()
		if err != nil && len(out) == 0 {
			t.Fatalf("systemd-analyze verify: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	bad := filepath.Join(dir, "broken.service")
	if err := os.WriteFile(bad, []byte("[Service]\nType=notfy\nExecStart="+bin+"\nWatchdogSecs=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := verify(bad); !strings.Contains(out, "notfy") || !strings.Contains(out, "WatchdogSecs") {
		t.Fatalf("systemd-analyze verify did not report a broken unit (%q): it cannot vouch for ours", out)
	}
	var files []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte("/usr/local/bin/vig"), []byte(bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	if out := verify(files...); out != "" {
		t.Errorf("systemd-analyze verify reports problems:\n%s", out)
	}
}
