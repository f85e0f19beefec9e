// Package sysinfo holds the facts about the running system that several parts of
// vig need and that must have one answer: the kernel release and its version,
// whether this Linux is Android (decided at run time: vig ships one static
// GOOS=linux binary), and where the kernel's tracefs may be mounted.
//
// Parsing is pure and tested on strings from real machines; Release reads uname
// once per process.
package sysinfo

import (
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Locations. Variables so that tests and odd systems can point elsewhere.
var (
	// LinkerPath is Android's 64-bit dynamic linker: present on every Android
	// system, absent elsewhere.
	LinkerPath = "/system/bin/linker64"
	// TracefsDirs are the places tracefs may be mounted, in the order tried.
	TracefsDirs = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}
)

// ParseVersion extracts major.minor from a kernel release such as
// "4.14.190-perf+", "6.1.0-18-arm64" or "5.10.43+".
func ParseVersion(release string) (major, minor int, ok bool) {
	maj, rest, found := strings.Cut(release, ".")
	if !found {
		return 0, 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil || a < 0 {
		return 0, 0, false
	}
	return a, b, true
}

// AtLeast reports whether release is at least major.minor. An unparsable
// release is not.
func AtLeast(release string, major, minor int) bool {
	ma, mi, ok := ParseVersion(release)
	return ok && (ma > major || ma == major && mi >= minor)
}

// DetectAndroid reports whether the system whose "/" is root, with environment
// getenv, is Android, and what showed it.
func DetectAndroid(root fs.FS, getenv func(string) string) (bool, string) {
	if v := getenv("ANDROID_ROOT"); v != "" {
		return true, "ANDROID_ROOT=" + v
	}
	if _, err := fs.Stat(root, strings.TrimPrefix(LinkerPath, "/")); err == nil {
		return true, LinkerPath + " exists"
	}
	return false, "no ANDROID_ROOT and no " + LinkerPath
}

// IsAndroid reports whether vig runs on Android, asked once per process.
func IsAndroid() bool { return isAndroid() }

var isAndroid = sync.OnceValue(func() bool {
	ok, _ := DetectAndroid(os.DirFS("/"), os.Getenv)
	return ok
})

// Release returns the running kernel's release (uname -r), read once; on a
// system without one, the operating system's name.
func Release() string { return release() }

var release = sync.OnceValue(readRelease)
