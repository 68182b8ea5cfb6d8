#!/usr/bin/env bash
# Write benchmark (issue 33 item 2): gpufile_pwrite of BENCH_SIZE bytes
# from host memory into a new file (bench/write_bench), buffered (the
# defaults) and with direct_io=on, against fio writing the same size into
# a new file in the same run. fio is first swept over psync and io_uring,
# a few block sizes, job counts and queue depths, buffered and
# --direct=1; the best configuration of each kind is then run in ROUNDS
# rounds interleaved with gpufile, so that load from others falls on both;
# the ratios are of the medians. With a GPU (write_bench --device 0 runs) the
# rounds also write the same bytes from device memory (GPU -> file
# against host -> file).
#
# Every run writes a new file (removed before), and its data are synced
# afterwards, untimed, so that write-back of one run does not fall on the
# next; neither gpufile's figures nor fio's include that sync.
#
# Environment:
#   BENCH_SIZE  bytes per run (default 4GiB; k/m/g suffixes)
#   BENCH_DIR   folder of the files (default $BUILD_DIR/write-bench)
#   BUILD_DIR   build folder with bench/write_bench (default build)
#   ROUNDS      interleaved rounds (default 5)
#   SWEEP       "quick" (default): psync/io_uring x bs 1M,4M x numjobs
#               1,4 (io_uring iodepth 4); "none": psync bs=4M numjobs=1
#               only
#   FIO_BUFFERED, FIO_DIRECT  "ENGINE BS NUMJOBS IODEPTH" each: skip the
#               sweep and use these (e.g. the best of an earlier sweep)
#   GPUFILE_*   passed through to gpufile
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BENCH_SIZE=${BENCH_SIZE:-4GiB}
BENCH_DIR=${BENCH_DIR:-$BUILD_DIR/write-bench}
ROUNDS=${ROUNDS:-5}
SWEEP=${SWEEP:-quick}

wb=$BUILD_DIR/bench/write_bench
if [ ! -x "$wb" ]; then
	echo "bench: building $BUILD_DIR"
	cmake -S . -B "$BUILD_DIR" >/dev/null
	cmake --build "$BUILD_DIR" -j "$(nproc)" --target bench_write_bench >/dev/null
fi
command -v fio >/dev/null || { echo "bench: fio missing (scripts/deps.sh)" >&2; exit 1; }
mkdir -p "$BENCH_DIR"
file=$BENCH_DIR/write.bin

. bench/benchlib.sh
size=$(python3 -c 'import re, sys
m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", sys.argv[1].lower())
shift = {"": 0, "b": 0, "k": 10, "kib": 10, "m": 20, "mib": 20, "g": 30,
         "gib": 30}[m.group(2)]
print(int(m.group(1)) << shift)' "$BENCH_SIZE")

echo "== machine"
echo "cpu:    $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) online)"
echo "memory: $(free -g | awk '/Mem:/ {print $2 " GiB"}')"
echo "kernel: $(uname -r)"
echo "fio:    $(fio --version)"
echo "disk:   $BENCH_DIR on $(df -T "$BENCH_DIR" | awk 'NR==2 {print $2 ", " $5 " free"}')"
echo "load:   $(cut -d' ' -f1-3 /proc/loadavg)"
echo "THP:    $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown) (huge-page source: MADV_HUGEPAGE asked)"
echo "size:   $size bytes per run, $ROUNDS rounds"

# gpufile: SOURCE(host|huge|device) DIRECT(0|1) -> GB/s; huge: a host
# source given huge pages before it is touched, as NumPy's arrays are
gpufile_run() {
	local args=("$file" "$size" 1 --json)
	[ "$2" = 1 ] && args+=(--direct)
	[ "$1" = device ] && args+=(--device 0)
	[ "$1" = huge ] && args+=(--huge)
	"$wb" "${args[@]}" | json_get gbps_median
}

# fio: "ENGINE BS NUMJOBS IODEPTH" DIRECT -> GB/s (benchlib.sh)
fio_run() { fio_write "$file" "$size" "$1" "$2"; }

configs=()
if [ -n "${FIO_BUFFERED:-}" ] && [ -n "${FIO_DIRECT:-}" ]; then
	configs=() # the sweep is skipped: the configurations are given
elif [ "$SWEEP" = none ]; then
	configs=("psync 4M 1 1")
else
	for engine in psync io_uring; do
		for bs in 1M 4M; do
			for jobs in 1 4; do
				depth=1
				[ "$engine" = io_uring ] && depth=4
				configs+=("$engine $bs $jobs $depth")
			done
		done
	done
fi

declare -A best_cfg best_bw
[ "${#configs[@]}" -gt 0 ] && echo "== fio sweep (one run each): engine bs numjobs iodepth -> GB/s"
best_cfg[0]=${FIO_BUFFERED:-} best_cfg[1]=${FIO_DIRECT:-}
for direct in 0 1; do
	[ "${#configs[@]}" -gt 0 ] || break
	best_bw[$direct]=0
	for c in "${configs[@]}"; do
		bw=$(fio_run "$c" "$direct")
		printf '  direct=%s  %-22s %s\n' "$direct" "$c" "$bw"
		if python3 -c "import sys; sys.exit(not $bw > ${best_bw[$direct]})"; then
			best_bw[$direct]=$bw
			best_cfg[$direct]=$c
		fi
	done
done
echo "best fio, buffered:  ${best_cfg[0]} (--direct=0)"
echo "best fio, O_DIRECT:  ${best_cfg[1]} (--direct=1)"

gpu=0
rc=0
"$wb" "$file" 1m 1 --device 0 >/dev/null || rc=$?
if [ "$rc" = 0 ]; then
	gpu=1
else
	echo "(no usable GPU: GPU -> file runs skipped; scripts/gpu_run.sh write runs them)"
fi

gb=() fb=() gd=() fd=() db=() dd=() hb=()
echo "== $ROUNDS rounds, interleaved: GB/s"
for ((i = 1; i <= ROUNDS; i++)); do
	gb+=("$(gpufile_run host 0)")
	fb+=("$(fio_run "${best_cfg[0]}" 0)")
	hb+=("$(gpufile_run huge 0)")
	gd+=("$(gpufile_run host 1)")
	fd+=("$(fio_run "${best_cfg[1]}" 1)")
	line="round $i: buffered gpufile ${gb[-1]} fio ${fb[-1]} huge-page source ${hb[-1]} | O_DIRECT gpufile ${gd[-1]} fio ${fd[-1]}"
	if [ "$gpu" = 1 ]; then
		db+=("$(gpufile_run device 0)")
		dd+=("$(gpufile_run device 1)")
		line="$line | from GPU buffered ${db[-1]} O_DIRECT ${dd[-1]}"
	fi
	echo "$line"
done

echo
echo "== summary: medians of $ROUNDS rounds, GB/s (1e9 bytes/s), $size bytes"
printf '%-34s %9s %9s %8s\n' "run" "gpufile" "reference" "ratio"
m_gb=$(median "${gb[@]}") m_fb=$(median "${fb[@]}")
m_gd=$(median "${gd[@]}") m_fd=$(median "${fd[@]}")
printf '%-34s %9s %9s %8s\n' "host->file buffered vs best fio" "$m_gb" "$m_fb" "$(ratio "$m_gb" "$m_fb")"
m_hb=$(median "${hb[@]}")
printf '%-34s %9s %9s %8s\n' "same, huge-page source, vs fio" "$m_hb" "$m_fb" "$(ratio "$m_hb" "$m_fb")"
printf '%-34s %9s %9s %8s\n' "host->file O_DIRECT vs best fio" "$m_gd" "$m_fd" "$(ratio "$m_gd" "$m_fd")"
if [ "$gpu" = 1 ]; then
	m_db=$(median "${db[@]}") m_dd=$(median "${dd[@]}")
	printf '%-34s %9s %9s %8s\n' "GPU->file buffered vs host->file" "$m_db" "$m_gb" "$(ratio "$m_db" "$m_gb")"
	printf '%-34s %9s %9s %8s\n' "GPU->file O_DIRECT vs host->file" "$m_dd" "$m_gd" "$(ratio "$m_dd" "$m_gd")"
fi
echo "per-round ratios (gpufile/fio): buffered $(for i in "${!gb[@]}"; do ratio "${gb[$i]}" "${fb[$i]}"; done | tr '\n' ' ')"
echo "                                huge-page source $(for i in "${!hb[@]}"; do ratio "${hb[$i]}" "${fb[$i]}"; done | tr '\n' ' ')"
echo "                                O_DIRECT $(for i in "${!gd[@]}"; do ratio "${gd[$i]}" "${fd[$i]}"; done | tr '\n' ' ')"
rm -f "$file"
