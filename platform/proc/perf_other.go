//go:build !linux

package proc

import (
	"errors"
	"fmt"
)

// Counters are open perf_event counters; only Linux has them.
type Counters struct{}

// OpenCounters reports that perf events are Linux-only.
func OpenCounters(pid int) (*Counters, error) {
	return nil, fmt.Errorf("perf counters: %w (Linux only)", errors.ErrUnsupported)
}

// Read returns nothing on this OS.
func (c *Counters) Read() (PerfCounts, error) { return PerfCounts{}, errors.ErrUnsupported }

// Close does nothing on this OS.
func (c *Counters) Close() error { return nil }
