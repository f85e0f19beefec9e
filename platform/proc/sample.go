package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// Thread is one task of a process as read from /proc/<pid>/task/<tid>.
type Thread struct {
	TID       int
	Stat      Stat
	Sched     SchedStat
	HaveSched bool // the kernel has schedstat (CONFIG_SCHED_INFO)
	Status    Status
}

// Sample is a snapshot of one process and its live threads.
type Sample struct {
	PID     int
	Taken   time.Time // when the sample was read (monotonic clock reading included)
	Process Stat      // whole-process times and faults, dead threads included
	Threads []Thread  // sorted by TID
}

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(filepath.Join(Root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ReadStatus reads /proc/<pid>/status.
func ReadStatus(pid int) (Status, error) {
	b, err := os.ReadFile(filepath.Join(Root, strconv.Itoa(pid), "status"))
	if err != nil {
		return Status{}, err
	}
	return ParseStatus(b)
}

// Tasks lists the thread ids of a process, sorted.
func Tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(Root, strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid > 0 {
			tids = append(tids, tid)
		}
	}
	sort.Ints(tids)
	return tids, nil
}

// ReadThread reads stat, schedstat and status of one task.
func ReadThread(pid, tid int) (Thread, error) {
	dir := filepath.Join(Root, strconv.Itoa(pid), "task", strconv.Itoa(tid))
	t := Thread{TID: tid}
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return t, err
	}
	if t.Stat, err = ParseStat(b); err != nil {
		return t, fmt.Errorf("%s: %w", dir, err)
	}
	if b, err = os.ReadFile(filepath.Join(dir, "status")); err != nil {
		return t, err
	}
	if t.Status, err = ParseStatus(b); err != nil {
		return t, fmt.Errorf("%s: %w", dir, err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "schedstat"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Kernel without CONFIG_SCHED_INFO: HaveSched stays false.
	case err != nil:
		return t, err
	default:
		if t.Sched, err = ParseSchedStat(b); err != nil {
			return t, fmt.Errorf("%s: %w", dir, err)
		}
		t.HaveSched = true
	}
	return t, nil
}

// ReadSample reads the process and every thread still alive. Threads that
// exit while the sample is read are left out.
func ReadSample(pid int) (*Sample, error) {
	s := &Sample{PID: pid, Taken: time.Now()}
	var err error
	if s.Process, err = ReadStat(pid); err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	tids, err := Tasks(pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	for _, tid := range tids {
		t, err := ReadThread(pid, tid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // the thread exited after the directory was listed
		}
		if err != nil {
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		s.Threads = append(s.Threads, t)
	}
	return s, nil
}

// Usage is what a process consumed between two samples.
type Usage struct {
	Elapsed time.Duration

	// From /proc/<pid>/stat, whole process, USER_HZ resolution.
	User, System   time.Duration
	MinFlt, MajFlt uint64

	// Sums over threads alive at the second sample (a thread that started
	// in between counts from zero; one that exited in between is lost).
	OnCPU        time.Duration
	RunQueueWait time.Duration
	Timeslices   uint64
	HaveSched    bool
	Voluntary    uint64 // voluntary context switches (the thread blocked)
	Involuntary  uint64 // involuntary ones (the thread was preempted)

	Threads       int // threads alive at the second sample
	ThreadsExited int // threads of the first sample gone at the second
}

// Delta computes the usage between two samples of the same process.
// Counters that went backwards (a reused thread id) count from zero.
func Delta(before, after *Sample) Usage {
	u := Usage{
		Elapsed: after.Taken.Sub(before.Taken),
		User:    TicksToDuration(sub(after.Process.UTime, before.Process.UTime)),
		System:  TicksToDuration(sub(after.Process.STime, before.Process.STime)),
		MinFlt:  sub(after.Process.MinFlt, before.Process.MinFlt),
		MajFlt:  sub(after.Process.MajFlt, before.Process.MajFlt),
		Threads: len(after.Threads),
	}
	prev := make(map[int]*Thread, len(before.Threads))
	for i := range before.Threads {
		prev[before.Threads[i].TID] = &before.Threads[i]
	}
	u.HaveSched = len(after.Threads) > 0
	for i := range after.Threads {
		a := &after.Threads[i]
		var b Thread
		if p, ok := prev[a.TID]; ok && p.Stat.StartTime == a.Stat.StartTime {
			b = *p
		}
		delete(prev, a.TID)
		u.HaveSched = u.HaveSched && a.HaveSched
		u.OnCPU += time.Duration(sub(uint64(a.Sched.OnCPU), uint64(b.Sched.OnCPU)))
		u.RunQueueWait += time.Duration(sub(uint64(a.Sched.RunQueueWait), uint64(b.Sched.RunQueueWait)))
		u.Timeslices += sub(a.Sched.Timeslices, b.Sched.Timeslices)
		u.Voluntary += sub(a.Status.VoluntaryCtxtSwitches, b.Status.VoluntaryCtxtSwitches)
		u.Involuntary += sub(a.Status.NonvoluntaryCtxtSwitches, b.Status.NonvoluntaryCtxtSwitches)
	}
	u.ThreadsExited = len(prev)
	return u
}

// sub returns a-b, or a when the counter was reset (a < b).
func sub(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return a - b
}
