package archtest

import (
	"slices"
	"strings"
	"testing"
)

// pending are the violations of vig's tree that are known and being removed.
// Delete an entry when its violation is gone: TestLayout fails on entries that
// match nothing.
var pending = []Allow{}

// TestLayout holds vig's own tree to the rules.
func TestLayout(t *testing.T) {
	pkgs, err := Load("..")
	if err != nil {
		t.Fatal(err)
	}
	// The rules are only as good as the tree they see.
	for _, want := range []string{"agent/sched", "agent/gateway", "platform/cpu", "netopt", "shmring", "proto/inference", "cmd/vig", "archtest", "h2"} {
		if !slices.ContainsFunc(pkgs, func(p Package) bool { return p.Path == Module+"/"+want }) {
			t.Fatalf("Load did not find %s among %d packages", want, len(pkgs))
		}
	}
	vs, unused := Check(pkgs, Rules, pending)
	for _, v := range vs {
		if v.Allowed {
			t.Logf("pending (allowed): %v", v)
			continue
		}
		t.Errorf("%v", v)
	}
	for _, a := range unused {
		t.Errorf("allowlist entry matches nothing, delete it from pending: %s is clean of %q (%s)", a.Package, a.Rule, a.Why)
	}
}

// TestCheckReportsBadTree is the test of the test: a fixture tree with one
// deliberate violation of every kind, and clean packages beside them, must give
// exactly these violations through the same Load and Check.
func TestCheckReportsBadTree(t *testing.T) {
	pkgs, err := Load("testdata/badtree")
	if err != nil {
		t.Fatal(err)
	}
	allow := []Allow{
		{Rule: "dependencies point down", Package: Module + "/shmring/frontend", Why: "known"},
		{Rule: "dependencies point down", Package: Module + "/shmring/fixed", Why: "stale: fixed already"},
	}
	vs, unused := Check(pkgs, Rules, allow)
	m := func(p string) string { return Module + "/" + p }
	want := []Violation{
		// platform imports the core directly, in a file built for one OS only.
		{Rule: "dependencies point down", Package: m("platform/leak"), File: "leak_linux.go", Import: m("agent/doctor")},
		// netopt reaches the core through another of vig's packages.
		{Rule: "dependencies point down", Package: m("netopt/chain"), File: "chain.go", Import: m("android"), Via: []string{m("agent/config")}},
		// A proto test imports the core: tests point down too.
		{Rule: "dependencies point down", Package: m("proto/wire"), File: "wire_test.go", Import: m("agent/gateway")},
		// Allowed, and reported as such.
		{Rule: "dependencies point down", Package: m("shmring/frontend"), File: "frontend.go", Import: m("agent/gateway"), Allowed: true},
		{Rule: "the scheduler is pure", Package: m("agent/sched"), File: "sched.go", Import: "net/netip"},
		{Rule: "the scheduler is pure", Package: m("agent/sched"), File: "sched.go", Import: m("agent/gateway")},
		{Rule: "the scheduler is pure", Package: m("agent/sched"), File: "clock_test.go", Import: "os"},
		{Rule: "the core makes no syscalls", Package: m("agent/doctor"), File: "doctor.go", Import: "os/exec"},
		{Rule: "the core makes no syscalls", Package: m("agent/doctor"), File: "peek_other.go", Import: "unsafe"},
		{Rule: "the core makes no syscalls", Package: m("agent/gateway"), File: "gateway.go", Import: "golang.org/x/sys/unix"},
		{Rule: DocRule, Package: m("proto/nodoc")},
		{Rule: DocRule, Package: m("platform/testdoc")}, // its only doc comment is in a test file
	}
	key := func(v Violation) string {
		return strings.Join([]string{v.Rule, v.Package, v.File, v.Import, strings.Join(v.Via, ">"), map[bool]string{true: "allowed"}[v.Allowed]}, " | ")
	}
	var got, exp []string
	for _, v := range vs {
		got = append(got, key(v))
	}
	for _, v := range want {
		exp = append(exp, key(v))
	}
	slices.Sort(got)
	slices.Sort(exp)
	for _, g := range got {
		if !slices.Contains(exp, g) {
			t.Errorf("unexpected violation: %s", g)
		}
	}
	for _, e := range exp {
		if !slices.Contains(got, e) {
			t.Errorf("violation not reported: %s", e)
		}
	}
	if len(unused) != 1 || unused[0].Package != m("shmring/fixed") {
		t.Errorf("unused allowlist entries %+v, want only the stale shmring/fixed", unused)
	}
	for _, v := range vs {
		if v.Why == "" || !strings.Contains(v.String(), v.Package) {
			t.Errorf("violation without its reason or package: %q", v.String())
		}
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"net/...", "net", true},
		{"net/...", "net/netip", true},
		{"net/...", "netx", false},
		{"os/...", "os/exec", true},
		{"syscall", "syscall", true},
		{"syscall", "syscall/js", false},
		{Module + "/agent/...", Module + "/agent", true},
		{Module + "/agent/...", Module + "/agentx", false},
		{Module + "/agent/...", Module + "/android", false},
	} {
		if got := Match(tc.pattern, tc.path); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}
