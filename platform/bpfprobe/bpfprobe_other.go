//go:build !linux

package bpfprobe

import (
	"errors"
	"fmt"
)

var errNotLinux = fmt.Errorf("eBPF: %w (Linux only)", errors.ErrUnsupported)

// Collector is a running eBPF collector; only Linux has one.
type Collector struct{}

// Available reports that eBPF is Linux-only.
func Available() error { return errNotLinux }

// Start reports that eBPF is Linux-only.
func Start(Options) (*Collector, error) { return nil, errNotLinux }

// Read reports that eBPF is Linux-only.
func (c *Collector) Read() (*Counts, error) { return nil, errNotLinux }

// Detach does nothing on this OS.
func (c *Collector) Detach() error { return nil }

// Close does nothing on this OS.
func (c *Collector) Close() error { return nil }
