#!/usr/bin/env bash
# The transfer engine's must-show figures (issue 36); run through
#   bench/remote_bench.sh must-show [SIZE...]      (default: 1GiB 4GiB)
# (see there). Environment: BUILD_DIR (default build), WORKDIR, ROUNDS
# (default 5), NGINX_WORKERS (default 8), COUNT (default 10000), RANGE
# (default 65536).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
b=$root/${BUILD_DIR:-build}
rounds=${ROUNDS:-5}
count=${COUNT:-10000}
range=${RANGE:-65536}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1GiB 4GiB)
. bench/remote_nginx.sh remote-must-show

[ -x "$b/bench/remote_bench" ] || {
	echo "remote_must_show: $b/bench/remote_bench not built" >&2
	exit 1
}
nginx_serve
base=http://127.0.0.1:$port
now() { date +%s.%N; }
median() { python3 -c 'import statistics,sys; print("%.4f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
"$b/gpufile" --version
echo "nginx on $base (page cache, loopback), $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "settings: $("$b/gpufile" config | grep -E '^(nthreads|remote_connections|http_max_in_flight|remote_task_size) ' | awk '{printf "%s=%s ", $1, $2}')"

curl16() { # url bytes: seconds for 16 parallel ranges to /dev/null
	local url=$1 bytes=$2 chunk t0 t1 pids=()
	chunk=$(((bytes + 15) / 16))
	t0=$(now)
	for i in $(seq 0 15); do
		a=$((i * chunk))
		e=$(((i + 1) * chunk - 1))
		[ $e -ge $((bytes - 1)) ] && e=$((bytes - 1))
		curl -s -o /dev/null -r "$a-$e" "$url" &
		pids+=($!)
	done
	wait "${pids[@]}"
	t1=$(now)
	python3 -c "print($t1 - $t0)"
}

for size in "${sizes[@]}"; do
	name=object-$size.bin
	"$b/gpufile" write "$dir/$name" --host --size "$size" --pattern sequence >/dev/null
	bytes=$(stat -c %s "$dir/$name")
	cat "$dir/$name" >/dev/null
	url=$base/$name
	curl -s -o /dev/null "$url"
	c1=() c16=() reused=() fresh=()
	for r in $(seq "$rounds"); do
		t0=$(now)
		curl -s -o /dev/null "$url"
		t1=$(now)
		c1+=("$(python3 -c "print($t1 - $t0)")")
		c16+=("$(curl16 "$url" "$bytes")")
	done
	out=$("$b/bench/remote_bench" big "$url" "$rounds")
	mapfile -t reused < <(awk '$1 == "reused" {print $2}' <<<"$out")
	mapfile -t fresh < <(awk '$1 == "fresh" {print $2}' <<<"$out")
	m1=$(median "${c1[@]}")
	m16=$(median "${c16[@]}")
	mr=$(median "${reused[@]}")
	mf=$(median "${fresh[@]}")
	gb() { python3 -c "print('%.2f' % ($bytes / $1 / 1e9))"; }
	echo
	echo "$size ($bytes bytes) into host memory, medians of $rounds (s, GB/s):"
	printf '  %-34s %8s %7s\n' "curl -o /dev/null (x1)" "$m1" "$(gb "$m1")"
	printf '  %-34s %8s %7s\n' "curl -r, 16 in parallel" "$m16" "$(gb "$m16")"
	printf '  %-34s %8s %7s  %sx curl x16 (goal 1.25), %sx curl x1 (goal 2)\n' \
		"gpufile, destination reused" "$mr" "$(gb "$mr")" "$(ratio "$m16" "$mr")" "$(ratio "$m1" "$mr")"
	printf '  %-34s %8s %7s  %sx curl x16 (goal 1.0), %sx curl x1\n' \
		"gpufile, fresh buffer" "$mf" "$(gb "$mf")" "$(ratio "$m16" "$mf")" "$(ratio "$m1" "$mf")"
	echo "  engine: $(grep in_flight_max <<<"$out")"
	rm -f "$dir/$name"
done

# Small ranged reads of one object (the first size's, written again).
name=small.bin
"$b/gpufile" write "$dir/$name" --host --size 1GiB --pattern sequence >/dev/null
cat "$dir/$name" >/dev/null
url=$base/$name
out=$("$b/bench/remote_bench" small "$url" "$count" "$range" "$rounds")
objbytes=$(stat -c %s "$dir/$name")
cfg=$dir/ranges.cfg
python3 - "$url" "$count" "$range" "$objbytes" >"$cfg" <<'PY'
import sys
url, n, size, obj = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    off = (i * size) % (obj - size)
    print('url = "%s"\nrange = "%d-%d"\noutput = "/dev/null"' % (url, off, off + size - 1))
    if i + 1 < n:
        print("next")
PY
cz=()
for r in $(seq "$rounds"); do
	t0=$(now)
	curl -s --no-progress-meter -Z --parallel-max 16 -K "$cfg" 2>/dev/null
	t1=$(now)
	cz+=("$(python3 -c "print($t1 - $t0)")")
done
mc=$(median $(awk '$1 == "curl_loop" {print $2}' <<<"$out"))
mp=$(median $(awk '$1 == "pread_loop" {print $2}' <<<"$out"))
mb=$(median $(awk '$1 == "batch" {print $2}' <<<"$out"))
mz=$(median "${cz[@]}")
us() { python3 -c "print('%.1f' % ($1 / $count * 1e6))"; }
echo
echo "$count ranged reads of $range bytes, medians of $rounds (s, us per read):"
printf '  %-40s %8s %7s\n' "bare libcurl loop, one at a time" "$mc" "$(us "$mc")"
printf '  %-40s %8s %7s  %sx the libcurl loop (goal <= 1.1)\n' "gpufile_pread, one at a time" "$mp" "$(us "$mp")" "$(ratio "$mp" "$mc")"
printf '  %-40s %8s %7s\n' "curl -Z --parallel-max 16" "$mz" "$(us "$mz")"
printf '  %-40s %8s %7s  %sx curl -Z (goal >= 1.5)\n' "gpufile batch, issued together" "$mb" "$(us "$mb")" "$(ratio "$mz" "$mb")"
echo "  engine: $(grep in_flight_max <<<"$out")"
