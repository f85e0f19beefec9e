#!/bin/sh
# Install or remove vig as a systemd service (Jetson, or any systemd machine).
#
#   sudo jetson/install.sh [--profiling] [--binary FILE] [--config FILE] [--force]
#   sudo jetson/install.sh --uninstall
#
# Installs the binary as /usr/local/bin/vig, the config as /etc/vig/vig.yaml
# (default examples/jetson.yaml: vig in front of Triton at 127.0.0.1:8001), the unit
# into /etc/systemd/system, creates the system user vig, and enables and starts
# vig.service (or vig-profiling.service with --profiling: the only variant with
# CAP_BPF and CAP_PERFMON). A config you changed is never overwritten: a re-install
# keeps it and says so; --config with a different file stops unless --force (the
# old one is saved as vig.yaml.bak). --uninstall stops and removes the units and
# the binary; /etc/vig and /var/lib/vig are kept.
#
# DESTDIR, SYSTEMCTL and USERADD override where files go and which tools run (tests
# use them).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
DESTDIR=${DESTDIR:-}
SYSTEMCTL=${SYSTEMCTL:-systemctl}
USERADD=${USERADD:-useradd}
binary=$here/../bin/vig-linux-arm64
config=$here/../examples/jetson.yaml
config_given=
force=
unit=vig.service
other=vig-profiling.service
uninstall=

die() { echo "install.sh: $*" >&2; exit 1; }
# usage prints the comment block at the top of this file.
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }

while [ $# -gt 0 ]; do
	case $1 in
	--profiling) unit=vig-profiling.service other=vig.service ;;
	--uninstall) uninstall=1 ;;
	--force) force=1 ;;
	--binary) [ $# -ge 2 ] || die "--binary needs a FILE"; binary=$2; shift ;;
	--config) [ $# -ge 2 ] || die "--config needs a FILE"; config=$2 config_given=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown argument $1 (try --help)" ;;
	esac
	shift
done

if [ -z "$DESTDIR" ] && [ "$(id -u)" != 0 ]; then
	die "must run as root to install a system service: sudo $0 $*"
fi
command -v "$SYSTEMCTL" >/dev/null || die "$SYSTEMCTL not found: this machine does not run systemd; start vig by hand (vig serve -c FILE)"

units=$DESTDIR/etc/systemd/system

if [ -n "$uninstall" ]; then
	for u in vig.service vig-profiling.service; do
		"$SYSTEMCTL" disable --now "$u" 2>/dev/null || true # not installed: nothing to stop
		rm -f "$units/$u"
	done
	rm -f "$DESTDIR/usr/local/bin/vig"
	"$SYSTEMCTL" daemon-reload
	echo "vig removed; its config (/etc/vig) and state (/var/lib/vig) are kept: rm -r them to forget vig entirely"
	exit 0
fi

[ -f "$binary" ] || die "no binary at $binary: run make arm64 (on the Jetson: make build) or pass --binary FILE"
[ -f "$config" ] || die "no config at $config: pass --config FILE"

# The config: /etc/vig/vig.yaml, and beside it the copy install.sh last wrote
# (.vig.yaml.installed), which tells a config the user changed from one it may
# replace.
etc=$DESTDIR/etc/vig
cfg=$etc/vig.yaml
pristine=$etc/.vig.yaml.installed
cfg_note=
if [ ! -e "$cfg" ]; then
	cfg_action=install
elif cmp -s "$config" "$cfg"; then
	cfg_action=same
elif [ -n "$force" ]; then
	cfg_action=replace
elif [ -f "$pristine" ] && cmp -s "$pristine" "$cfg"; then
	cfg_action=replace # unchanged since the last install: nothing of the user's to lose
elif [ -n "$config_given" ]; then
	die "/etc/vig/vig.yaml differs from $config and was changed since it was installed: nothing installed. Compare them (diff $cfg $config), then rerun with --force to replace it (the old one is kept as vig.yaml.bak)"
else
	cfg_action=keep
fi

if ! id vig >/dev/null 2>&1; then
	"$USERADD" --system --no-create-home --home-dir /var/lib/vig --shell /usr/sbin/nologin vig
fi
install -D -m 0755 "$binary" "$DESTDIR/usr/local/bin/vig"
case $cfg_action in
install)
	install -D -m 0644 "$config" "$cfg"
	cfg_note="installed $config as /etc/vig/vig.yaml"
	;;
replace)
	cp -p "$cfg" "$cfg.bak"
	install -m 0644 "$config" "$cfg"
	cfg_note="replaced /etc/vig/vig.yaml with $config (the old one is /etc/vig/vig.yaml.bak)"
	;;
same) cfg_note="/etc/vig/vig.yaml is already $config" ;;
keep)
	install -m 0644 "$config" "$cfg.new"
	cfg_note="kept your changed /etc/vig/vig.yaml; the default is beside it as vig.yaml.new (--force replaces yours)"
	;;
esac
[ "$cfg_action" = keep ] || install -m 0644 "$config" "$pristine"
install -D -m 0644 "$here/systemd/$unit" "$units/$unit"
"$SYSTEMCTL" disable --now "$other" 2>/dev/null || true # the variants conflict; the other may not exist
rm -f "$units/$other"
"$SYSTEMCTL" daemon-reload
"$SYSTEMCTL" enable --now "$unit"
echo "installed /usr/local/bin/vig ($(basename "$binary")); $cfg_note"
echo "$unit started with vig serve --strict -c /etc/vig/vig.yaml: systemctl status ${unit%.service}; journalctl -u ${unit%.service} -f"
echo "check the contracts and the device: vig doctor -c /etc/vig/vig.yaml"
