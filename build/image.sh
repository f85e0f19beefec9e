#!/bin/sh
# make image: vig's OCI image index (linux/arm64 + linux/amd64) without a container
# engine. Builds the two static binaries as build/release.sh does (same flags, so the
# same bytes), then build/image (a Go module of its own, go-containerregistry) writes
#   DIST/image/                   the OCI image layout (tag VERSION: the index;
#                                 VERSION-linux-ARCH: each image)
#   DIST/vig-image-VERSION.tar    the same layout as one archive
# Load it with: skopeo copy oci-archive:DIST/vig-image-VERSION.tar:VERSION docker://REGISTRY/vig:VERSION
# or import one architecture on a k3s node (docs/fleet.md, "The image").
#
#   VERSION=v0.3.0 build/image.sh [DIST_DIR]
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
GOTAGS=${GOTAGS-grpcnotrace} # see the Makefile
dist=${1:-dist}
ldx="-X github.com/vig-edge/vig/build/version.version=$VERSION"
# Every file and the image's creation time carry the commit's time, so the same
# commit gives the same digests.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
revision=$(git rev-parse HEAD 2>/dev/null || true)
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
for arch in arm64 amd64; do
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -buildvcs=false -tags "$GOTAGS" \
		-ldflags "-s -w -buildid= $ldx" -o "$dist/vig-$VERSION-linux-$arch" ./cmd/vig
done
"$GO" -C build/image run . -version "$VERSION" -revision "$revision" -epoch "$SOURCE_DATE_EPOCH" \
	-arm64 "$dist/vig-$VERSION-linux-arm64" -amd64 "$dist/vig-$VERSION-linux-amd64" \
	-config "$PWD/deploy/vig.yaml" -out "$dist/image" -archive "$dist/vig-image-$VERSION.tar"
