#!/usr/bin/env bash
# `gpufile stats PID` taken from this shell while another process reads a
# remote object:  bench/remote_stats_during_read.sh URL [REPEAT]
# Starts `gpufile read URL --host --repeat REPEAT` (default 20) in the
# background, waits until its counters can be read, prints
# `gpufile stats PID` once while it runs, then waits for the reader.
set -euo pipefail
cd "$(dirname "$0")/.."
g=$PWD/${BUILD_DIR:-build}/gpufile
url=$1
"$g" read "$url" --host --repeat "${2:-20}" >/dev/null &
pid=$!
# Its counters can be read once its first I/O made them (bounded wait;
# the segment is a memfd found through /proc/PID/fd).
for _ in $(seq 400); do
	"$g" stats "$pid" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.025
done
# ...and until some ranges have landed (bounded): a capture right after
# the open would show only its HEAD request.
for _ in $(seq 400); do
	"$g" stats "$pid" --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin).get("remote_http") or {}
sys.exit(0 if r.get("ranges", 0) > 0 else 1)' && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.025
done
echo "=== gpufile stats $pid (during its remote read)"
"$g" stats "$pid" || true
wait "$pid"
