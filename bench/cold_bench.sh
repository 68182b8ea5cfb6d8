#!/usr/bin/env bash
# Cold reads (issue 14, goal 4): gpufile against fio io_uring O_DIRECT on
# the same file, each read after dropping the page cache, in interleaved
# rounds; medians per reader.
#
#   bash bench/cold_bench.sh FILE
#
# Environment: BUILD_DIR (default build), ROUNDS (5), READERS (all: a
# space-separated subset of the reader names below, for a quick try),
# FIO_BS ("1M 4M 16M"), FIO_QD ("8 32 64"), FIO_JOBS ("1 4"),
# FIO_MAX_INFLIGHT (MiB, default 256: fio configs with more bytes in flight,
# bs * iodepth * numjobs, are skipped and listed as such), OUT_LOG (raw
# results, one line "round reader GB/s"; default a temporary file).
#
# Readers, each in its own process:
#   gpu    gpufile read FILE --device 0 --window SIZE (one request into GPU
#          memory, default settings), its "gbps"
#   host   the same with --host (one request into a touched host buffer)
#   gpu@NAME=VALUE,...  (or host@...) the same with gpufile settings set
#          through the environment, GPUFILE_NAME=VALUE each, e.g.
#          gpu@BOUNCE_BUFFERS=4,TASK_SIZE=16MiB
#   fio:BS:QD:NJ  fio --ioengine=io_uring --direct=1 --rw=read, NJ jobs each
#          reading its own slice (--offset_increment), --group_reporting,
#          read.bw_bytes of the JSON output
# Before each read: sync; echo 3 > /proc/sys/vm/drop_caches (needs root).
# The reader order rotates by about (readers / ROUNDS) each round, so no
# reader always runs first or after the same neighbour.
set -euo pipefail
file=${1:?usage: cold_bench.sh FILE}
B=${BUILD_DIR:-build}
rounds=${ROUNDS:-5}
max_inflight=$((${FIO_MAX_INFLIGHT:-256} << 20))
raw=${OUT_LOG:-$(mktemp)}
size=$(stat -c %s "$file")
[ -w /proc/sys/vm/drop_caches ] || {
	echo "cold_bench: /proc/sys/vm/drop_caches is not writable (run as root)" >&2
	exit 1
}
command -v fio >/dev/null || { echo "cold_bench: fio not found" >&2; exit 1; }

bytes() { # 1M 4M 16M -> bytes
	case $1 in
	*K) echo $((${1%K} << 10)) ;; *M) echo $((${1%M} << 20)) ;;
	*G) echo $((${1%G} << 30)) ;; *) echo "$1" ;;
	esac
}

readers=()
skipped=()
if [ -n "${READERS:-}" ]; then
	read -r -a readers <<<"$READERS"
else
	readers=(gpu host)
	for bs in ${FIO_BS:-1M 4M 16M}; do
		for qd in ${FIO_QD:-8 32 64}; do
			for nj in ${FIO_JOBS:-1 4}; do
				if [ $(($(bytes $bs) * qd * nj)) -gt $max_inflight ]; then
					skipped+=("fio:$bs:$qd:$nj")
				else
					readers+=("fio:$bs:$qd:$nj")
				fi
			done
		done
	done
fi
echo "cold_bench: $file ($size bytes), $rounds rounds, ${#readers[@]} readers"
[ ${#skipped[@]} -gt 0 ] &&
	echo "cold_bench: skipped (more than $((max_inflight >> 20)) MiB in flight): ${skipped[*]}"

# One cold read by reader $1; prints GB/s, or "fail".
read_once() {
	local r=$1 bs qd nj
	sync
	echo 3 >/proc/sys/vm/drop_caches
	case $r in
	gpu | host | gpu@* | host@*)
		local where=(--device 0) settings=() kv
		[ "${r%%@*}" = host ] && where=(--host)
		if [ "$r" != "${r#*@}" ]; then
			IFS=, read -r -a settings <<<"${r#*@}"
			for kv in "${!settings[@]}"; do
				settings[kv]=GPUFILE_${settings[kv]}
			done
		fi
		local js
		if js=$(env "${settings[@]}" "$B/gpufile" read "$file" "${where[@]}" \
			--window "$size" --json --no-progress 2>"$raw.err"); then
			python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["gbps"])' <<<"$js"
		else
			echo "cold_bench: $r: $(head -c 300 "$raw.err")" >&2
			echo fail
		fi
		;;
	fio:*)
		IFS=: read -r _ bs qd nj <<<"$r"
		# Each job reads size/nj bytes starting at job_index * size/nj
		# (rounded down to the block size, so O_DIRECT stays aligned).
		local per=$((size / nj / $(bytes $bs) * $(bytes $bs)))
		fio --name=cold --filename="$file" --ioengine=io_uring --direct=1 \
			--rw=read --bs="$bs" --iodepth="$qd" --numjobs="$nj" \
			--size="$per" --offset_increment="$per" --group_reporting \
			--invalidate=1 --output-format=json 2>"$raw.err" |
			python3 -c 'import json,sys; print("%.4f" % (json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"]/1e9))' 2>/dev/null ||
			{ echo "cold_bench: $r: $(head -c 300 "$raw.err")" >&2; echo fail; }
		;;
	*) echo "cold_bench: unknown reader '$r'" >&2; exit 2 ;;
	esac
}

: >"$raw"
n=${#readers[@]}
step=$(((n + rounds - 1) / rounds))
for ((round = 0; round < rounds; round++)); do
	for ((k = 0; k < n; k++)); do
		r=${readers[$(((k + round * step) % n))]}
		g=$(read_once "$r")
		echo "$round $r $g" | tee -a "$raw"
	done
done

rm -f "$raw.err"
python3 - "$raw" "$rounds" <<'EOF'
import statistics, sys
raw, rounds = sys.argv[1], int(sys.argv[2])
runs, fails = {}, {}
for line in open(raw):
    _, reader, g = line.split()
    if g == "fail":
        fails[reader] = fails.get(reader, 0) + 1
    else:
        runs.setdefault(reader, []).append(float(g))
print("\ncold_bench: medians over %d rounds (GB/s; runs in order of rounds)" % rounds)
med = {r: statistics.median(v) for r, v in runs.items()}
for r in sorted(runs, key=lambda r: -med[r]):
    print("  %-16s %6.2f  %s%s" % (r, med[r], " ".join("%.2f" % x for x in runs[r]),
          "  (%d failed)" % fails[r] if r in fails else ""))
for r in fails:
    if r not in runs:
        print("  %-16s failed every round" % r)
fio = {r: m for r, m in med.items() if r.startswith("fio:")}
if not fio:
    sys.exit("cold_bench: no fio result")
best = max(fio, key=fio.get)
print("cold_bench: best fio config %s (bs:iodepth:numjobs) median %.2f GB/s" % (best, fio[best]))
for r in sorted(med, key=lambda r: -med[r]):
    if not r.startswith("fio:"):
        print("cold_bench: gpufile %s median %.2f GB/s = %.3fx best fio (target >= 1.0)"
              % (r, med[r], med[r] / fio[best]))
EOF
