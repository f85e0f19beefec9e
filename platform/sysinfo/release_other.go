//go:build !linux

package sysinfo

import "runtime"

func readRelease() string { return runtime.GOOS }
