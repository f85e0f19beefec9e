//go:build !linux

package shmring

import (
	"errors"
	"fmt"
	"syscall"
)

var errNoEventfd = fmt.Errorf("eventfd doorbells: %w (Linux only)", errors.ErrUnsupported)

func newEventfd() (int, error) { return -1, errNoEventfd }

func bellWrite(fd int, p []byte) { syscall.Write(fd, p) }
