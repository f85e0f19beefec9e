package cpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/platform/proc"
	"github.com/vig-edge/vig/platform/sysinfo"
)

func toSet(cpus []int) *unix.CPUSet {
	var s unix.CPUSet
	for _, c := range cpus {
		s.Set(c)
	}
	return &s
}

func fromSet(s *unix.CPUSet) []int {
	var ids []int
	for c := 0; c < maxCPUs && len(ids) < s.Count(); c++ {
		if s.IsSet(c) {
			ids = append(ids, c)
		}
	}
	return ids
}

func getAffinity(tid int) ([]int, error) {
	var s unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &s); err != nil {
		return nil, fmt.Errorf("sched_getaffinity(%d): %w", tid, err)
	}
	return fromSet(&s), nil
}

func setAffinity(tid int, cpus []int) error {
	if err := unix.SchedSetaffinity(tid, toSet(cpus)); err != nil {
		return fmt.Errorf("sched_setaffinity(%d, cpu%s): %w", tid, FormatList(cpus), err)
	}
	return nil
}

// ThreadAffinity returns the CPUs the calling OS thread may run on. Unless the
// goroutine is locked to its thread, the answer describes whichever thread the
// goroutine happens to be on.
func ThreadAffinity() ([]int, error) { return getAffinity(0) }

// CurrentCPU returns the CPU the calling thread runs on (getcpu(2)).
func CurrentCPU() (int, error) {
	var cpu, node uint32
	_, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0)
	if e != 0 {
		return -1, fmt.Errorf("getcpu: %w", e)
	}
	return int(cpu), nil
}

// LockHot locks the calling goroutine to its OS thread and places that thread as
// opts says. See the package documentation of hot.go for the contract.
func LockHot(opts HotOptions) (ThreadReport, func() error, error) {
	runtime.LockOSThread()
	rep := ThreadReport{TID: unix.Gettid(), Requested: slices.Clone(opts.CPUs), UclampMin: -1}
	before, err := getAffinity(0)
	if err != nil {
		runtime.UnlockOSThread()
		return rep, nil, err
	}
	if opts.CPUs != nil {
		if err := validCPUs("hot thread", opts.CPUs); err != nil {
			runtime.UnlockOSThread()
			return rep, nil, err
		}
		if err := setAffinity(0, opts.CPUs); err != nil {
			runtime.UnlockOSThread()
			return rep, nil, err
		}
	}
	if rep.CPUs, err = getAffinity(0); err != nil {
		setAffinity(0, before) // best effort: the read failed, the write may not
		runtime.UnlockOSThread()
		return rep, nil, err
	}
	if opts.CPUs != nil && !subset(rep.CPUs, opts.CPUs) {
		setAffinity(0, before)
		runtime.UnlockOSThread()
		return rep, nil, fmt.Errorf("hot thread: mask reads back as cpu%s after setting cpu%s", FormatList(rep.CPUs), FormatList(opts.CPUs))
	}
	oldClamp := -1
	if opts.UclampMin >= 0 {
		oldClamp, rep.UclampMin, rep.UclampErr = setUclampMin(opts.UclampMin)
		if rep.UclampErr != nil {
			oldClamp = -1 // nothing changed, nothing to restore
		}
	}
	undo := func() error {
		var errs []error
		if oldClamp >= 0 {
			if _, _, err := setUclampMin(oldClamp); err != nil {
				errs = append(errs, fmt.Errorf("restoring uclamp_min %d: %w", oldClamp, err))
			}
		}
		if opts.CPUs != nil {
			if err := setAffinity(0, before); err != nil {
				errs = append(errs, err)
			} else if got, err := getAffinity(0); err != nil || !slices.Equal(got, before) {
				errs = append(errs, fmt.Errorf("hot thread: mask reads back as cpu%s after restoring cpu%s (%v)", FormatList(got), FormatList(before), err))
			}
		}
		if len(errs) > 0 {
			// The thread keeps a placement the rest of the program must not
			// inherit: it stays locked, and Go ends it when the goroutine exits.
			return errors.Join(errs...)
		}
		runtime.UnlockOSThread()
		return nil
	}
	return rep, undo, nil
}

func subset(a, b []int) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return len(a) > 0
}

// setUclampMin sets the calling thread's minimum utilization clamp and reads it
// back. old is the clamp before (-1 when it could not be read).
func setUclampMin(v int) (old, got int, err error) {
	if v < 0 || v > UclampMax {
		return -1, -1, fmt.Errorf("uclamp_min %d out of range 0–%d", v, UclampMax)
	}
	probeErr := uclampProbe()
	if probeErr != nil {
		return -1, -1, probeErr
	}
	a, err := unix.SchedGetAttr(0, 0)
	if errors.Is(err, unix.ENOSYS) {
		return -1, -1, errUnsupportedUclamp(sysinfo.Release(), "no sched_getattr (ENOSYS; an emulator such as qemu-user may not pass it through)")
	}
	if err != nil {
		return -1, -1, fmt.Errorf("sched_getattr: %w", err)
	}
	old = int(a.Util_min)
	if err := schedSetUclampMin(v); err != nil {
		return old, -1, err
	}
	if a, err = unix.SchedGetAttr(0, 0); err != nil {
		return old, -1, fmt.Errorf("sched_getattr after setting uclamp_min: %w", err)
	}
	if int(a.Util_min) != v {
		return old, int(a.Util_min), fmt.Errorf("uclamp_min reads back as %d after setting %d", a.Util_min, v)
	}
	return old, v, nil
}

// schedSetUclampMin changes only the clamp: KEEP_POLICY|KEEP_PARAMS leave the
// thread's policy, nice value and priority alone.
func schedSetUclampMin(v int) error {
	a := unix.SchedAttr{Flags: unix.SCHED_FLAG_KEEP_ALL | unix.SCHED_FLAG_UTIL_CLAMP_MIN, Util_min: uint32(v)}
	err := unix.SchedSetAttr(0, &a, 0)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EOPNOTSUPP):
		return errUnsupportedUclamp(sysinfo.Release(), "built without CONFIG_UCLAMP_TASK (sched_setattr: EOPNOTSUPP)")
	case errors.Is(err, unix.E2BIG), errors.Is(err, unix.EINVAL):
		// Older kernels reject the larger sched_attr or the flag itself.
		return errUnsupportedUclamp(sysinfo.Release(), fmt.Sprintf("sched_setattr rejects SCHED_FLAG_UTIL_CLAMP_MIN (%v)", err))
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("uclamp_min %d: %w (sched_setattr: EPERM: raising the clamp above the cgroup's cpu.uclamp.min needs CAP_SYS_NICE)", v, os.ErrPermission)
	case errors.Is(err, unix.ENOSYS):
		return errUnsupportedUclamp(sysinfo.Release(), "no sched_setattr (ENOSYS)")
	}
	return fmt.Errorf("sched_setattr uclamp_min %d: %w", v, err)
}

// uclampProbe refuses kernels older than 5.3 by version before any syscall:
// they have sched_setattr but not the clamp fields, and some vendor kernels
// misbehave on flags they do not know.
var uclampProbe = sync.OnceValue(func() error { return uclampByVersion(sysinfo.Release()) })

// SetProcessCPUs restricts every thread of the process to cpus and sets
// GOMAXPROCS to the number of CPUs the threads read back, explicitly: since Go
// 1.25 the runtime would otherwise re-derive GOMAXPROCS from the affinity mask on
// its own schedule. Threads created later inherit the mask from the thread that
// creates them. Call it before placing any hot thread (it overwrites their masks).
//
// undo restores every thread's previous mask and gives GOMAXPROCS back to the
// runtime's default (runtime.SetDefaultGOMAXPROCS).
func SetProcessCPUs(cpus []int) (ProcessReport, func() error, error) {
	rep := ProcessReport{Requested: slices.Clone(cpus)}
	if err := validCPUs("process_cpus", cpus); err != nil {
		return rep, nil, err
	}
	prev := map[int][]int{}
	fallback, err := getAffinity(os.Getpid())
	if err != nil {
		return rep, nil, err
	}
	restore := func() error {
		var errs []error
		tids, err := threads()
		if err != nil {
			return err
		}
		for _, tid := range tids {
			m, ok := prev[tid]
			if !ok {
				m = fallback // created after the change
			}
			if err := setAffinity(tid, m); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, err)
			}
		}
		runtime.SetDefaultGOMAXPROCS()
		return errors.Join(errs...)
	}
	// A thread may start while the loop runs (it then inherits either mask):
	// repeat until a pass finds no thread it has not set.
	for pass := 0; ; pass++ {
		tids, err := threads()
		if err != nil {
			restore()
			return rep, nil, err
		}
		fresh := 0
		for _, tid := range tids {
			if _, done := prev[tid]; done {
				continue
			}
			old, err := getAffinity(tid)
			if errors.Is(err, unix.ESRCH) {
				continue // exited meanwhile
			}
			if err != nil {
				restore()
				return rep, nil, err
			}
			prev[tid] = old
			fresh++
			if err := setAffinity(tid, cpus); err != nil && !errors.Is(err, unix.ESRCH) {
				restore()
				return rep, nil, err
			}
		}
		if fresh == 0 {
			break
		}
		if pass == 16 {
			restore()
			return rep, nil, errors.New("process_cpus: threads keep appearing; could not set every thread's mask")
		}
	}
	tids, err := threads()
	if err != nil {
		restore()
		return rep, nil, err
	}
	for _, tid := range tids {
		got, err := getAffinity(tid)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			restore()
			return rep, nil, err
		}
		if rep.CPUs == nil {
			rep.CPUs = got
		}
		if !slices.Equal(got, rep.CPUs) || !subset(got, cpus) {
			restore()
			return rep, nil, fmt.Errorf("process_cpus: thread %d reads back cpu%s, another cpu%s (asked cpu%s)", tid, FormatList(got), FormatList(rep.CPUs), FormatList(cpus))
		}
		rep.Threads++
	}
	runtime.GOMAXPROCS(len(rep.CPUs))
	rep.GOMAXPROCS = runtime.GOMAXPROCS(0)
	return rep, restore, nil
}

// ProcessThreads returns the ids of the process's threads.
func ProcessThreads() ([]int, error) { return threads() }

func threads() ([]int, error) {
	dir := filepath.Join(proc.Root, strconv.Itoa(os.Getpid()), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing threads: %w", err)
	}
	ids := make([]int, 0, len(ents))
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// ProcessAffinity returns the CPUs the process's main thread may run on: the mask
// new threads start from unless something changed them one by one.
func ProcessAffinity() ([]int, error) { return getAffinity(os.Getpid()) }

// onMainThread reports whether the calling thread is the process's main thread.
func onMainThread() bool { return unix.Gettid() == os.Getpid() }
