//go:build !linux

package shmring

import (
	"errors"
	"fmt"
)

var errNoFutex = fmt.Errorf("shared futex: %w (Linux only)", errors.ErrUnsupported)

func futexWait(addr *uint32, val uint32) error { return errNoFutex }

func futexWake(addr *uint32, n int) error { return errNoFutex }
