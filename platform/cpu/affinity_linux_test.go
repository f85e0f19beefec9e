package cpu

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/platform/sysinfo"
)

// cpusHere is the test process's mask: what the tests may pin to.
func cpusHere(t *testing.T) []int {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m, err := ThreadAffinity()
	if err != nil {
		t.Fatalf("sched_getaffinity works on every Linux: %v", err)
	}
	return m
}

// onGoroutine runs f on a fresh goroutine and waits: a test that pins a thread
// must not pin the test's own.
func onGoroutine(f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	<-done
}

// TestLockHotRestricts pins a thread to each CPU in turn and checks, from the
// kernel, that it is restricted: sched_getaffinity reads the one CPU back, and
// every getcpu on the thread reports it. The undo gives the old mask back.
func TestLockHotRestricts(t *testing.T) {
	all := cpusHere(t)
	for _, c := range all {
		onGoroutine(func() {
			rep, undo, err := LockHot(HotOptions{CPUs: []int{c}, UclampMin: -1})
			if err != nil {
				t.Errorf("pin to cpu%d: %v", c, err)
				return
			}
			if !slices.Equal(rep.CPUs, []int{c}) || rep.UclampMin != -1 || rep.UclampErr != nil {
				t.Errorf("pin to cpu%d: report %+v", c, rep)
			}
			if rep.TID != gettid(t) {
				t.Errorf("report tid %d, thread %d", rep.TID, gettid(t))
			}
			if m, err := ThreadAffinity(); err != nil || !slices.Equal(m, []int{c}) {
				t.Errorf("pinned to cpu%d, mask reads %v (%v)", c, m, err)
			}
			seen := map[int]int{}
			for range 2000 {
				got, err := CurrentCPU()
				if err != nil {
					t.Errorf("getcpu: %v", err)
					return
				}
				seen[got]++
				if got%256 == 0 {
					runtime.Gosched() // stays on the locked thread
				}
			}
			if len(seen) != 1 || seen[c] != 2000 {
				t.Errorf("pinned to cpu%d, getcpu saw %v", c, seen)
			}
			if err := undo(); err != nil {
				t.Errorf("undo: %v", err)
			}
			// undo unlocked the goroutine; lock again to read this thread's mask.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if rep.TID == gettid(t) {
				if m, _ := ThreadAffinity(); !slices.Equal(m, all) {
					t.Errorf("after undo the thread's mask is %v, want %v", m, all)
				}
			}
		})
	}
}

func gettid(t *testing.T) int {
	t.Helper()
	b, err := os.Readlink("/proc/thread-self")
	if err != nil {
		t.Errorf("/proc/thread-self: %v", err)
		return -1
	}
	var pid, tid int
	if _, err := fmt.Sscanf(b, "%d/task/%d", &pid, &tid); err != nil {
		t.Errorf("/proc/thread-self -> %q", b)
		return -1
	}
	return tid
}

func TestLockHotRejects(t *testing.T) {
	onGoroutine(func() {
		for _, cpus := range [][]int{{}, {-1}, {maxCPUs}} {
			if _, undo, err := LockHot(HotOptions{CPUs: cpus, UclampMin: -1}); err == nil {
				undo()
				t.Errorf("cpus %v: no error", cpus)
			}
		}
	})
	// A CPU number the machine does not have: the kernel refuses an empty effective mask.
	all := cpusHere(t)
	onGoroutine(func() {
		_, undo, err := LockHot(HotOptions{CPUs: []int{all[len(all)-1] + 64}, UclampMin: -1})
		if err == nil {
			undo()
			t.Error("cpu beyond the machine: no error")
		} else if !strings.Contains(err.Error(), "sched_setaffinity") {
			t.Errorf("err %v", err)
		}
	})
}

// TestUclamp sets uclamp_min on a thread. Where the kernel has utilization
// clamping, the value must read back and the undo restore it. This machine's
// kernel lacks CONFIG_UCLAMP_TASK, so here the error must say so and wrap
// errors.ErrUnsupported; any other failure is a bug.
func TestUclamp(t *testing.T) {
	onGoroutine(func() {
		rep, undo, err := LockHot(HotOptions{UclampMin: 512})
		if err != nil {
			t.Errorf("uclamp alone never fails the placement: %v", err)
			return
		}
		defer func() {
			if err := undo(); err != nil {
				t.Errorf("undo: %v", err)
			}
		}()
		if rep.UclampErr != nil {
			if !errors.Is(rep.UclampErr, errors.ErrUnsupported) {
				t.Errorf("uclamp failed for a reason other than a missing feature: %v", rep.UclampErr)
				return
			}
			if rep.UclampMin != -1 {
				t.Errorf("unsupported, yet report says clamp %d", rep.UclampMin)
			}
			msg := rep.UclampErr.Error()
			if !strings.Contains(msg, "kernel "+sysinfo.Release()) || !strings.Contains(msg, "needs 5.3") {
				t.Errorf("error lacks the kernel and the minimum: %q", msg)
			}
			if uclampConfigured() {
				t.Errorf("kernel config has CONFIG_UCLAMP_TASK=y, yet: %v", rep.UclampErr)
				return
			}
			t.Logf("unsupported, as expected here: %v", rep.UclampErr)
			return
		}
		if rep.UclampMin != 512 {
			t.Errorf("clamp reads back %d, want 512", rep.UclampMin)
		}
	})
	onGoroutine(func() {
		rep, undo, err := LockHot(HotOptions{UclampMin: UclampMax + 1})
		if err != nil {
			t.Error(err)
			return
		}
		defer undo()
		if rep.UclampErr == nil || errors.Is(rep.UclampErr, errors.ErrUnsupported) || !strings.Contains(rep.UclampErr.Error(), "out of range") {
			t.Errorf("uclamp_min 1025: %v, want an out-of-range error", rep.UclampErr)
		}
	})
}

// uclampConfigured reads the running kernel's config where it is exposed.
func uclampConfigured() bool {
	b, err := readConfigGz()
	return err == nil && strings.Contains(string(b), "\nCONFIG_UCLAMP_TASK=y")
}

// TestSetProcessCPUs restricts the whole test process to one CPU: every thread,
// also one started afterwards, reads that CPU back, and GOMAXPROCS is 1. The undo
// restores every mask and hands GOMAXPROCS back to the runtime.
func TestSetProcessCPUs(t *testing.T) {
	all := cpusHere(t)
	before := runtime.GOMAXPROCS(0)
	c := all[len(all)-1]
	rep, undo, err := SetProcessCPUs([]int{c})
	if err != nil {
		t.Fatalf("sched_setaffinity exists here and must work: %v", err)
	}
	tids, _ := ProcessThreads()
	if !slices.Equal(rep.CPUs, []int{c}) || rep.GOMAXPROCS != 1 || runtime.GOMAXPROCS(0) != 1 || rep.Threads < 1 || rep.Threads > len(tids) {
		t.Errorf("report %+v (threads now %d, GOMAXPROCS %d)", rep, len(tids), runtime.GOMAXPROCS(0))
	}
	// A thread started now inherits the mask.
	onGoroutine(func() {
		runtime.LockOSThread() // exits locked: a thread of its own, ended afterwards
		newThread := make(chan []int)
		go func() {
			runtime.LockOSThread()
			m, _ := ThreadAffinity()
			newThread <- m
		}()
		if m := <-newThread; !slices.Equal(m, []int{c}) {
			t.Errorf("thread started after SetProcessCPUs has mask %v, want [%d]", m, c)
		}
	})
	for _, tid := range tids {
		if m, err := getAffinity(tid); err == nil && !slices.Equal(m, []int{c}) {
			t.Errorf("thread %d: mask %v, want [%d]", tid, m, c)
		}
	}
	if err := undo(); err != nil {
		t.Fatalf("undo: %v", err)
	}
	tids, _ = ProcessThreads()
	for _, tid := range tids {
		if m, err := getAffinity(tid); err == nil && !slices.Equal(m, all) {
			t.Errorf("after undo thread %d has mask %v, want %v", tid, m, all)
		}
	}
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) != before {
		t.Errorf("after undo GOMAXPROCS %d, was %d", runtime.GOMAXPROCS(0), before)
	}
	if _, _, err := SetProcessCPUs(nil); err == nil {
		t.Error("empty set: no error")
	}
}

// TestThread runs functions on a started hot thread, which is pinned; Close ends
// the thread (it leaves /proc/self/task).
func TestThread(t *testing.T) {
	all := cpusHere(t)
	c := all[0]
	th, err := StartThread(HotOptions{CPUs: []int{c}, UclampMin: -1})
	if err != nil {
		t.Fatal(err)
	}
	rep := th.Report()
	var tids []int
	var masks [][]int
	var cpus []int
	for range 3 {
		if err := th.Do(func() {
			tids = append(tids, gettid(t))
			m, _ := ThreadAffinity()
			masks = append(masks, m)
			got, _ := CurrentCPU()
			cpus = append(cpus, got)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range tids {
		if tids[i] != rep.TID || !slices.Equal(masks[i], []int{c}) || cpus[i] != c {
			t.Errorf("Do %d ran on tid %d mask %v cpu %d; want tid %d on cpu%d", i, tids[i], masks[i], cpus[i], rep.TID, c)
		}
	}
	if err := th.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := th.Do(func() {}); !errors.Is(err, ErrThreadClosed) {
		t.Errorf("Do after Close: %v", err)
	}
	if !threadGone(rep.TID) {
		t.Errorf("thread %d still exists after Close", rep.TID)
	}
}

// threadGone waits (bounded) for a thread to leave /proc/self/task: the runtime
// ends a locked thread after its goroutine exits, asynchronously.
func threadGone(tid int) bool {
	for range 500 {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); os.IsNotExist(err) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}
