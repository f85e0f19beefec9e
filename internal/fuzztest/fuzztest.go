// Package fuzztest holds vig's fuzz targets to one rule beside correctness: a parser of
// untrusted bytes answers every input in bounded time. A target starts each call with
// Bound; an input that takes longer than the budget crashes the fuzzing worker with
// every goroutine's stack, and `go test -fuzz` then saves that input under
// testdata/fuzz/<target>/ like any other crasher, to be fixed and committed.
//
// The budget is far above what any input should take (a config or an HTTP/2 frame is
// decoded in microseconds), so that it never fires on a loaded machine or under the race
// detector: it catches inputs that are slow by orders of magnitude (exponential alias
// expansion, quadratic scans, a sleep or a socket wait per input), not a slow machine.
package fuzztest

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Budget is the time one call may take while fuzzing (go test -fuzz).
const Budget = 2 * time.Second

// ReplayBudget is the time one call may take when the corpus is replayed as plain tests
// (go test, make test), where -race and qemu-aarch64 slow every call many times over: it
// turns a hang on a committed input into a failure that names the input, instead of a
// test binary killed at its -timeout.
const ReplayBudget = 60 * time.Second

// Bound starts the clock on one call of a fuzz target and returns the function that
// stops it; a target's body begins with
//
//	defer fuzztest.Bound(t)()
//
// If the call takes longer than the budget (Budget while fuzzing, ReplayBudget
// otherwise), the test binary crashes, with every goroutine's stack: a crash, not
// t.Fatal, because the call over budget is still running and may never return, and the
// fuzzing coordinator records the input that crashed its worker.
func Bound(t testing.TB) (stop func()) {
	t.Helper()
	if fuzzing() {
		return bound(t, Budget)
	}
	return bound(t, ReplayBudget)
}

func bound(t testing.TB, budget time.Duration) (stop func()) {
	name := t.Name()
	timer := time.AfterFunc(budget, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		overBudget(fmt.Sprintf("%s: one input took longer than %v: a parser of untrusted bytes must answer every input in bounded time\n\n%s",
			name, budget, buf[:n]))
	})
	return func() { timer.Stop() }
}

// overBudget is what a call over its budget does: crash the binary (a test replaces it).
var overBudget = func(msg string) { panic(msg) }

// fuzzing reports whether this test binary is generating inputs (-test.fuzz set), rather
// than replaying the seed corpus and testdata/fuzz as plain tests.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}
