#!/bin/sh
# make release: static linux/arm64 and linux/amd64 binaries with the version
# stamped, built reproducibly (same source and Go → same bytes), their SHA-256
# sums, and a size report of the arm64 binary. Fails when arm64 exceeds the budget.
#
#   VERSION=v0.3.0 build/release.sh [DIST_DIR]
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
VERSION=${VERSION:-$(./build/version.sh)}
GOTAGS=${GOTAGS-grpcnotrace} # see the Makefile
dist=${1:-dist}
ldx="-X github.com/vig-edge/vig/build/version.version=$VERSION"
mkdir -p "$dist"
rm -f "$dist"/vig-* "$dist"/SHA256SUMS "$dist"/size-report.txt

# -trimpath: no build paths in the binary. -buildvcs=false: no VCS state either (the
# version is stamped explicitly). -buildid=: no build ID that differs by machine.
# So the same commit, Go version and GOTAGS give the same bytes anywhere.
for arch in arm64 amd64; do
	out=$dist/vig-$VERSION-linux-$arch
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -buildvcs=false -tags "$GOTAGS" \
		-ldflags "-s -w -buildid= $ldx" -o "$out" ./cmd/vig
	echo "$out: $(stat -c %s "$out") bytes"
done
(cd "$dist" && sha256sum vig-"$VERSION"-linux-* >SHA256SUMS)
cat "$dist/SHA256SUMS"

# The report needs symbols: the same build without -s -w, in a scratch directory.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 GOOS=linux GOARCH=arm64 "$GO" build -trimpath -buildvcs=false -tags "$GOTAGS" -ldflags "$ldx" -o "$tmp/vig" ./cmd/vig
"$GO" run ./build/sizereport -top 25 "$tmp/vig" | sed "s|$tmp/vig|vig-$VERSION-linux-arm64 (unstripped)|" | tee "$dist/size-report.txt"
./build/sizecheck.sh "$dist/vig-$VERSION-linux-arm64"
