package proc

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestCountersSelf opens the software counters on the test process, does
// known work and checks that they moved. It skips only where perf events
// are refused or not implemented, and says which.
func TestCountersSelf(t *testing.T) {
	c, err := OpenCounters(os.Getpid())
	if errors.Is(err, ErrPerfDenied) || errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("perf counters unavailable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Touch fresh memory (page faults) and block a few times (context switches).
	buf := make([]byte, 8<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	runtime.KeepAlive(buf)
	for range 20 {
		time.Sleep(time.Millisecond)
	}
	p, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if p.Threads == 0 || p.TaskClock <= 0 || p.PageFaults == 0 {
		t.Errorf("counters did not move: %+v", p)
	}
	if !p.UserOnly && p.ContextSwitches == 0 {
		t.Errorf("no context switches after 20 sleeps: %+v", p)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReadSampleSelf(t *testing.T) {
	s, err := ReadSample(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Threads) == 0 || s.Process.PID != os.Getpid() {
		t.Errorf("sample %+v", s)
	}
}
