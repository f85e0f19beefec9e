package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// perfEvents are the software counters opened per thread, in PerfCounts
// order.
var perfEvents = [...]uint64{
	unix.PERF_COUNT_SW_TASK_CLOCK,
	unix.PERF_COUNT_SW_CONTEXT_SWITCHES,
	unix.PERF_COUNT_SW_CPU_MIGRATIONS,
	unix.PERF_COUNT_SW_PAGE_FAULTS,
}

// Counters are open perf_event counters on the threads of one process.
// They count from the moment they are opened until Close. A Counters is
// not safe for concurrent use.
type Counters struct {
	fds      [][len(perfEvents)]int
	userOnly bool
}

// OpenCounters opens task-clock, context-switch, cpu-migration and
// page-fault counters on every thread of pid, inherited by the threads
// those create later. The error says why when perf_event_open is not
// allowed (perf_event_paranoid, Android's security.perf_harden) or not
// implemented.
func OpenCounters(pid int) (*Counters, error) {
	userOnly, err := perfAccess()
	if err != nil {
		return nil, err
	}
	tids, err := Tasks(pid)
	if err != nil {
		return nil, fmt.Errorf("perf counters for process %d: %w", pid, err)
	}
	c := &Counters{userOnly: userOnly}
	for _, tid := range tids {
		fds, err := openThread(tid, userOnly)
		if errors.Is(err, unix.ESRCH) {
			continue // the thread exited after it was listed
		}
		if err != nil {
			c.Close()
			return nil, perfOpenError(err)
		}
		c.fds = append(c.fds, fds)
	}
	if len(c.fds) == 0 {
		return nil, fmt.Errorf("perf counters for process %d: no live threads", pid)
	}
	return c, nil
}

// openThread opens the counters of one thread; on error none stays open.
func openThread(tid int, userOnly bool) ([len(perfEvents)]int, error) {
	var fds [len(perfEvents)]int
	for i := range fds {
		fds[i] = -1
	}
	for i, config := range perfEvents {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Config: config,
			Bits:   unix.PerfBitInherit | unix.PerfBitExcludeHv,
		}
		if userOnly {
			attr.Bits |= unix.PerfBitExcludeKernel
		}
		fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			closeAll(fds[:])
			return fds, err
		}
		fds[i] = fd
	}
	return fds, nil
}

func perfOpenError(err error) error {
	switch {
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("perf_event_open: %w (not implemented here: kernel without CONFIG_PERF_EVENTS, or an emulator such as qemu-user)", errors.ErrUnsupported)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("perf_event_open: %w (software events not supported: %v)", errors.ErrUnsupported, err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %v (an LSM such as SELinux may forbid it)", ErrPerfDenied, err)
	}
	return fmt.Errorf("perf_event_open: %w", err)
}

// Read returns the counts accumulated since OpenCounters.
func (c *Counters) Read() (PerfCounts, error) {
	p := PerfCounts{UserOnly: c.userOnly, Threads: len(c.fds)}
	var buf [8]byte
	for _, fds := range c.fds {
		var v [len(perfEvents)]uint64
		for i, fd := range fds {
			n, err := unix.Read(fd, buf[:])
			if err != nil {
				return p, fmt.Errorf("reading perf counter: %w", err)
			}
			if n != len(buf) {
				return p, fmt.Errorf("reading perf counter: short read of %d bytes", n)
			}
			v[i] = binary.NativeEndian.Uint64(buf[:])
		}
		p.TaskClock += time.Duration(v[0])
		p.ContextSwitches += v[1]
		p.CPUMigrations += v[2]
		p.PageFaults += v[3]
	}
	return p, nil
}

// Close closes every counter. It is safe to call more than once.
func (c *Counters) Close() error {
	for i := range c.fds {
		closeAll(c.fds[i][:])
	}
	c.fds = nil
	return nil
}

func closeAll(fds []int) {
	for i, fd := range fds {
		if fd >= 0 {
			unix.Close(fd) // close of a perf fd we own cannot fail in a way we could act on
			fds[i] = -1
		}
	}
}
