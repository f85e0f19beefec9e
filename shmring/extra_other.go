//go:build !linux

package shmring

func mapExtra(fd int, size uint64) ([]byte, error) { return nil, errNoRegion }

func unmapExtra(mem []byte) {}
