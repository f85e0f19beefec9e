#!/bin/sh
# Install or remove vig as a systemd service (Jetson, or any systemd machine).
#
#   sudo jetson/install.sh [--profiling] [--binary FILE] [--config FILE]
#   sudo jetson/install.sh --uninstall
#
# Installs the binary as /usr/local/bin/vig, the config as /etc/vig/vig.yaml (an
# existing one is kept), the unit into /etc/systemd/system, creates the system user
# vig, and enables and starts vig.service (or vig-profiling.service with
# --profiling: the only variant with CAP_BPF and CAP_PERFMON). --uninstall stops and
# removes the units and the binary; /etc/vig and /var/lib/vig are kept.
#
# DESTDIR, SYSTEMCTL and USERADD override where files go and which tools run (tests
# use them).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
DESTDIR=${DESTDIR:-}
SYSTEMCTL=${SYSTEMCTL:-systemctl}
USERADD=${USERADD:-useradd}
binary=$here/../bin/vig-linux-arm64
config=$here/../examples/demo.yaml
unit=vig.service
other=vig-profiling.service
uninstall=

die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
	case $1 in
	--profiling) unit=vig-profiling.service other=vig.service ;;
	--uninstall) uninstall=1 ;;
	--binary) [ $# -ge 2 ] || die "--binary needs a FILE"; binary=$2; shift ;;
	--config) [ $# -ge 2 ] || die "--config needs a FILE"; config=$2; shift ;;
	-h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

if ! id vig >/dev/null 2>&1; then
	"$USERADD" --system --no-create-home --home-dir /var/lib/vig --shell /usr/sbin/nologin vig
fi
install -D -m 0755 "$binary" "$DESTDIR/usr/local/bin/vig"
if [ -e "$DESTDIR/etc/vig/vig.yaml" ]; then
	echo "keeping the existing $DESTDIR/etc/vig/vig.yaml"
else
	install -D -m 0644 "$config" "$DESTDIR/etc/vig/vig.yaml"
fi
install -D -m 0644 "$here/systemd/$unit" "$units/$unit"
"$SYSTEMCTL" disable --now "$other" 2>/dev/null || true # the variants conflict; the other may not exist
rm -f "$units/$other"
"$SYSTEMCTL" daemon-reload
"$SYSTEMCTL" enable --now "$unit"
echo "$unit installed and started: systemctl status ${unit%.service}; journalctl -u ${unit%.service} -f"
