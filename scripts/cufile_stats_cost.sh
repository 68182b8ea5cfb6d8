#!/usr/bin/env bash
# The cost of cuFile's stats level 3 (gpufile's default since issue 11
# item 2) against level 0, on the GPU machine: ROUNDS rounds, each running
# bench/cufile_bench once per level in alternating order (interleaved, so
# that drift of the machine falls on both), ITERS timed reads per run.
# Every read goes through cuFile (compat_mode=off; CUFILE_EXPERIMENTAL_FS=1
# lets cuFile take a file system without GDS support through its own
# posix path). Prints each run, then per level the median of the runs'
# median GB/s and the cost of level 3 in percent, and cuFile's per-GPU
# counts of the last level-3 run (posix/nvfs reads).
#
#   scripts/cufile_stats_cost.sh BUILD_DIR FILE [ROUNDS] [ITERS] [extra cufile_bench args]
#   e.g. scripts/cufile_stats_cost.sh build-gpu /root/gpufile-bench/file1g.bin 10 5
#        scripts/cufile_stats_cost.sh build-gpu /root/gpufile-bench/file1g.bin 10 5 --cold
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR FILE [ROUNDS] [ITERS] [cufile_bench args]}
file=${2:?usage: $0 BUILD_DIR FILE [ROUNDS] [ITERS] [cufile_bench args]}
rounds=${3:-10}
iters=${4:-5}
shift $(($# < 4 ? $# : 4))
bench=$build/bench/cufile_bench
[ -x "$bench" ] || { echo "no $bench (build with -DGPUFILE_BENCH=ON)" >&2; exit 1; }
log=$(mktemp)
for r in $(seq 1 "$rounds"); do
	if [ $((r % 2)) -eq 1 ]; then order="0 3"; else order="3 0"; fi
	for level in $order; do
		line=$(env -u CUFILE_STATS_LEVEL GPUFILE_COMPAT_MODE=off \
			CUFILE_EXPERIMENTAL_FS=1 GPUFILE_CUFILE_STATS=$level \
			"$bench" "$file" --iters "$iters" "$@") || {
			echo "cufile_bench failed (level $level)" >&2
			exit 1
		}
		echo "round $r level $level: $line"
		echo "$level $line" >>"$log"
	done
done
python3 - "$log" <<'PY'
import json, statistics, sys
runs = {"0": [], "3": []}
last3 = None
for line in open(sys.argv[1]):
    level, text = line.split(" ", 1)
    d = json.loads(text)
    runs[level].append(d["gbps_median"])
    if level == "3":
        last3 = d
m0, m3 = statistics.median(runs["0"]), statistics.median(runs["3"])
print(f"level 0: median {m0:.3f} GB/s over {len(runs['0'])} runs {runs['0']}")
print(f"level 3: median {m3:.3f} GB/s over {len(runs['3'])} runs {runs['3']}")
print(f"cost of level 3: {100 * (m0 - m3) / m0:+.2f}% of level 0's throughput")
if last3 is not None:
    print("cuFile layer of the last level-3 run:",
          json.dumps(last3.get("cufile", last3.get("cufile_layer"))))
PY
rm -f "$log"
