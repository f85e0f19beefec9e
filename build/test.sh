#!/usr/bin/env bash
# make test: everything CI checks, runnable on a fresh Debian machine with Go.
# Installs qemu-user (for the arm64 tests) when it is missing and we are root.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
export PATH="$(dirname "$GO"):$PATH"

step() { printf '\n=== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "not gofmt-formatted (run gofmt -w):"; echo "$unformatted"; exit 1
fi

step "go vet"
"$GO" vet ./...

step "h2spec (pinned; TestH2Spec below runs it against the gateway)"
"$GO" install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible

step "go test -race (amd64)"
"$GO" test -race -count=1 -timeout 15m ./...

# Fuzz targets are not fuzzed here: `go test` above replays each one's seeds and
# committed corpus (testdata/fuzz) as plain tests, so the same commit gives the same
# result. Exploratory fuzzing is `make fuzz` (build/fuzz.sh), run by hand.

step "h2spec against vig serve, beside grpc-go's server and nginx grpc_pass (when installed)"
make --no-print-directory build GO="$GO" >/dev/null
./build/h2spec.sh -v bin/vig

step "go build for darwin/arm64 (a developer's laptop: vig doctor, vig bench against a remote vig)"
GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 "$GO" build -o /dev/null ./cmd/vig

step "static linux/arm64 build"
version=$(./build/version.sh)
make --no-print-directory arm64 GO="$GO" VERSION="$version"
file_type=$(od -An -tx1 -N20 bin/vig-linux-arm64 | tr -d ' \n')
# ELF, 64-bit, little endian, EM_AARCH64 (0xb7) at offset 18.
case "$file_type" in 7f454c46020101*b700) ;; *) echo "bin/vig-linux-arm64 is not an arm64 ELF: $file_type"; exit 1 ;; esac
if LC_ALL=C grep -q -a 'ld-linux-aarch64' bin/vig-linux-arm64; then
	echo "bin/vig-linux-arm64 is dynamically linked"; exit 1
fi

step "size budget (arm64, stripped)"
./build/sizecheck.sh bin/vig-linux-arm64

step "make release (both binaries, SHA-256 sums, size report; fails above the budget)"
make --no-print-directory release GO="$GO" VERSION="$version"

step "qemu-aarch64"
if ! command -v qemu-aarch64 >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "installing qemu-user (needed to run the arm64 tests)"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null
	else
		echo "qemu-aarch64 is missing: sudo apt-get install -y qemu-user"; exit 1
	fi
fi

step "vig version (arm64 binary under qemu)"
got=$(qemu-aarch64 bin/vig-linux-arm64 version)
echo "$got"
case "$got" in "vig $version "*linux/arm64) ;; *) echo "expected stamped version $version for linux/arm64"; exit 1 ;; esac

step "Android-like environment (arm64 binary under qemu-aarch64): memfd rings, said so"
sh android/qemu-android.sh bin/vig-linux-arm64

step "go test (arm64 under qemu-aarch64)"
CGO_ENABLED=0 GOARCH=arm64 "$GO" test -count=1 -timeout 15m -exec qemu-aarch64 ./...
