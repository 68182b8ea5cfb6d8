#!/usr/bin/env bash
# Remote reads against curl, one run (issue 15's benchmark):
#   bench/remote_bench.sh [FILE_SIZE]        (default 4GiB)
# Writes a FILE_SIZE object, serves it with nginx on 127.0.0.1 from the
# page cache (tests/remote/nginx_server.py; the carried .carry/nginx when
# there is no nginx), then measures, in GB/s (1e9 bytes/s):
#   curl x1        one `curl -o /dev/null` of the whole object
#   curl x16       16 parallel `curl -r` ranges of it (the goal's reference)
#   gpufile host   `gpufile read URL --host --window SIZE` (best of REPEAT)
#   gpufile gpu    `gpufile read URL --device 0 --window SIZE` (when a GPU
#                  is usable)
# --window SIZE makes each gpufile read one request for the whole object,
# as the curl references fetch it whole: without it the tool reads through
# 1 GiB windows, and each window ends with its last ranges in flight while
# the other connections idle (a barrier curl does not pay). The tool's
# default window is printed as well, for reference.
# and the ratios to curl x16 (goal: >= 0.9, into GPU memory too). Last, it
# takes `gpufile stats PID` from this shell while a `gpufile read` of the
# object runs in another process (bench/remote_stats_during_read.sh).
#
# Environment: BUILD_DIR (default build), WORKDIR (where the object is
# written, default /root/gpufile-bench or /tmp), REPEAT (default 3),
# NGINX_WORKERS (default 8), STATS_DURING (0: skip the stats capture),
# GPUFILE_* settings (e.g.
# GPUFILE_REMOTE_CONNECTIONS, GPUFILE_TASK_SIZE, GPUFILE_NTHREADS).
#
# The transfer engine's must-show figures (issue 36), one run, medians of
# ROUNDS (default 5):
#   bench/remote_bench.sh must-show [SIZE...]     (default 1GiB 4GiB)
# For each SIZE, into host memory at the default settings: gpufile into a
# destination reused between reads and into a fresh (never touched)
# buffer (bench/remote_bench.c big), against 16 parallel `curl -r` ranges
# and one `curl`, all to /dev/null; then 10,000 ranged reads of 64 KiB
# through one handle, one at a time against a bare libcurl loop
# (remote_bench.c small), and issued together as one gpufile batch
# against `curl -Z --parallel-max 16` fetching the same ranges; and the
# most ranges the engine had in flight.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ "${1:-}" = must-show ]; then
	shift
	exec bash bench/remote_must_show.sh "$@"
fi
size=${1:-4GiB}
g=$root/${BUILD_DIR:-build}/gpufile
repeat=${REPEAT:-3}
. bench/remote_nginx.sh remote-bench

"$g" --version
"$g" write "$dir/object.bin" --host --size "$size" --pattern sequence >/dev/null
bytes=$(stat -c %s "$dir/object.bin")
cat "$dir/object.bin" >/dev/null # into the page cache
nginx_serve
url=http://127.0.0.1:$port/object.bin
echo "object: $bytes bytes at $url (nginx, page cache, loopback)"

now() { date +%s.%N; }
gbps() { python3 -c "print('%.2f' % ($1 / ($3 - $2) / 1e9))"; }

curl -s -o /dev/null "$url" # connections and caches warm
t0=$(now)
curl -s -o /dev/null "$url"
t1=$(now)
curl1=$(gbps "$bytes" "$t0" "$t1")

best16=0
for _ in $(seq "$repeat"); do
	chunk=$(((bytes + 15) / 16))
	t0=$(now)
	for i in $(seq 0 15); do
		a=$((i * chunk))
		b=$(((i + 1) * chunk - 1))
		[ $b -ge $((bytes - 1)) ] && b=$((bytes - 1))
		curl -s -o /dev/null -r "$a-$b" "$url" &
	done
	wait $(jobs -p | grep -v "^$NGX_PID\$")
	t1=$(now)
	r=$(gbps "$bytes" "$t0" "$t1")
	best16=$(python3 -c "print(max($best16, $r))")
done

json_gbps() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2f" % d["gbps"])'; }
host=$("$g" read "$url" --host --window "$bytes" --repeat "$repeat" --json | json_gbps)
host_win=$("$g" read "$url" --host --repeat "$repeat" --json | json_gbps)
gpu=n/a gpu_win=n/a
if "$g" read "$url" --device 0 --size 1m >/dev/null 2>&1; then
	gpu=$("$g" read "$url" --device 0 --window "$bytes" --repeat "$repeat" --json | json_gbps)
	gpu_win=$("$g" read "$url" --device 0 --repeat "$repeat" --json | json_gbps)
fi

ratio() { [ "$1" = n/a ] && echo n/a || python3 -c "print('%.2f' % ($1 / $2))"; }
echo
printf '%-28s %8s %14s\n' "reader" "GB/s" "x curl x16"
printf '%-28s %8s %14s\n' "curl -o /dev/null (x1)" "$curl1" "$(ratio "$curl1" "$best16")"
printf '%-28s %8s %14s\n' "curl -r, 16 in parallel" "$best16" "1.00"
printf '%-28s %8s %14s\n' "gpufile read --host" "$host" "$(ratio "$host" "$best16")"
printf '%-28s %8s %14s\n' "gpufile read --device 0" "$gpu" "$(ratio "$gpu" "$best16")"
printf '%-28s %8s %14s\n' "  host, 1 GiB windows" "$host_win" "$(ratio "$host_win" "$best16")"
printf '%-28s %8s %14s\n' "  device, 1 GiB windows" "$gpu_win" "$(ratio "$gpu_win" "$best16")"
echo "settings: $("$g" config | grep -E '^(task_size|nthreads|remote_connections|bounce_buffer_size) ' | awk '{printf "%s=%s ", $1, $2}')"
if [ "${STATS_DURING:-1}" != 0 ]; then
	echo
	bash bench/remote_stats_during_read.sh "$url" 50
fi
