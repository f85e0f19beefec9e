package shmring

import (
	"strconv"
	"strings"
)

// parseKernelVersion extracts major.minor from a release string such as
// "4.4.302-perf+" or "6.1.0-18-arm64".
func parseKernelVersion(rel string) (major, minor int, ok bool) {
	maj, rest, found := strings.Cut(rel, ".")
	if !found {
		return 0, 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return a, b, true
}
