#!/usr/bin/env bash
# `gpufile stats PID` taken from this shell while another process reads a
# remote object:  bench/remote_stats_during_read.sh URL [REPEAT]
# Starts `gpufile read URL --host --repeat REPEAT` (default 20) in the
# background, waits for its statistics segment to appear, prints
# `gpufile stats PID` once while it runs, then waits for the reader.
set -euo pipefail
cd "$(dirname "$0")/.."
g=$PWD/${BUILD_DIR:-build}/gpufile
url=$1
"$g" read "$url" --host --repeat "${2:-20}" >/dev/null &
pid=$!
seg=/dev/shm/gpufile-$(id -u)-$pid
# The segment appears at the reader's first I/O (bounded wait).
for _ in $(seq 400); do
	[ -e "$seg" ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.025
done
sleep 0.5 # let some ranges land
echo "=== gpufile stats $pid (during its remote read)"
"$g" stats "$pid" || true
wait "$pid"
