package cpu

import (
	"os"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

// The main goroutine stays on the process's main thread, so that TestMain can
// start a hot thread from there: the case where a locked goroutine's exit cannot
// end its thread.
func init() { runtime.LockOSThread() }

var fromMain struct {
	onMain   bool
	tid, pid int
	err      error
	gone     bool
}

func TestMain(m *testing.M) {
	fromMain.onMain, fromMain.pid = onMainThread(), os.Getpid()
	// What StartThread's goroutine does when the runtime happens to run it on
	// the main thread (it cannot be made to here: StartThread's goroutine never
	// gets the main thread while this goroutine holds it).
	th := newThread()
	ready := make(chan error, 1)
	th.loop(HotOptions{UclampMin: -1}, ready)
	if err := <-ready; err != nil {
		fromMain.err = err
	} else {
		fromMain.tid = th.Report().TID
		fromMain.err = th.Close()
		fromMain.gone = threadGone(fromMain.tid)
	}
	goleak.VerifyTestMain(m) // every test leaves no goroutine behind
}

// TestThreadFromMainThread: a Thread started on the main thread runs on another
// one, and Close ends it.
func TestThreadFromMainThread(t *testing.T) {
	f := fromMain
	if !f.onMain {
		t.Fatal("TestMain did not run on the main thread (init's LockOSThread should keep it there)")
	}
	if f.err != nil {
		t.Fatal(f.err)
	}
	if f.tid == f.pid || !f.gone {
		t.Errorf("hot thread %d (pid %d), ended after Close: %v", f.tid, f.pid, f.gone)
	}
}
