//go:build !linux

package cpu

import (
	"errors"
	"fmt"
	"runtime"
)

func errNotLinux(what string) error {
	return fmt.Errorf("%s: %w on %s (vig places threads on Linux only)", what, errors.ErrUnsupported, runtime.GOOS)
}

// ThreadAffinity is only implemented on Linux.
func ThreadAffinity() ([]int, error) { return nil, errNotLinux("sched_getaffinity") }

// CurrentCPU is only implemented on Linux.
func CurrentCPU() (int, error) { return -1, errNotLinux("getcpu") }

// LockHot is only implemented on Linux.
func LockHot(opts HotOptions) (ThreadReport, func() error, error) {
	return ThreadReport{TID: -1, UclampMin: -1}, nil, errNotLinux("hot thread placement")
}

// SetProcessCPUs is only implemented on Linux.
func SetProcessCPUs(cpus []int) (ProcessReport, func() error, error) {
	return ProcessReport{Requested: cpus}, nil, errNotLinux("process_cpus")
}

// ProcessThreads is only implemented on Linux.
func ProcessThreads() ([]int, error) { return nil, errNotLinux("listing threads") }

// ProcessAffinity is only implemented on Linux.
func ProcessAffinity() ([]int, error) { return nil, errNotLinux("sched_getaffinity") }

func onMainThread() bool { return false }
