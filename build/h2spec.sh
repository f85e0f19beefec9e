#!/usr/bin/env bash
# h2spec (RFC 9113 / RFC 7541 conformance) against `vig serve` and, in the same
# run, against the servers vig is compared with: grpc-go's (vig mock-backend, the
# Triton-protocol mock) and nginx's grpc_pass (when nginx is installed). Prints
# each one's passed/failed/skipped and, with -v, vig's failed cases.
#
#   build/h2spec.sh [-v] [path/to/vig]
#
# h2spec is pinned (H2SPEC below) and installed with `go install` when missing.
# Exit status: 1 when vig fails more than H2SPEC_MAX_FAILED cases (default 2),
# or passes fewer cases than a peer.
set -euo pipefail

H2SPEC_PKG=github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
MAX_FAILED=${H2SPEC_MAX_FAILED:-2}
verbose=0
if [ "${1:-}" = -v ]; then verbose=1; shift; fi
VIG=${1:-bin/vig}
GO=${GO:-go}
export PATH="$(dirname "$(command -v "$GO" 2>/dev/null || echo /usr/local/go/bin/go)"):$HOME/go/bin:$PATH"

if ! command -v h2spec >/dev/null; then
	echo "installing $H2SPEC_PKG" >&2
	"$GO" install "$H2SPEC_PKG"
fi
[ -x "$VIG" ] || { echo "$VIG not found: run make build first" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
waitport() {
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "nothing listens on 127.0.0.1:$1" >&2; return 1
}

mock=$(freeport); vigp=$(freeport)
"$VIG" mock-backend --model detector=1 --listen "127.0.0.1:$mock" >"$tmp/mock.log" 2>&1 & pids+=($!)
cat >"$tmp/vig.yaml" <<YAML
listen: {grpc: "127.0.0.1:$vigp", unix: "off", metrics: "off", ring: "off"}
backend: {address: "127.0.0.1:$mock", slots: 1}
models:
  detector: {exec_ms: 1}
streams:
  - {name: detector, model: detector, class: protected, period_ms: 50, max_age_ms: 50}
YAML
waitport "$mock"
"$VIG" serve -c "$tmp/vig.yaml" -no-device-checks >"$tmp/vig.log" 2>&1 & pids+=($!)
waitport "$vigp"

targets=("vig serve:$vigp" "grpc-go (vig mock-backend):$mock")
if command -v nginx >/dev/null; then
	ngp=$(freeport)
	mkdir -p "$tmp/nginx"
	cat >"$tmp/nginx.conf" <<CONF
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx/error.log;
events {}
http {
	access_log off;
	client_body_temp_path $tmp/nginx; proxy_temp_path $tmp/nginx; fastcgi_temp_path $tmp/nginx;
	uwsgi_temp_path $tmp/nginx; scgi_temp_path $tmp/nginx;
	# As an operator sets nginx up for gRPC (bench/datapath.go's nginxConfig): an
	# upstream with a keepalive pool. h2spec speaks to nginx's frontend only.
	upstream backend { server 127.0.0.1:$mock; keepalive 16; }
	server {
		listen 127.0.0.1:$ngp http2;
		location / { grpc_pass grpc://backend; }
	}
}
CONF
	nginx -c "$tmp/nginx.conf" -e "$tmp/nginx/error.log" >"$tmp/nginx.log" 2>&1 & pids+=($!)
	waitport "$ngp"
	targets+=("nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') grpc_pass:$ngp")
else
	echo "nginx not installed (apt-get install -y nginx): its column is left out" >&2
fi

status=0
vigpass=0
printf '%-34s %7s %7s %7s\n' server passed failed skipped
for t in "${targets[@]}"; do
	name=${t%:*}; port=${t##*:}
	out="$tmp/h2spec-$port.txt"
	h2spec -h 127.0.0.1 -p "$port" -o 2 >"$out" 2>&1 || true
	sum=$(grep -E '^[0-9]+ tests, ' "$out" | tail -1)
	passed=$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$sum")
	failed=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$sum")
	skipped=$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$sum")
	printf '%-34s %7s %7s %7s\n' "$name" "$passed" "$failed" "$skipped"
	if [ "$name" = "vig serve" ]; then
		vigpass=$passed
		[ "$failed" -le "$MAX_FAILED" ] || status=1
		if [ $verbose = 1 ] || [ "$failed" -gt "$MAX_FAILED" ]; then
			sed -n '/^Failures:/,$p' "$out" | grep -E '^\s+[0-9.]+|^\s+-> |^\s+Expected|^\s+Actual' | sed 's/^/    /' >&2 || true
		fi
	elif [ "$passed" -gt "$vigpass" ]; then
		echo "  $name passes more cases than vig ($passed > $vigpass)" >&2
		status=1
	fi
done
exit $status
