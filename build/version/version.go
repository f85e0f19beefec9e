// Package version reports which vig this is. Release builds stamp the version with
//
//	go build -ldflags "-X github.com/vig-edge/vig/build/version.version=v1.2.3"
//
// (the Makefile does); any other build reports what Go recorded in the binary: the
// module version, or the VCS revision and whether the tree was modified.
package version

import (
	"runtime"
	"runtime/debug"
)

// version is set with -ldflags -X; never written by a build step.
var version string

// String returns the stamped version, else the one Go embedded, else "devel".
func String() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return "devel-" + rev + modified
}

// Full is String plus the toolchain and platform, for `vig version`.
func Full() string {
	return "vig " + String() + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
