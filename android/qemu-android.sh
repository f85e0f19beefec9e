#!/bin/sh
# Runs the static linux/arm64 vig under qemu-aarch64 in an Android-shaped
# environment and checks that it detects Android, chooses sealed memfd rings
# because there is no /dev/shm, and says so; then drains it. build/test.sh runs it.
#
#   android/qemu-android.sh bin/vig-linux-arm64
#
# The environment: $VIG_SYSROOT is a fixture tree with /system/bin/linker64 and a
# writable /data/local/tmp and no /dev/shm; no $TMPDIR, no $ANDROID_ROOT (so the
# linker is what shows Android). As root, vig also runs in a mount namespace whose
# /dev is empty, so it could not fall back to /dev/shm even if it tried.
set -eu
bin=${1:?usage: $0 ARM64_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
QEMU=${QEMU:-qemu-aarch64}
command -v "$QEMU" >/dev/null || { echo "$QEMU missing: apt-get install -y qemu-user"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/system/bin" "$root/data/local/tmp"
cp "$here/testdata/phone-awake/system/bin/linker64" "$root/system/bin/linker64"
cat >"$work/vig.yaml" <<YAML
listen: {grpc: "127.0.0.1:0", metrics: "127.0.0.1:0", unix: "@vig-qemu-android-$$"}
backend: {address: "127.0.0.1:0", embedded: true, slots: 1}
models: {det: {exec_ms: 1}}
YAML

hide_dev=
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
	hide_dev=1
fi
# run execs its command, so the background job's pid is vig's (qemu's) own:
# unshare without --fork and sh -c exec keep the same process.
run() {
	if [ -n "$hide_dev" ]; then
		exec unshare -m sh -c 'mount -t tmpfs vig-no-dev /dev && exec "$@"' sh "$@"
	fi
	exec "$@"
}
export VIG_SYSROOT="$root"
unset TMPDIR ANDROID_ROOT
run "$QEMU" "$bin" serve -c "$work/vig.yaml" --no-device-checks >"$work/log" 2>&1 &
pid=$!
i=0
until grep -q 'vig serving' "$work/log"; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
		echo "vig did not start under $QEMU:"; cat "$work/log"; exit 1
	fi
	sleep 0.1
done
kill -INT $pid
wait $pid || true
cat "$work/log"
fail() { echo "qemu-android: $*"; exit 1; }
grep -q 'msg="android: run-time defaults" detected="/system/bin/linker64 exists" rings="sealed memfd (there is no /dev/shm)" temp_dir=/data/local/tmp' "$work/log" ||
	fail "vig did not say it chose sealed memfd rings on Android"
grep -q 'drained: 0 answered, 0 lost' "$work/log" || fail "vig did not drain"
if grep -q 'level=ERROR' "$work/log"; then fail "errors in the log"; fi
[ -n "$hide_dev" ] && echo "qemu-android: ok (in a mount namespace with an empty /dev)" || echo "qemu-android: ok (not root: the machine's /dev/shm stayed visible)"
