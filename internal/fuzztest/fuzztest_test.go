package fuzztest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBoundCrashesSlowCall runs a call over its budget in a child process: the child
// must crash and name the test and the budget.
func TestBoundCrashesSlowCall(t *testing.T) {
	if os.Getenv("FUZZTEST_CHILD") == "slow" {
		defer bound(t, 50*time.Millisecond)()
		select {} // a call that never returns
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBoundCrashesSlowCall$")
	cmd.Env = append(os.Environ(), "FUZZTEST_CHILD=slow")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child passed; output:\n%s", out)
	}
	for _, want := range []string{"TestBoundCrashesSlowCall: one input took longer than 50ms", "goroutine "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the child's output lacks %q:\n%.2000s", want, out)
		}
	}
}

func TestBoundLetsFastCallsBe(t *testing.T) {
	for range 1000 {
		stop := bound(t, 50*time.Millisecond)
		stop()
	}
	time.Sleep(100 * time.Millisecond) // a stopped timer must not fire later
}

func TestReplayIsNotFuzzing(t *testing.T) {
	if fuzzing() {
		t.Fatal("a plain go test run counts as fuzzing: the replay budget would be the fuzzing one")
	}
}
