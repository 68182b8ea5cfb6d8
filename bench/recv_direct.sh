#!/usr/bin/env bash
# The receive copy of a remote read (issue 36): bench/recv_direct on an
# object served by nginx on loopback from the page cache.
#   bench/recv_direct.sh [SIZE] [THREADS] [CHUNK_MiB] [ROUNDS]
# (default 1GiB, 16 threads, 8 MiB ranges, 5 rounds). Environment:
# BUILD_DIR (default build), WORKDIR, NGINX_WORKERS (bench/remote_nginx.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
size=${1:-1GiB}
b=$root/${BUILD_DIR:-build}
[ -x "$b/bench/recv_direct" ] || {
	echo "recv_direct: build $b/bench/recv_direct first" >&2
	exit 1
}
. bench/remote_nginx.sh recv-direct
"$b/gpufile" write "$dir/object.bin" --host --size "$size" --pattern sequence >/dev/null
bytes=$(stat -c %s "$dir/object.bin")
cat "$dir/object.bin" >/dev/null # into the page cache
nginx_serve
echo "nginx: ${NGINX_WORKERS:-8} workers, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$b/bench/recv_direct" "http://127.0.0.1:$port/object.bin" "$bytes" "${2:-16}" "${3:-8}" "${4:-5}"
