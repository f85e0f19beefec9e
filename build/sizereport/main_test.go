package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func TestPackageOf(t *testing.T) {
	for _, tt := range []struct{ sym, pkg, mod string }{
		{"github.com/vig-edge/vig/agent/gateway.(*Gateway).Serve", "github.com/vig-edge/vig/agent/gateway", "github.com/vig-edge/vig"},
		{"runtime.mallocgc", "runtime", "std"},
		{"type:*net/http.Request", "net/http", "std"},
		{"type:.eq.[2]interface {}", "(type data)", "(type data)"},
		{"sync/atomic.(*Pointer[go.shape.struct { a.b/c.d int }]).Load", "sync/atomic", "std"},
		{"slices.Sort[go.shape.[]string,go.shape.string]", "slices", "std"},
		{"go:func.*", "(linker: func)", "(linker: func)"},
		{"go:itab.*net.TCPConn,net.Conn", "net", "std"},
		{"github.com/coreos/go-systemd/v22/daemon.SdNotify", "github.com/coreos/go-systemd/v22/daemon", "github.com/coreos/go-systemd/v22"},
		{"go.yaml.in/yaml/v3.(*parser).parse", "go.yaml.in/yaml/v3", "go.yaml.in/yaml/v3"},
		{"google.golang.org/grpc/internal/transport.(*http2Client).reader", "google.golang.org/grpc/internal/transport", "google.golang.org/grpc"},
		{"golang.org/x/sys/unix.Syscall", "golang.org/x/sys/unix", "golang.org/x/sys"},
		{"vendor/golang.org/x/net/http2/hpack.(*Decoder).Write", "vendor/golang.org/x/net/http2/hpack", "std (vendored golang.org/x)"},
		{"main.main", "main", "main"},
		{"", "(linker: )", "(linker: )"},
	} {
		pkg := PackageOf(tt.sym)
		if pkg != tt.pkg {
			t.Errorf("PackageOf(%q) = %q, want %q", tt.sym, pkg, tt.pkg)
		}
		if mod := ModuleOf(pkg); mod != tt.mod {
			t.Errorf("ModuleOf(%q) = %q, want %q", pkg, mod, tt.mod)
		}
	}
}

func TestAggregate(t *testing.T) {
	got := Aggregate([]Symbol{{"a.x", 1}, {"b.y", 5}, {"a.z", 4}, {"c.w", 5}}, PackageOf)
	want := []Entry{{"a", 5}, {"b", 5}, {"c", 5}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%v, want %v", got, want)
		}
	}
}

// The report on a real binary (sizereport itself, built unstripped) names the
// runtime and the standard library; a stripped build is refused with the fix.
// (go test's own binaries are stripped, so the test builds its subjects.)
func TestReportOnABinary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build a binary to report on")
	}
	dir := t.TempDir()
	build := func(name string, flags ...string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command(gobin, append(append([]string{"build"}, flags...), "-o", out, ".")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
		return out
	}
	var out bytes.Buffer
	if err := run(&out, build("full"), 1000); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"by module:", "%  std\n", "largest 1000 packages:", "%  runtime\n", "%  debug/elf\n", "%  main\n"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("report lacks %q:\n%s", w, out.String())
		}
	}
	if err := run(&out, build("stripped", "-ldflags=-s -w"), 10); err == nil || !strings.Contains(err.Error(), "without -s -w") {
		t.Errorf("stripped binary: %v, want an error saying to build without -s -w", err)
	}
}

func FuzzPackageOf(f *testing.F) {
	for _, s := range []string{"a/b.c", "type:*x", "go:itab.*a,b", "x[y.z/w]", "(", "/.", "type:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		defer fuzztest.Bound(t)()
		p := PackageOf(s)
		if p == "" || ModuleOf(p) == "" {
			t.Fatalf("%q → %q / %q", s, p, ModuleOf(p))
		}
	})
}
