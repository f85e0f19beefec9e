package android

import (
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"
)

// TempDirs are the directories tried, in order, for Unix sockets and temporary
// files when $TMPDIR is unset or unwritable: Android has no /tmp, and the adb shell
// user may write /data/local/tmp.
var TempDirs = []string{"/data/local/tmp"}

// Facts are what the run-time choices depend on; vig serve fills them from the
// device (platform/shmprobe and the file system), tests from fixtures.
type Facts struct {
	Getenv   func(string) string
	Memfd    error              // nil: memfd_create with sealing works
	DevShm   error              // nil: /dev/shm exists (it does not on Android)
	Writable func(string) error // nil: the directory exists and this user may create files in it
}

// Plan is what vig does differently on Android.
type Plan struct {
	// Ring is the shared-memory mechanism vig's rings use, and why.
	Ring string
	// TempDir is the writable directory for Unix sockets and temporary files
	// (vig serve sets $TMPDIR to it when $TMPDIR is unset); "" when none is.
	TempDir string
	// Problems are settings that cannot work on Android, each saying the fix.
	Problems []string
}

// Choose decides the Android run-time defaults. addrs maps config keys
// (listen.grpc, backend.address, …) to their values; values are host:port,
// "unix:PATH", a path or "@abstract".
func Choose(f Facts, addrs map[string]string) Plan {
	var p Plan
	switch {
	case f.Memfd == nil && f.DevShm != nil:
		p.Ring = "sealed memfd (there is no /dev/shm)"
	case f.Memfd == nil:
		p.Ring = "sealed memfd"
	case f.DevShm == nil:
		p.Ring = fmt.Sprintf("/dev/shm files under a fault guard (memfd: %v)", f.Memfd)
	default:
		p.Ring = "none: only the copy path works"
		p.Problems = append(p.Problems, fmt.Sprintf("no shared memory for rings (memfd: %v; /dev/shm: %v): leave listen.ring unset and send payloads inside the requests", f.Memfd, f.DevShm))
	}

	if d := f.Getenv("TMPDIR"); d != "" && f.Writable(d) == nil {
		p.TempDir = d
	} else {
		for _, d := range TempDirs {
			if f.Writable(d) == nil {
				p.TempDir = d
				break
			}
		}
	}
	if p.TempDir == "" {
		p.Problems = append(p.Problems, fmt.Sprintf("no writable directory for Unix sockets and temporary files (tried $TMPDIR and %s): set TMPDIR to one this user may write", strings.Join(TempDirs, ", ")))
	}

	keys := make([]string, 0, len(addrs))
	for k := range addrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if msg := addressProblem(k, addrs[k], p.TempDir, f.Writable); msg != "" {
			p.Problems = append(p.Problems, msg)
		}
	}
	return p
}

// addressProblem says why one configured address cannot work on Android, or "".
func addressProblem(key, addr, tempDir string, writable func(string) error) string {
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "unix://"), "unix:")
	switch {
	case addr == "" || strings.HasPrefix(addr, "@") || strings.HasPrefix(addr, "ring:"):
		return "" // off, abstract, or a ring name (abstract socket as well)
	case strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, "."):
		dir := filepath.Dir(addr)
		if err := writable(dir); err != nil {
			fix := "an abstract name (@vig)"
			if tempDir != "" {
				fix = filepath.Join(tempDir, filepath.Base(addr)) + " or " + fix
			}
			return fmt.Sprintf("%s: %s cannot be created (%v): use %s", key, addr, err, fix)
		}
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "" // config validation reports malformed addresses
	}
	if host == "" || net.ParseIP(host) != nil {
		return ""
	}
	return fmt.Sprintf("%s: %q names a host, and Android has no /etc/resolv.conf for vig's resolver: use an IP address (127.0.0.1 for this device)", key, host)
}
