# What the shell benchmarks share (run_host_bench.sh, write_bench.sh,
# scripts/gpu_run.sh), sourced from the repository's root:
# . bench/benchlib.sh

json_get() { # KEY: from the JSON on stdin; dotted paths and [index] allowed
	python3 -c 'import json, re, sys
v = json.load(sys.stdin)
for part in re.findall(r"[^.\[\]]+", sys.argv[1]):
    v = v[int(part)] if isinstance(v, list) else v[part]
print(v)' "$1"
}
median() { python3 -c 'import statistics, sys
print(f"{statistics.median(float(x) for x in sys.argv[1:]):.3f}")' "$@"; }
ratio() { python3 -c 'import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
print(f"{a / b:.2f}x" if b > 0 else "n/a")' "$1" "$2"; }

# fio_write FILE BYTES "ENGINE BS NUMJOBS IODEPTH" DIRECT(0|1) -> GB/s
# (1e9 bytes/s): fio writes BYTES into FILE, new (removed before), each
# job its own slice of it, as gpufile's tasks do; the file is synced
# afterwards, untimed, and removed. A run that reports no bytes (seen
# once: 0 B/s) is said on stderr with fio's error.
fio_write() {
	local file=$1 bytes=$2 direct=$4 engine bs jobs depth
	read -r engine bs jobs depth <<<"$3"
	local slice=$((bytes / jobs))
	rm -f "$file"
	fio --name=write --filename="$file" --rw=write --ioengine="$engine" \
		--bs="$bs" --numjobs="$jobs" --iodepth="$depth" \
		--size="$slice" --offset_increment="$slice" --direct="$direct" \
		--group_reporting --output-format=json |
		python3 -c 'import json, sys
j = json.load(sys.stdin)["jobs"][0]
w = j["write"]
if not w["io_bytes"] or not w["runtime"]:
    print("fio: no bytes written (error %s, runtime %s ms)"
          % (j["error"], w["runtime"]), file=sys.stderr)
print("%.3f" % (w["bw_bytes"] / 1e9))'
	sync "$file"
	rm -f "$file"
}
