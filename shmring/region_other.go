//go:build !linux

package shmring

import (
	"errors"
	"fmt"
	"runtime"
)

var errNoRegion = fmt.Errorf("shared-memory rings: %w (Linux only; running on %s)", errors.ErrUnsupported, runtime.GOOS)

// Probe reports the backend BackendAuto selects on this machine.
func Probe() (Backend, error) { return 0, errNoRegion }

// CreateRegion creates a region for cfg.
func CreateRegion(cfg Config, b Backend) (*Region, error) { return nil, errNoRegion }

// OpenRegion validates and maps a region received from an untrusted peer.
func OpenRegion(fd int, opts OpenOptions) (*Region, error) { return nil, errNoRegion }

func (r *Region) unmap() error { return nil }

func (r *Region) truncated() bool { return false }

func sameObject(fd int, key string) error { return errNoRegion }
