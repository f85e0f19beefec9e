package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// h2specMaxFailed is what vig may fail of h2spec's cases: none today (the
// package doc of gateway says which RFC text a failure would have to cite).
const h2specMaxFailed = 0

// TestH2Spec runs h2spec (RFC 9113 and RFC 7541 conformance, build/h2spec.sh
// pins the version) against a gateway when the binary is installed; the
// comparison with grpc-go and nginx is build/h2spec.sh's (make h2spec).
func TestH2Spec(t *testing.T) {
	bin, err := exec.LookPath("h2spec")
	if err != nil {
		home, _ := os.UserHomeDir()
		if _, e := os.Stat(filepath.Join(home, "go", "bin", "h2spec")); e != nil {
			t.Skip("h2spec is not installed: go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible (or make h2spec)")
		}
		bin = filepath.Join(home, "go", "bin", "h2spec")
	}
	if testing.Short() {
		t.Skip("-short: h2spec takes a few seconds")
	}
	e, _ := withProbe(t, "")
	host, port, _ := strings.Cut(e.tcp, ":")
	out, _ := exec.Command(bin, "-h", host, "-p", port, "-o", "5").CombinedOutput() // exit status 1 when a case fails
	m := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("h2spec printed no summary:\n%s", out)
	}
	failed, _ := strconv.Atoi(string(m[4]))
	t.Logf("h2spec: %s", m[0])
	if failed > h2specMaxFailed {
		i := strings.Index(string(out), "Failures:")
		t.Errorf("h2spec: %d cases failed (at most %d):\n%s", failed, h2specMaxFailed, out[max(i, 0):])
	}
}
