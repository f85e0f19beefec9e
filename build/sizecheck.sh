#!/bin/sh
# Fails when a stripped binary exceeds vig's size budget: phones get it over adb
# and keep it in /data/local/tmp. make release and build/test.sh (make test) run it
# on the linux/arm64 binary.
#
#   build/sizecheck.sh BINARY
set -eu
# 17 MB (decimal). The aim is 12 MB: see CONTRIBUTING.md's
# "Release builds".
BUDGET=${SIZE_BUDGET:-17000000}
bin=${1:?usage: $0 BINARY}
size=$(stat -c %s "$bin")
mb=$(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1e6 }')
if [ "$size" -gt "$BUDGET" ]; then
	echo "$bin: $size bytes ($mb MB) exceeds the budget of $BUDGET bytes: go run ./build/sizereport on an unstripped build says which packages grew"
	exit 1
fi
echo "$bin: $size bytes ($mb MB), within the budget of $BUDGET bytes"
