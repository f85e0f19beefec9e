#!/usr/bin/env bash
# A real run for the dashboard preview (docs/img/dashboard.png): vig serving scenario
# B's contracts (SCENARIOS.md) in front of a mock Triton (vig mock-backend, its own
# process), four open-loop HTTP/REST sensors (curl --rate), and Prometheus scraping
# vig every 5 s with deploy/prometheus/vig-rules.yaml loaded. Timeline:
#   0-4 min   every sensor at its contracted frame rate
#   4-6 min   pose floods: ten sensors ask for 10x its rate together
#   6-8 min   Triton (the mock) is gone: VigBackendDown fires after 1 minute
#   8-9 min   Triton back
#   9 min     vig restarts (SIGTERM: drain, then a new process)
#   9-11 min  contracted rates
# Then: go run ./preview -prometheus http://127.0.0.1:19091 -out DIR (see main.go).
#
#   deploy/test/preview/run.sh VIG_BINARY WORKDIR
set -euo pipefail
vig=$(realpath "$1"); w=$2
rules=$(realpath "$(dirname "$0")/../../prometheus/vig-rules.yaml")
mkdir -p "$w"; cd "$w"
cat >vig.yaml <<CFG
listen: {grpc: "127.0.0.1:19001", http: "127.0.0.1:19002", metrics: "127.0.0.1:19090"}
backend: {address: "127.0.0.1:19801", slots: 1, seed: 1}
models:
  detector_small: {exec_ms: 8}
  pose: {exec_ms: 5}
  depth: {exec_ms: 10}
  vlm: {exec_ms: 200}
streams:
  - {name: detector, model: detector_small, class: protected, period_ms: 50, max_age_ms: 50, queue: latest}
  - {name: pose, model: pose, class: high, period_ms: 33, max_age_ms: 66, queue: latest}
  - {name: depth, model: depth, class: high, period_ms: 33, max_age_ms: 100, queue: latest}
  - {name: vlm, model: vlm, class: best_effort, period_ms: 1000, max_age_ms: 2000, queue: latest}
CFG
cat >prometheus.yml <<CFG
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ["$rules"]
scrape_configs:
  - job_name: vig
    static_configs: [{targets: ["127.0.0.1:19090"]}]
CFG
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
mock() { "$vig" mock-backend -c vig.yaml --listen 127.0.0.1:19801 2>>mock.log & mockpid=$!; pids+=($mockpid); }
serve() { "$vig" serve -c vig.yaml --log-format json 2>>vig.log & vigpid=$!; pids+=($vigpid); }
mock; serve
prometheus --config.file=prometheus.yml --storage.tsdb.path=tsdb --web.listen-address=127.0.0.1:19091 2>prometheus.log & pids+=($!)
sleep 2
# sensor STREAM MODEL RATE SECONDS: POSTs one small frame at RATE per second (serial).
sensor() {
	local body="{\"parameters\":{\"vig_stream\":\"$1\"},\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"UINT8\",\"shape\":[4],\"data\":[1,2,3,4]}]}"
	timeout "$4" curl -s -o /dev/null --rate "$3/s" -X POST -H 'Content-Type: application/json' --data "$body" \
		"http://127.0.0.1:19002/v2/models/$2/infer?frame=[1-1000000]" || true
}
# sensors POSE_RATE SECONDS: the four sensors, waiting for them alone (not for vig,
# the mock or Prometheus, which also run in the background).
sensors() {
	local s=()
	sensor detector detector_small 20 "$2" & s+=($!)
	if [ "$1" != 0 ]; then sensor pose pose "$1" "$2" & s+=($!); fi
	sensor depth depth 30 "$2" & s+=($!)
	sensor vlm vlm 1 "$2" & s+=($!)
	wait "${s[@]}"
}
contracted() { sensors 30 "$1"; }
echo "$(date -u +%T) contracted rates"; contracted 240
echo "$(date -u +%T) pose floods at 10x"
# One curl sends serially, so ten of them at 30/s each ask for 300 frames/s.
flood=()
for _ in $(seq 10); do sensor pose pose 30 120 & flood+=($!); done
sensors 0 120; wait "${flood[@]}"
echo "$(date -u +%T) Triton gone"; kill "$mockpid"; wait "$mockpid" || true
contracted 120
echo "$(date -u +%T) Triton back"; mock; contracted 60
echo "$(date -u +%T) vig restarts"; kill -TERM "$vigpid"; wait "$vigpid" || true; serve; sleep 1
contracted 120
kill -TERM "$vigpid" "$mockpid"; wait "$vigpid" "$mockpid" || true
echo "$(date -u +%T) done; Prometheus still serving on 127.0.0.1:19091 until this script is interrupted"
sleep infinity
