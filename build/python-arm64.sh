#!/bin/sh
# Makes an arm64 CPython sysroot for cmd/vig's TestPythonClientArm64, which runs
# the Python ring client as arm64 under qemu-aarch64 (-L the sysroot). Debian's
# python3:arm64 cannot be installed beside the amd64 one (python3.X-minimal is
# not co-installable), so the packages are downloaded and unpacked instead:
# nothing is installed. Needs root for dpkg --add-architecture arm64 and apt.
#   build/python-arm64.sh [DIR]   (default ${XDG_CACHE_HOME:-$HOME/.cache}/vig/python-arm64)
set -eu
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/vig/python-arm64}
if ls "$dir"/usr/bin/python3.* >/dev/null 2>&1; then
	echo "arm64 CPython sysroot: $dir"; exit 0
fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null || { echo "python-arm64.sh: needs Debian's apt-get and dpkg" >&2; exit 1; }
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	dpkg --add-architecture arm64
	apt-get update -qq
fi
py=$(apt-cache depends python3-minimal:arm64 2>/dev/null | grep -o 'python3\.[0-9]*-minimal' | head -1)
[ -n "$py" ] || { apt-get update -qq; py=$(apt-cache depends python3-minimal:arm64 | grep -o 'python3\.[0-9]*-minimal' | head -1); }
v=${py%-minimal}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The interpreter, its standard library, and what the ring client loads
# (ctypes: libffi; libatomic for the client's atomics).
(cd "$tmp" && chmod 755 . && apt-get download -q "$v-minimal:arm64" "lib$v-minimal:arm64" "lib$v-stdlib:arm64" \
	libc6:arm64 libgcc-s1:arm64 libexpat1:arm64 zlib1g:arm64 libffi8:arm64 libatomic1:arm64 \
	libbz2-1.0:arm64 liblzma5:arm64 libuuid1:arm64 libcrypt1:arm64 >/dev/null)
mkdir -p "$dir.tmp"
for d in "$tmp"/*.deb; do dpkg -x "$d" "$dir.tmp"; done
mv "$dir.tmp" "$dir"
echo "arm64 CPython sysroot: $dir ($v)"
