// Package version reports which vig this is. Release builds stamp the version with
//
//	go build -ldflags "-X github.com/vig-edge/vig/build/version.version=v1.2.3"
//
// (the Makefile does, from build/version.sh); any other build reports what Go
// recorded in the binary: the module version (go install …@v0.4.0), else the
// release in the committed VERSION file with the VCS revision (v0.4.0-devel-abc123).
package version

import (
	_ "embed"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set with -ldflags -X; never written by a build step.
var version string

// release is the last release this source descends from; it travels with the
// source, where tags may not.
//
//go:embed VERSION
var release string

// Release returns the committed release version (v0.4.0).
func Release() string { return strings.TrimSpace(release) }

// String returns the stamped version, else the module version Go embedded, else
// the release with the VCS revision.
func String() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Release() + "-devel"
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
		return Release() + "-devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return Release() + "-devel-" + rev + modified
}

// Full is String plus the toolchain and platform, for `vig version`.
func Full() string {
	return "vig " + String() + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
