package fuzztest

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// catch replaces the crash with a report for the duration of a test.
func catch(t *testing.T) <-chan string {
	got := make(chan string, 16)
	old := overBudget
	overBudget = func(msg string) { got <- msg }
	t.Cleanup(func() { overBudget = old })
	return got
}

// TestBoundFiresOnSlowCall: a call over its budget is reported with the test's name,
// the budget and every goroutine's stack, while it is still running.
func TestBoundFiresOnSlowCall(t *testing.T) {
	got := catch(t)
	stop := bound(t, 20*time.Millisecond)
	defer stop()
	select {
	case msg := <-got:
		for _, want := range []string{"TestBoundFiresOnSlowCall: one input took longer than 20ms", "goroutine "} {
			if !strings.Contains(msg, want) {
				t.Errorf("report lacks %q:\n%.2000s", want, msg)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("a call one minute over its 20 ms budget was not reported")
	}
}

// TestBoundQuietOnFastCalls: calls that end within their budget are never reported,
// not even after the budget has passed.
func TestBoundQuietOnFastCalls(t *testing.T) {
	got := catch(t)
	var calls atomic.Int32
	for range 1000 {
		stop := bound(t, 20*time.Millisecond)
		calls.Add(1)
		stop()
	}
	time.Sleep(100 * time.Millisecond) // past every budget
	select {
	case msg := <-got:
		t.Fatalf("a call that ended in time was reported:\n%.500s", msg)
	default:
	}
	if calls.Load() != 1000 {
		t.Fatal("not every call ran")
	}
}

func TestReplayIsNotFuzzing(t *testing.T) {
	if fuzzing() {
		t.Fatal("a plain go test run counts as fuzzing: the replay budget would be the fuzzing one")
	}
}
