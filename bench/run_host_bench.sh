#!/usr/bin/env bash
# Host-memory read benchmark: gpufile (bench/host_read) against fio reading
# the same file the same way (psync, one slice per job, 4 MiB blocks, as
# many jobs as gpufile has worker threads), first from the page cache and,
# when caches can be dropped (root), cold as well.
#
# Environment:
#   BENCH_SIZE   file size (default 1GiB; gpufile size syntax)
#   BENCH_FILE   the file (default $BUILD_DIR/bench_host.bin; reused when it
#                already has the right size)
#   BUILD_DIR    build folder with gpufile and bench/host_read (default
#                build; built here, Release, when missing)
#   REPEAT       gpufile reads per round (default 5)
#   ROUNDS       rounds of gpufile, fio (bs = task_size) and fio (bs = each
#                job's slice), interleaved so that noise from other load
#                falls on all three (default 5); each fio run lasts ~1 s
#   GPUFILE_*    passed through to gpufile (e.g. GPUFILE_NTHREADS=8)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BENCH_SIZE=${BENCH_SIZE:-1GiB}
BENCH_FILE=${BENCH_FILE:-$BUILD_DIR/bench_host.bin}
REPEAT=${REPEAT:-5}
ROUNDS=${ROUNDS:-5}

gpufile=$BUILD_DIR/gpufile
host_read=$BUILD_DIR/bench/host_read
if [ ! -x "$gpufile" ] || [ ! -x "$host_read" ]; then
	echo "bench: building $BUILD_DIR (Release)"
	cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build "$BUILD_DIR" -j "$(nproc)" >/dev/null
fi
command -v fio >/dev/null || { echo "bench: fio missing (scripts/deps.sh)" >&2; exit 1; }

. bench/benchlib.sh
best() { python3 -c 'import sys
print(f"{max(float(x) for x in sys.argv[1:]):.3f}")' "$@"; }

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

echo "== machine"
echo "cpu:    $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) online)"
echo "memory: $(free -g | awk '/Mem:/ {print $2 " GiB"}')"
echo "kernel: $(uname -r)"
echo "fio:    $(fio --version)"
echo "gpufile: $("$gpufile" --version)"

want=$(python3 -c 'import re, sys
m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", sys.argv[1].lower())
shift = {"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20,
         "mib": 20, "g": 30, "gb": 30, "gib": 30}[m.group(2)]
print(int(m.group(1)) << shift)' "$BENCH_SIZE")
if [ -f "$BENCH_FILE" ] && [ "$(stat -c %s "$BENCH_FILE")" = "$want" ]; then
	echo "== reusing $BENCH_FILE ($want bytes)"
else
	echo "== creating $BENCH_FILE ($BENCH_SIZE)"
	"$gpufile" write "$BENCH_FILE" --size "$BENCH_SIZE" --pattern random |
		grep -E '^(wrote|time):'
fi
size=$(stat -c %s "$BENCH_FILE")
echo "file:   $BENCH_FILE, $size bytes, on $(df -T "$BENCH_FILE" | awk 'NR==2 {print $2}')"

echo "== warm: page cache, $ROUNDS rounds of gpufile then fio, interleaved"
cat "$BENCH_FILE" >/dev/null
g=$("$host_read" "$BENCH_FILE" 3 --json)
nthreads=$(json_get nthreads <<<"$g")
task_size=$(json_get task_size <<<"$g")

# Each fio job reads its own slice, so that together they read the file
# once per loop, as gpufile's tasks do; loops make a run last >= ~1 s.
# fio reuses one bs-sized buffer per job, which stays in the CPU caches
# when bs = 4 MiB, while gpufile fills a file-sized buffer; the run with
# bs = the slice size gives fio the same destination footprint.
slice=$(( size / nthreads / 4096 * 4096 ))
loops=$(python3 -c "import math; print(max(1, math.ceil(1.0 * $(json_get gbps_median <<<"$g") * 1e9 / $size)))")
fio_run() { # DIRECT LOOPS [INVALIDATE [BS]]
	fio --name=read --filename="$BENCH_FILE" --ioengine=psync --rw=read \
		--bs="${4:-$task_size}" --numjobs="$nthreads" --size="$slice" \
		--offset_increment="$slice" --group_reporting --direct="$1" \
		--loops="$2" --invalidate="${3:-0}" --output-format=json |
		json_get 'jobs.0.read.bw_bytes' |
		python3 -c 'import sys; print(f"{float(sys.stdin.read()) / 1e9:.3f}")'
}
echo "gpufile: host_read FILE $REPEAT (nthreads=$nthreads task_size=$task_size), and with --chunk $(( nthreads * task_size ))"
echo "fio:     psync read numjobs=$nthreads size=offset_increment=$slice loops=$loops, bs=$task_size and bs=$slice"
# gpufile with requests of nthreads * task_size into one reused buffer:
# fio's footprint, so the pair measures gpufile's own cost.
chunk=$(( nthreads * task_size ))
g_all=() g_best_all=() gc_all=() f_all=() fb_all=()
for ((i = 1; i <= ROUNDS; i++)); do
	g=$("$host_read" "$BENCH_FILE" "$REPEAT" --json)
	g_all+=("$(json_get gbps_median <<<"$g")")
	g_best_all+=("$(json_get gbps_best <<<"$g")")
	g=$("$host_read" "$BENCH_FILE" "$REPEAT" --chunk "$chunk" --json)
	gc_all+=("$(json_get gbps_median <<<"$g")")
	f_all+=("$(fio_run 0 "$loops")")
	fb_all+=("$(fio_run 0 "$loops" 0 "$slice")")
	printf 'round %d: gpufile median %s (best %s), %s-byte requests %s | fio bs=%s %s, bs=%s %s\n' \
		"$i" "${g_all[-1]}" "${g_best_all[-1]}" "$chunk" "${gc_all[-1]}" \
		"$task_size" "${f_all[-1]}" "$slice" "${fb_all[-1]}"
done
g_med=$(median "${g_all[@]}")
g_best=$(best "${g_best_all[@]}")
f_med=$(median "${f_all[@]}")
f_best=$(best "${f_all[@]}")
fb_med=$(median "${fb_all[@]}")
gc_med=$(median "${gc_all[@]}")
fb_best=$(best "${fb_all[@]}")

cold=0
if [ "$(id -u)" -eq 0 ] && [ -w /proc/sys/vm/drop_caches ] &&
	(drop_caches) 2>/dev/null; then
	cold=1
	echo "== cold: caches dropped before each run"
	drop_caches
	gc=$("$host_read" "$BENCH_FILE" 1 --json)
	gc_gbps=$(json_get gbps_best <<<"$gc")
	echo "gpufile: $gc"
	drop_caches
	fc=$(fio_run 0 1 1)
	echo "fio --direct=0: $fc GB/s"
	drop_caches
	fcd=$(fio_run 1 1 1)
	echo "fio --direct=1: $fcd GB/s"
else
	echo "== cold: skipped (needs root and a writable /proc/sys/vm/drop_caches)"
fi

echo
echo "== summary: GB/s (1e9 bytes/s), $size-byte file, nthreads=$nthreads, task_size=$task_size"
printf '%-28s %10s %10s %8s\n' "run" "gpufile" "fio" "ratio"
printf '%-28s %10s %10s %8s\n' "warm, median" "$g_med" "$f_med" "$(ratio "$g_med" "$f_med")"
printf '%-28s %10s %10s %8s\n' "warm, best" "$g_best" "$f_best" "$(ratio "$g_best" "$f_best")"
printf '%-28s %10s %10s %8s\n' "warm, median, fio bs=slice" "$g_med" "$fb_med" "$(ratio "$g_med" "$fb_med")"
printf '%-28s %10s %10s %8s\n' "warm, best, fio bs=slice" "$g_best" "$fb_best" "$(ratio "$g_best" "$fb_best")"
printf '%-28s %10s %10s %8s\n' "warm, median, reused buffer" "$gc_med" "$f_med" "$(ratio "$gc_med" "$f_med")"
if [ "$cold" = 1 ]; then
	printf '%-28s %10s %10s %8s\n' "cold, fio --direct=0" "$gc_gbps" "$fc" "$(ratio "$gc_gbps" "$fc")"
	printf '%-28s %10s %10s %8s\n' "cold, fio --direct=1 (ref)" "$gc_gbps" "$fcd" "$(ratio "$gc_gbps" "$fcd")"
fi
