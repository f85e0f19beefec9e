#!/bin/sh
# Deploy and run vig on an Android phone over adb (no root needed).
#
#   android/vig-adb.sh push  [--binary FILE] [--config FILE] [--force]  build (unless --binary), push
#   android/vig-adb.sh start [--stayon]   start vig in the background (--stayon: svc power stayon usb)
#   android/vig-adb.sh stop               SIGTERM: vig drains and exits; undoes --stayon
#   android/vig-adb.sh logs  [FILE]       pull the log (default bin/vig-android.log)
#   android/vig-adb.sh status             is vig running, and the log's last lines
#
# push installs examples/android.yaml unless --config names another. A vig.yaml
# changed on the phone is never overwritten: push keeps it and says so; --config
# with a different file stops unless --force (the old one is kept as vig.yaml.bak).
#
# Environment: ADB (the adb binary, default adb), ANDROID_SERIAL (which device,
# when several are attached), DEVICE_DIR (default /data/local/tmp/vig), GO.
# Everything lives in DEVICE_DIR: vig, vig.yaml, vig.log, vig.pid.
set -eu

ADB=${ADB:-adb}
DEVICE_DIR=${DEVICE_DIR:-/data/local/tmp/vig}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

die() { echo "vig-adb: $*" >&2; exit 1; }
# usage prints the comment block at the top of this file.
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }

case ${1:-} in
-h | --help | help) usage; exit 0 ;;
esac
command -v "$ADB" >/dev/null 2>&1 || die "$ADB not found: install Android's platform-tools (apt-get install -y adb) or set ADB=/path/to/adb"

# pick_device checks that exactly one device is ready (or that ANDROID_SERIAL names
# one) and sets serial.
pick_device() {
	list=$("$ADB" devices) || die "$ADB devices failed: is the adb server running? ($ADB start-server)"
	ready=$(echo "$list" | awk 'NR > 1 && $2 == "device" { print $1 }')
	unauthorized=$(echo "$list" | awk 'NR > 1 && $2 == "unauthorized" { print $1 }')
	if [ -n "${ANDROID_SERIAL:-}" ]; then
		echo "$ready" | grep -qx "$ANDROID_SERIAL" ||
			die "ANDROID_SERIAL=$ANDROID_SERIAL is not a ready device; ready: ${ready:-none} ($ADB devices)"
		serial=$ANDROID_SERIAL
		return
	fi
	n=$(echo "$ready" | grep -c . || true)
	case $n in
	1) serial=$ready ;;
	0)
		[ -z "$unauthorized" ] || die "device $unauthorized is unauthorized: unlock it and accept the USB debugging prompt, then retry"
		die "no device: connect a phone by USB with USB debugging on (Settings > Developer options) and check $ADB devices"
		;;
	*) die "$n devices attached ($(echo $ready)): set ANDROID_SERIAL to the one to use" ;;
	esac
}

adb_() { "$ADB" -s "$serial" "$@"; }
# sh_ runs a command on the device in DEVICE_DIR.
sh_() { adb_ shell "cd $DEVICE_DIR && $1"; }

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
push)
	binary= config=$repo/examples/android.yaml config_given= force=
	while [ $# -gt 0 ]; do
		case $1 in
		--binary) binary=${2:?--binary needs a FILE}; shift ;;
		--config) config=${2:?--config needs a FILE} config_given=1; shift ;;
		--force) force=1 ;;
		*) die "push: unknown argument $1" ;;
		esac
		shift
	done
	[ -f "$config" ] || die "no config at $config: pass --config FILE"
	pick_device
	# The config on the phone: vig.yaml, and beside it the copy push last wrote
	# (vig.yaml.installed), which tells a config changed on the phone from one
	# push may replace.
	cfg_action=install
	if sh_ "test -f vig.yaml"; then
		tmp=$(mktemp)
		trap 'rm -f "$tmp"' EXIT
		adb_ pull "$DEVICE_DIR/vig.yaml" "$tmp" >/dev/null
		if cmp -s "$config" "$tmp"; then
			cfg_action=same
		elif [ -n "$force" ] || sh_ "cmp -s vig.yaml vig.yaml.installed 2>/dev/null"; then
			cfg_action=replace
		elif [ -n "$config_given" ]; then
			die "vig.yaml on $serial differs from $config and was changed there since it was pushed: nothing pushed. Compare them (adb pull $DEVICE_DIR/vig.yaml), then rerun with --force to replace it (the old one is kept as vig.yaml.bak)"
		else
			cfg_action=keep
		fi
	fi
	if [ -z "$binary" ]; then
		make -C "$repo" --no-print-directory arm64 ${GO:+GO=$GO} >&2
		binary=$repo/bin/vig-linux-arm64
	fi
	[ -f "$binary" ] || die "no binary at $binary: make arm64"
	adb_ shell "mkdir -p $DEVICE_DIR"
	adb_ push "$binary" "$DEVICE_DIR/vig" >/dev/null
	adb_ shell "chmod 755 $DEVICE_DIR/vig"
	case $cfg_action in
	install | replace)
		[ "$cfg_action" = install ] || sh_ "cp vig.yaml vig.yaml.bak"
		adb_ push "$config" "$DEVICE_DIR/vig.yaml" >/dev/null
		sh_ "cp vig.yaml vig.yaml.installed"
		note="$(basename "$config") as vig.yaml"
		[ "$cfg_action" = install ] || note="$note (the old one is vig.yaml.bak)"
		;;
	same)
		sh_ "cp vig.yaml vig.yaml.installed"
		note="vig.yaml unchanged (already $(basename "$config"))"
		;;
	keep)
		adb_ push "$config" "$DEVICE_DIR/vig.yaml.new" >/dev/null
		note="kept the vig.yaml changed on the phone; $(basename "$config") is beside it as vig.yaml.new (--force replaces it)"
		;;
	esac
	echo "pushed $(basename "$binary") as vig to $serial:$DEVICE_DIR; $note"
	echo "next: android/vig-adb.sh start (apps reach vig at 127.0.0.1:9001; from this computer: adb forward tcp:9001 tcp:9001)"
	;;
start)
	stayon=
	while [ $# -gt 0 ]; do
		case $1 in
		--stayon) stayon=1 ;;
		*) die "start: unknown argument $1" ;;
		esac
		shift
	done
	pick_device
	sh_ "test -x vig && test -f vig.yaml" || die "vig is not on $serial: vig-adb.sh push first"
	if sh_ 'test -f vig.pid && kill -0 $(cat vig.pid) 2>/dev/null'; then
		die "vig already runs on $serial (pid $(sh_ 'cat vig.pid')): vig-adb.sh stop first"
	fi
	if [ -n "$stayon" ]; then
		# Keeps the screen on while USB powers the phone: no Doze during measurements.
		adb_ shell "svc power stayon usb"
		sh_ "touch stayon"
	fi
	# TMPDIR: Android has no /tmp. nohup and </dev/null: vig outlives the adb shell.
	sh_ "rm -f vig.log; TMPDIR=$DEVICE_DIR nohup ./vig serve -c vig.yaml >vig.log 2>&1 </dev/null & echo \$! >vig.pid"
	i=0
	until sh_ "grep -q 'vig serving' vig.log"; do
		i=$((i + 1))
		if [ $i -gt 50 ] || ! sh_ 'kill -0 $(cat vig.pid) 2>/dev/null'; then
			sh_ "cat vig.log" >&2 || true
			die "vig did not start on $serial (log above; vig-adb.sh logs pulls it)"
		fi
		sleep 0.2
	done
	echo "vig runs on $serial (pid $(sh_ 'cat vig.pid')); vig-adb.sh stop drains it"
	;;
stop)
	pick_device
	sh_ 'test -f vig.pid && kill -0 $(cat vig.pid) 2>/dev/null' || die "vig is not running on $serial"
	sh_ 'kill -TERM $(cat vig.pid)'
	i=0
	while sh_ 'kill -0 $(cat vig.pid) 2>/dev/null'; do
		i=$((i + 1))
		[ $i -le 150 ] || die "vig did not exit within 30 s of SIGTERM on $serial: vig-adb.sh logs, then adb shell kill -9 \$(cat $DEVICE_DIR/vig.pid)"
		sleep 0.2
	done
	sh_ "rm -f vig.pid"
	if sh_ "test -f stayon"; then
		adb_ shell "svc power stayon false"
		sh_ "rm -f stayon"
	fi
	sh_ "tail -n 1 vig.log"
	;;
logs)
	dest=${1:-$repo/bin/vig-android.log}
	pick_device
	mkdir -p "$(dirname "$dest")"
	adb_ pull "$DEVICE_DIR/vig.log" "$dest" >/dev/null || die "no log on $serial: vig-adb.sh start first"
	echo "$dest"
	;;
status)
	pick_device
	if sh_ 'test -f vig.pid && kill -0 $(cat vig.pid) 2>/dev/null'; then
		echo "vig runs on $serial (pid $(sh_ 'cat vig.pid'))"
	else
		echo "vig is not running on $serial"
	fi
	sh_ "tail -n 5 vig.log 2>/dev/null" || true
	;;
*) die "usage: vig-adb.sh push|start|stop|logs|status (vig-adb.sh --help)" ;;
esac
