#!/usr/bin/env bash
# The batch benchmark of issue 13 item 3, for the GPU machine: a warm
# 4 GiB file, 16,384 random 64 KiB and 65,536 random 4 KiB reads into one
# device buffer, as one gpufile batch, against (a) gpufile_pread from 16
# threads and (b) fio randread into host memory with 16 jobs. Prints one
# table (GB/s, IOPS, ratios); exits 1 when the batch's bytes are wrong.
#
#   bash bench/batch_bench.sh [BUILD_DIR] [DATA_DIR]
#
# Builds BUILD_DIR (default build-gpu) if batch_bench is missing; fio is
# taken from .carry/fio/fio when present (as scripts/gpu_run.sh does).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$root/build-gpu}
data=${2:-/root/gpufile-bench}
fio=$(command -v fio || true)
[ -x "$root/.carry/fio/fio" ] && fio=$root/.carry/fio/fio
if [ ! -x "$B/bench/batch_bench" ]; then
	extra=()
	[ -d "$root/.carry/liburing" ] && extra+=(-DGPUFILE_LIBURING_DIR="$root/.carry/liburing")
	cmake -S "$root" -B "$B" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" >/dev/null
	cmake --build "$B" -j"$(nproc)" --target bench_batch_bench >/dev/null
fi
mkdir -p "$data"
f=$data/file4g.bin
if [ ! -f "$f" ] || [ "$(stat -c %s "$f")" -ne $((4 << 30)) ]; then
	dd if=/dev/urandom of="$f" bs=64M count=64 status=none
	sync
fi
args=("$f" --reps 5)
[ -n "$fio" ] && args+=(--fio "$fio" --fio-runtime 5)
"$B/bench/batch_bench" "${args[@]}"
