#!/bin/bash
# gpufile bench next to fio (psync and io_uring) on the same file, in the
# same run, for the workloads people compare: 4 KiB random reads (one at
# a time, and 32 in flight: gpufile's batch API against io_uring
# iodepth=32) and 1 MiB sequential reads, each through the page cache
# (warm) and with O_DIRECT, into host memory. Prints one table with
# IOPS, MiB/s and the latency mean and percentiles of each, and the
# ratio of gpufile's IOPS to fio psync's and io_uring's; with -d, of
# gpufile into that GPU's memory as well (to fio's and to gpufile's own
# host row).
#
#   bench/bench_vs_fio.sh [-g GPUFILE] [-f FILE] [-s SIZE] [-t SECONDS]
#                         [-d DEVICE]
#
#   -g  the gpufile tool (default: build/gpufile)
#   -f  the file (default: a fresh one under ${TMPDIR:-/tmp}, removed after)
#   -s  its size when it is laid out (default 1g)
#   -t  seconds per run (default 5)
#   -d  also run gpufile bench into GPU N's memory (a GPU machine); fio
#       has no GPU destination, so those rows compare against the host
#       rows of fio
#
# Latency is per I/O, from the call to its return, for both: gpufile's
# from a log-linear histogram (within 1/128), fio's total latency (lat_ns,
# --lat_percentiles=1: submission and completion). Each tool's JSON is
# kept under $OUT (default: a temporary folder, printed).
set -euo pipefail

GPUFILE=build/gpufile
FILE=
SIZE=1g
SECONDS_PER_RUN=5
DEVICE=
while getopts "g:f:s:t:d:h" opt; do
	case "$opt" in
	g) GPUFILE=$OPTARG ;;
	f) FILE=$OPTARG ;;
	s) SIZE=$OPTARG ;;
	t) SECONDS_PER_RUN=$OPTARG ;;
	d) DEVICE=$OPTARG ;;
	*) sed -n '2,25p' "$0"; exit 2 ;;
	esac
done
command -v fio >/dev/null || { echo "no fio (apt-get install -y fio)" >&2; exit 1; }
[ -x "$GPUFILE" ] || { echo "no gpufile tool at $GPUFILE (-g)" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
CLEAN=
if [ -z "$FILE" ]; then
	FILE=$(mktemp "${TMPDIR:-/tmp}/bench_vs_fio.XXXXXX")
	rm -f "$FILE"
	CLEAN=$FILE
fi
trap '[ -z "$CLEAN" ] || rm -f "$CLEAN"' EXIT

# Lay the file out (gpufile's pattern; fio reads whatever is there).
"$GPUFILE" bench "$FILE" --host --file-size "$SIZE" --bs 1m --size 1m \
	>/dev/null
BYTES=$(stat -c %s "$FILE")
T=$SECONDS_PER_RUN

# Before each run: the file wholly in the page cache (cache), or none of
# it there (direct: gpufile's batch API reads through the page cache
# whatever direct_io says, so a warm file would flatter its qd32 row).
prep() {
	if [ "$1" = cache ]; then
		cat "$FILE" >/dev/null
	else
		"$GPUFILE" cache "$FILE" --drop >/dev/null
	fi
}

# run NAME MODE(cache|direct) RW BS DEPTH
run() {
	local name=$1 mode=$2 rw=$3 bs=$4 depth=$5 d gflag
	d=$([ "$mode" = direct ] && echo 1 || echo 0)
	gflag=$([ "$mode" = direct ] && echo --direct || echo --no-direct)
	prep "$mode"
	"$GPUFILE" bench "$FILE" --host --rw "$rw" --bs "$bs" --batch "$depth" \
		--time "$T" "$gflag" --json >"$OUT/$name.gpufile.json"
	if [ -n "$DEVICE" ]; then
		prep "$mode"
		"$GPUFILE" bench "$FILE" --device "$DEVICE" --rw "$rw" --bs "$bs" \
			--batch "$depth" --time "$T" "$gflag" --json \
			>"$OUT/$name.gpufile-gpu$DEVICE.json"
	fi
	for engine in psync io_uring; do
		[ "$engine" = psync ] && [ "$depth" -gt 1 ] && continue
		prep "$mode"
		fio --name="$name" --filename="$FILE" --size="$BYTES" \
			--rw="$rw" --bs="$bs" --ioengine="$engine" \
			--iodepth="$depth" --direct="$d" --numjobs=1 \
			--time_based --runtime="$T" --norandommap \
			--randrepeat=0 --invalidate=0 --lat_percentiles=1 \
			--output-format=json >"$OUT/$name.fio-$engine.json"
	done
}

for mode in cache direct; do
	run "randread-4k-qd1-$mode" "$mode" randread 4k 1
	run "randread-4k-qd32-$mode" "$mode" randread 4k 32
	run "read-1m-qd1-$mode" "$mode" read 1m 1
done

python3 - "$OUT" <<'EOF'
import glob, json, os, sys

out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    name, tool = os.path.basename(path)[:-5].split(".", 1)
    d = json.load(open(path))
    if tool.startswith("gpufile"):
        l = d["latency_us"]
        r = (d["iops"], d["mib_per_s"], l["mean"], l["p50"], l["p90"],
             l["p99"], l["p99.9"], l["per"])
    else:
        j = d["jobs"][0]["read"]
        p = j["lat_ns"].get("percentile", {})
        q = lambda k: p.get(k, 0) / 1e3
        r = (j["iops"], j["bw"] / 1024.0, j["lat_ns"]["mean"] / 1e3,
             q("50.000000"), q("90.000000"), q("99.000000"),
             q("99.900000"), "io")
    rows.setdefault(name, {})[tool] = r
gpus = sorted({t for ts in rows.values() for t in ts if t.startswith("gpufile-gpu")})
# The last columns: gpufile into host memory, then into each GPU, over
# the row's IOPS (a fio row, or gpufile's host row for a GPU).
heads = ["host / this"] + ["GPU %s / this" % g[len("gpufile-gpu"):] for g in gpus]
print("| workload | tool | IOPS | MiB/s | mean us | p50 | p90 | p99 | p99.9 | "
      + " | ".join(heads) + " |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(heads))
for name, tools in rows.items():
    for tool, r in tools.items():
        ratios = []
        for i, mine in enumerate(["gpufile"] + gpus):
            m = tools.get(mine)
            fits = tool.startswith("fio") or (i > 0 and tool == "gpufile")
            ratios.append("%.2fx" % (m[0] / r[0]) if m and r[0] and fits else "")
        lat = "" if r[7] == "io" else " (per batch)"
        print("| %s | %s | %.0f | %.1f | %.1f%s | %.1f | %.1f | %.1f | %.1f | %s |"
              % (name, tool, r[0], r[1], r[2], lat, r[3], r[4], r[5], r[6],
                 " | ".join(ratios)))
EOF
echo "JSON of every run: $OUT"
