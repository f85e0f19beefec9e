package proc

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Stat holds the fields vig uses from /proc/<pid>/stat or
// /proc/<pid>/task/<tid>/stat (proc(5)). For a process (the first file)
// the CPU times and fault counts cover all its threads, including those
// that have exited; for a task they cover that thread alone.
type Stat struct {
	PID        int
	Comm       string // without the parentheses; may contain spaces and ')'
	State      byte   // R, S, D, Z, T, t, X, I, ...
	PPID       int
	Flags      uint64 // PF_* flags; PF_KTHREAD marks kernel threads
	MinFlt     uint64 // minor faults
	MajFlt     uint64 // major faults (needed I/O)
	UTime      uint64 // user-mode CPU time in USER_HZ ticks
	STime      uint64 // kernel-mode CPU time in USER_HZ ticks
	NumThreads int
	StartTime  uint64 // ticks after boot
	Processor  int    // CPU last run on; -1 when the kernel does not report it
}

// pfKthread is PF_KTHREAD from include/linux/sched.h.
const pfKthread = 0x00200000

// KernelThread reports whether the task is a kernel thread.
func (s *Stat) KernelThread() bool { return s.Flags&pfKthread != 0 }

// ErrMalformed is wrapped by every parse error of this package.
var ErrMalformed = errors.New("malformed procfs data")

// Field numbers of /proc/<pid>/stat as listed in proc(5), 1-based.
const (
	fieldState      = 3
	fieldPPID       = 4
	fieldFlags      = 9
	fieldMinFlt     = 10
	fieldMajFlt     = 12
	fieldUTime      = 14
	fieldSTime      = 15
	fieldNumThreads = 20
	fieldStartTime  = 22
	fieldProcessor  = 39
)

// ParseStat parses the contents of a /proc/<pid>/stat file.
//
// The command name is the text between the first '(' and the last ')':
// a process may name itself "a) S 1 (b" and the fields after it are only
// found reliably from the last parenthesis.
func ParseStat(b []byte) (Stat, error) {
	var s Stat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return s, fmt.Errorf("%w: stat: no (comm)", ErrMalformed)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid < 0 {
		return s, fmt.Errorf("%w: stat: pid %q", ErrMalformed, bytes.TrimSpace(b[:open]))
	}
	s.PID = pid
	s.Comm = string(b[open+1 : closing])
	// rest[0] is field 3 (state).
	rest := bytes.Fields(b[closing+1:])
	field := func(n int) ([]byte, bool) {
		i := n - fieldState
		if i < 0 || i >= len(rest) {
			return nil, false
		}
		return rest[i], true
	}
	num := func(n int) (uint64, error) {
		f, ok := field(n)
		if !ok {
			return 0, fmt.Errorf("%w: stat: truncated before field %d", ErrMalformed, n)
		}
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: stat: field %d: %q", ErrMalformed, n, f)
		}
		return v, nil
	}
	st, ok := field(fieldState)
	if !ok || len(st) != 1 {
		return s, fmt.Errorf("%w: stat: state %q", ErrMalformed, st)
	}
	s.State = st[0]
	// ppid is signed in the kernel's format but never negative.
	for _, f := range []struct {
		n   int
		dst *uint64
	}{
		{fieldFlags, &s.Flags},
		{fieldMinFlt, &s.MinFlt},
		{fieldMajFlt, &s.MajFlt},
		{fieldUTime, &s.UTime},
		{fieldSTime, &s.STime},
		{fieldStartTime, &s.StartTime},
	} {
		v, err := num(f.n)
		if err != nil {
			return s, err
		}
		*f.dst = v
	}
	ppid, err := num(fieldPPID)
	if err != nil {
		return s, err
	}
	threads, err := num(fieldNumThreads)
	if err != nil {
		return s, err
	}
	if ppid > 1<<31 || threads > 1<<31 {
		return s, fmt.Errorf("%w: stat: ppid %d or num_threads %d out of range", ErrMalformed, ppid, threads)
	}
	s.PPID, s.NumThreads = int(ppid), int(threads)
	s.Processor = -1
	if f, ok := field(fieldProcessor); ok {
		cpu, err := strconv.ParseUint(string(f), 10, 31)
		if err != nil {
			return s, fmt.Errorf("%w: stat: processor %q", ErrMalformed, f)
		}
		s.Processor = int(cpu)
	}
	return s, nil
}
