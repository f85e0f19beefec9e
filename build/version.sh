#!/bin/sh
# Prints vig's version for a build: `git describe` when a v* tag is reachable
# (v0.4.0, v0.4.0-3-gabc1234, -dirty when the tree is modified); else the committed
# build/version/VERSION, plus the commits since it last changed and the commit
# (v0.4.0-3-gabc1234), so a clone without tags names the same version.
set -eu
cd "$(dirname "$0")/.."
if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
	echo "$v"
	exit 0
fi
base=$(cat build/version/VERSION)
if ! since=$(git log -1 --format=%H -- build/version/VERSION 2>/dev/null) || [ -z "$since" ]; then
	echo "$base" # not a git checkout: the file alone
	exit 0
fi
n=$(git rev-list --count "$since..HEAD")
dirty=
git diff --quiet HEAD -- 2>/dev/null || dirty=-dirty
if [ "$n" = 0 ]; then
	echo "$base$dirty"
else
	echo "$base-$n-g$(git rev-parse --short HEAD)$dirty"
fi
