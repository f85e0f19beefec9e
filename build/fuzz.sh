#!/usr/bin/env bash
# make fuzz: exploratory fuzzing, by hand (make test only replays the committed corpus).
# Runs every fuzz target in the module for FUZZTIME (default 60s) each, or those matching
# FUZZ (a regexp on "package Target"), and prints a table: executions, and the longest
# stretch the fuzzer reported 0 executions per second. A failing input is written to the
# package's testdata/fuzz/<Target>/ and fails the run: fix the code and commit the input
# with the fix; plain `go test` (and so make test) replays it from then on.
#
# Each call of a target is bounded (internal/fuzztest.Budget): an input that makes a
# parser slow by orders of magnitude crashes the worker, and is saved like any crasher.
# -fuzzminimizetime bounds how long the fuzzer spends shrinking a new input: Go's status
# line counts those executions only when the shrinking ends, so a long one showed as
# "0/sec" for tens of seconds (golang/go#51484) although the target was running.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
fuzztime=${FUZZTIME:-60s}
filter=${FUZZ:-.}
minimize=${FUZZMINIMIZETIME:-2s}
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

# "dir Target" for every fuzz target, as go test lists them (a source that only
# mentions one, such as a test's fixture in a string, is not a target).
module=$("$GO" list -m)
mapfile -t targets < <("$GO" test -list '^Fuzz' ./... | awk -v mod="$module" '
	/^Fuzz/ { names[n++] = $1; next }
	/^ok[ \t]/ { dir = $2; sub("^" mod, ".", dir); for (i = 0; i < n; i++) print dir, names[i]; n = 0 }' |
	sort -u | grep -E -- "$filter")
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz target matches FUZZ=$filter"; exit 1; }

before=$(git status --porcelain --untracked-files=all -- '*/testdata/fuzz/*' | wc -l)
printf 'fuzzing %d targets, %s each (minimize %s)\n' "${#targets[@]}" "$fuzztime" "$minimize"
failed=()
rows=()
for t in "${targets[@]}"; do
	read -r pkg target <<<"$t"
	log="$logdir/$target.log"
	printf -- '--- %s (%s)\n' "$target" "$pkg"
	if "$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$pkg" >"$log" 2>&1; then
		status=ok
	else
		status=FAILED
		failed+=("$target ($pkg)")
		tail -n 40 "$log"
	fi
	# The status lines come every 3 s: "fuzz: elapsed: 9s, execs: 163217 (0/sec), ...".
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
	stall=$(awk '/^fuzz: elapsed: .*execs: / { if ($0 ~ /\(0\/sec\)/) { run += 3; if (run > max) max = run } else run = 0 } END { print max + 0 }' "$log")
	rows+=("$(printf '%-24s %-26s %12s %9ss  %s' "$target" "$pkg" "${execs:-0}" "$stall" "$status")")
done

echo
printf '%-24s %-26s %12s %10s  %s\n' target package executions "0/s for" result
printf '%s\n' "${rows[@]}"
after=$(git status --porcelain --untracked-files=all -- '*/testdata/fuzz/*' | wc -l)
if [ "$after" -gt "$before" ]; then
	echo
	echo "new failing inputs (fix the code, then commit them with the fix):"
	git status --porcelain --untracked-files=all -- '*/testdata/fuzz/*'
fi
if [ ${#failed[@]} -gt 0 ]; then
	printf '\n%d failed: %s\n' "${#failed[@]}" "${failed[*]}"
	exit 1
fi
